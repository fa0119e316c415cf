"""Benchmark: the engine's cost per round against a bare training loop.

    python -m fedlib.bench [--rounds 6] [--config params/fedproto_fmnist.yaml]

Runs FedProto on Fashion-MNIST in FedMPS's Table II setting (20 clients, n=3, k=100,
std=2, batch 8, 1 local epoch) through the simulator, then trains the same clients'
samples with the same model class in one plain loop (cross-entropy, SGD, no
prototypes, no messages, no evaluation, no checkpoints). It prints the median
seconds per round of both (the first round is warm-up and skipped), training samples
per second, peak resident memory, and the ratio engine / bare loop, which is the
engine's overhead. Targets: overhead <= 1.2x and <= 1.5 s per round.

    python -m fedlib.bench --models

prints instead the seconds of one SGD step (32 grey 28x28 images, one torch thread) of
every architecture of the heterogeneous families ``ht0`` and ``ht0_lite``, which sets
what a ProtoNorm profile can afford on a CPU.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from fedlib.engine import Simulator
from fedlib.config import load_config
from fedlib.runner import build


def bare_loop(data, ctx, passes: int) -> list[float]:
    """Seconds per pass of a plain per-client SGD loop over the same samples."""
    models = [ctx.new_model(cid) for cid in range(data.num_clients)]
    t = ctx.train
    times = []
    for p in range(passes):
        t0 = time.perf_counter()
        for cid, model in enumerate(models):
            d = data.train[cid]
            opt = torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum)
            model.train()
            perm = torch.randperm(len(d), generator=torch.Generator().manual_seed(p * 1000 + cid))
            for b in range(len(d) // t.batch_size):
                idx = perm[b * t.batch_size:(b + 1) * t.batch_size]
                loss = F.cross_entropy(model(d.x[idx])[0], d.y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        times.append(time.perf_counter() - t0)
    return times


def model_steps(batch: int = 32, steps: int = 10) -> None:
    """Median seconds per SGD step of each member of the heterogeneous families."""
    from fedlib.models import FAMILIES, build_model

    torch.set_num_threads(1)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    print(f"one SGD step, batch {batch} of 1x28x28, torch threads 1 (median of {steps} after 3 warm-up steps)")
    for fam in ("ht0", "ht0_lite"):
        costs = []
        for arch in FAMILIES[fam]:
            model = build_model(arch, (1, 28, 28), 10)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            times = []
            for i in range(steps + 3):
                t0 = time.perf_counter()
                loss = F.cross_entropy(model(x)[0], y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                if i >= 3:
                    times.append(time.perf_counter() - t0)
            costs.append(statistics.median(times))
            n = sum(p.numel() for p in model.parameters())
            print(f"  {fam:9s} {arch:20s} {costs[-1]:7.4f} s  {n:>10,d} parameters")
        print(f"  {fam:9s} {'mean over members':20s} {statistics.mean(costs):7.4f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedlib.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="params/fedproto_fmnist.yaml")
    ap.add_argument("--rounds", type=int, default=6, help="rounds (and bare passes) to time; the first is warm-up")
    ap.add_argument("--models", action="store_true", help="time one SGD step of each heterogeneous-family member")
    args = ap.parse_args(argv)
    if args.models:
        model_steps()
        return 0

    cfg = load_config(args.config, [f"train.rounds={args.rounds}"])
    seed = cfg["seeds"][0]
    data, ctx, algo = build(cfg, seed)
    n_train = sum(len(d) for d in data.train)
    steps = sum(max(1, len(d) // ctx.train.batch_size) for d in data.train)
    with tempfile.TemporaryDirectory() as tmp:
        recs = Simulator(algo, ctx, data, args.rounds, run_dir=tmp, progress=False).run()
    eng = statistics.median(r["seconds"] for r in recs[1:])
    eng_train = statistics.median(r["train_seconds"] for r in recs[1:])
    eng_eval = statistics.median(r["eval_seconds"] for r in recs[1:])
    bare = statistics.median(bare_loop(data, ctx, args.rounds)[1:])
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ratio = eng / bare
    print(f"benchmark: {algo.name} on {cfg['dataset']['name']}, {data.num_clients} clients, {n_train} training "
          f"samples, {steps} steps of batch {ctx.train.batch_size} per round; torch threads "
          f"{torch.get_num_threads()}; median of rounds 2..{args.rounds}")
    print(f"  engine round      {eng:7.3f} s  (train+aggregate {eng_train:.3f} s, evaluate {eng_eval:.3f} s)"
          f"  {n_train / eng:8.0f} samples/s")
    print(f"  bare loop pass    {bare:7.3f} s{' ' * 43}{n_train / bare:8.0f} samples/s")
    print(f"  overhead ratio    {ratio:7.3f} x   (target <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'})")
    print(f"  seconds per round {eng:7.3f} s   (target <= 1.5: {'met' if eng <= 1.5 else 'NOT met'}; "
          f"the bare loop alone takes {bare:.3f} s on this machine)")
    print(f"  peak memory       {peak_mb:7.0f} MB (process max RSS, dataset included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
