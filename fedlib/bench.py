"""Benchmark: the engine's cost per round against a bare training loop.

    python -m fedlib.bench [--rounds 6] [--config params/fedproto_fmnist.yaml]

Runs FedProto on Fashion-MNIST in FedMPS's Table II setting (20 clients, n=3, k=100,
std=2, batch 8, 1 local epoch) through the simulator, then trains the same clients'
samples with the same model class in one plain loop (cross-entropy, SGD, no
prototypes, no messages, no evaluation, no checkpoints), one torch thread as runs
train, alternating an engine round and a bare pass so that drift hits both alike. It
prints the median seconds per round of both (the first round is warm-up and skipped),
the time of the run-folder writes (atomic log and checkpoint), training samples per
second, peak resident memory, and the ratio engine / bare loop, which is the engine's
overhead (evaluation included). Targets: overhead <= 1.0x, writes < 2% of a round.

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
from fedlib.runner import build, one_thread


def bare_pass(data, ctx, models, p: int) -> float:
    """Seconds of one pass of a plain per-client SGD loop over the same samples (no
    prototypes, messages, evaluation or files)."""
    t = ctx.train
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
    return time.perf_counter() - t0


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
    with one_thread():  # as every run trains
        data, ctx, algo = build(cfg, seed)
        n_train = sum(len(d) for d in data.train)
        steps = sum(max(1, len(d) // ctx.train.batch_size) for d in data.train)
        eng, eng_train, eng_eval, io, bare = [], [], [], [], []
        with tempfile.TemporaryDirectory() as tmp:
            sim = Simulator(algo, ctx, data, args.rounds, run_dir=tmp, progress=False)
            _, clients, server, records = sim._fresh_state()
            models = [ctx.new_model(cid) for cid in range(data.num_clients)]
            for r in range(1, args.rounds + 1):  # engine round r, then bare pass r: drift hits both alike
                clients, server, rec = sim.step(r, clients, server)
                records.append(rec)
                sim._persist(r, clients, server, records, last=r == args.rounds)
                eng.append(rec["seconds"] + sim.io_seconds[-1])
                eng_train.append(rec["train_seconds"])
                eng_eval.append(rec["eval_seconds"])
                io.append(sim.io_seconds[-1])
                bare.append(bare_pass(data, ctx, models, r))
    med = lambda v: statistics.median(v[1:])  # noqa: E731 - round 1 is warm-up
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    ratio = med(eng) / med(bare)
    print(f"benchmark: {algo.name} on {cfg['dataset']['name']}, {data.num_clients} clients, {n_train} training "
          f"samples, {steps} steps of batch {ctx.train.batch_size} per round; one torch thread (as runs train); "
          f"median of rounds 2..{args.rounds}, engine and bare loop interleaved")
    print(f"  engine round      {med(eng):7.3f} s  (train+aggregate {med(eng_train):.3f} s, evaluate "
          f"{med(eng_eval):.3f} s, log+checkpoint {med(io):.3f} s)  {n_train / med(eng):8.0f} samples/s")
    print(f"  bare loop pass    {med(bare):7.3f} s{' ' * 62}{n_train / med(bare):8.0f} samples/s")
    print(f"  overhead ratio    {ratio:7.3f} x   (engine round / bare pass; target <= 1.0: "
          f"{'met' if ratio <= 1.0 else 'NOT met'})")
    print(f"  training ratio    {med(eng_train) / med(bare):7.3f} x   (train+aggregate / bare pass: the same work "
          "plus the method's own loss terms, without evaluation)")
    share = 100 * med(io) / med(eng)
    print(f"  run-folder writes {share:7.2f} %   (atomic log rewrite + checkpoint with its log hash, per round; "
          f"target < 2: {'met' if share < 2 else 'NOT met'})")
    print(f"  peak memory       {peak_mb:7.0f} MB (process max RSS, dataset included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
