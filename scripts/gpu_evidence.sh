#!/usr/bin/env bash
# The evidence planner's GPU work as one prepared command (docs/runs.md, "The report and the evidence planner"):
# the run groups of a saved plan, each group's seeds stacked on the GPU: first the seeds the plan adds to groups
# (each group's added seeds trained at once to their rounds, archived as they end), then the groups to extend, step
# by step towards their plateau until the budget is spent, each group archived as soon as a step finishes; the
# archive entries it wrote packed into OUTDIR/archive-new.tar.gz.
#
#   here (the ledgers are rendered here):  python -m fedlib evidence --save-plan gpu-plan.json
#   on the GPU machine:                    bash scripts/gpu_evidence.sh gpu-plan.json OUTDIR [BUDGET]
#   back here:                             tar -xzf OUTDIR/archive-new.tar.gz && python -m fedlib archive --index
#                                          && python -m fedlib archive --check && python -m fedlib report
#
# BUDGET (default 6m) is the wall time after which no new step starts; a step under way finishes (a group's
# first step trains its runs from round 1 to the CPU record's length plus 50 rounds), and $LIMIT seconds
# (default 540) stop everything (SIGINT: finished steps stay archived). Fashion-MNIST is read from $FEDLIB_DATA
# or the checkout's data/ (copy the four IDX .gz files to data/fashion-mnist/ when the machine has none).
set -u
plan=${1:?usage: bash scripts/gpu_evidence.sh PLAN.json [OUTDIR] [BUDGET]}
out=${2:-gpu-out}
budget=${3:-6m}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
py=${PYTHON:-python3}
marker=$(mktemp)
t0=$SECONDS
$py -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, torch.cuda.get_device_name())" \
    | tee "$out/machine.log"
timeout -s INT "${LIMIT:-540}" $py -m fedlib evidence --run --device cuda --plan "$plan" --budget "$budget" \
    > "$out/evidence.log" 2>&1
echo "evidence: exit $? after $((SECONDS - t0)) s" | tee -a "$out/machine.log"
# progress bars end their lines with \r: keep the lines a person reads
tr '\r' '\n' < "$out/evidence.log" | grep -v "round/s\|?round" | tail -n 80
gzip -f "$out/evidence.log"
find archive -newer "$marker" -type f ! -name INDEX.json ! -name '*.lock' | sort > "$out/archive-new.txt"
echo "archive entries written: $(cut -d/ -f2 "$out/archive-new.txt" | sort -u | wc -l)" | tee -a "$out/machine.log"
tar -czf "$out/archive-new.tar.gz" -T "$out/archive-new.txt"
rm -f "$marker"
