"""Benchmark: the engine's cost per round against a bare training loop, per device and executor.

    python -m fedlib.bench [--device auto|cpu|cuda] [--executor auto|sequential|batched]
                           [--suite table2|gfpl|ht0|all] [--rounds 4] [--fraction F]

``table2``: FedProto and FedMPS on Fashion-MNIST in FedMPS's Table II setting (20 clients,
n=3, k=100, std=2, batch 8, one local epoch; params/fedproto_fmnist.yaml, fedmps_fmnist.yaml).
``gfpl``: FedAvg, FedProto and GFPL in GFPL's Table 1 setting on the MNIST sample (20 clients, w-bar 4,
s-bar 18, batch 4, FedProto's CNN at d = 50): tiny batches, where a CPU gains most from batching
(GFPL's local training only: its first prototype interaction is at round 10).
``spiral``: FedProto on the synthetic spiral of the run tests (no files needed; not in ``all``).
``ht0``: ProtoNorm's Table 1 protocol with the paper's heterogeneous Ht0 family (20 clients,
practical Dir(0.1) split, batch 32) on ``--fraction`` of Fashion-MNIST (default: all of it on
CUDA, 5% on a CPU), with the training time split per architecture.

Each config runs through the simulator (training, aggregation, evaluation, the run-folder
writes) and, alternating round by round so that drift hits both alike, through a bare loop
(the same clients' samples, the same model classes, cross-entropy and SGD, nothing else).
Printed per config: train and eval seconds per round, samples per second, the writes' share
of a round, peak memory (host RSS; CUDA allocator peak), and the ratios engine / bare loop
(whole round, and training alone). The first round is warm-up and skipped. On a CPU every
run trains with one torch thread, as runs do.

    python -m fedlib.bench --count [--suite ...] [--executor ...]

counts instead what a round costs a GPU, on any device (:mod:`fedlib.counting`): round 2 (after
a warm-up round) runs under an op counter; printed per config are the lockstep training steps,
ATen ops per round split by phase (training: forward+backward and the rest of each step;
messages: broadcasts, prototypes and uploads; per-client setup and finish; evaluation;
aggregation; the run-folder writes), kernel launches, host syncs by kind, the tensors of
the checkpoint and the buffers it copies to the host (:func:`fedlib.store.stacked`), and beside
them the seconds of the uncounted rounds 3..R.

    python -m fedlib.bench --stacked R [--suite ...] [--rounds N]

times instead R seeds of each config trained one after another (``run_one``) and the same R seeds trained
in one process as one stacked group (:mod:`fedlib.stacked`), both under the batched executor, after a
one-round warm-up; printed: the wall seconds of each and the stacked time as a multiple of one run's
(the GPU target for FedMPS Table III's three seeds: at most 1.5x). The gain is for GPUs; on a CPU only a tiny,
overhead-bound model (``--suite spiral``) gains.

    python -m fedlib.bench --models

prints instead the seconds of one SGD step (32 grey 28x28 images, one torch thread) of
every architecture of the heterogeneous families ``ht0`` and ``ht0_lite``, which sets
what a ProtoNorm profile can afford on a CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import statistics
import tempfile
import time

import torch
import torch.nn.functional as F

from fedlib import store
from fedlib.config import load_config
from fedlib.engine import Simulator
from fedlib.models import member
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
        for b in range(max(1, len(d) // t.batch_size)):
            idx = perm[b * t.batch_size:(b + 1) * t.batch_size]
            loss = F.cross_entropy(model(d.x[idx])[0], d.y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    if ctx.device == "cuda":
        torch.cuda.synchronize()
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


def configs(suite: str, fraction: float, rounds: int, device: str, executor: str) -> dict:
    """The benchmarked configs (validated), by label."""
    over = [f"train.rounds={rounds}", f"device={device}", f"executor={executor}"]
    out = {}
    if suite in ("table2", "all"):
        out["FedProto, FedMPS Table II"] = load_config("params/fedproto_fmnist.yaml", over)
        out["FedMPS, FedMPS Table II"] = load_config("params/fedmps_fmnist.yaml", over)
    if suite == "spiral":  # synthetic (no files needed): the run tests' config
        from fedlib.paths import CHECKOUT

        out["FedProto, spiral (tests/data/spiral_fedproto.yaml)"] = load_config(
            CHECKOUT / "tests" / "data" / "spiral_fedproto.yaml", over)
    if suite in ("gfpl", "all"):
        from fedlib.papers import gfpl as G

        plan = G.load_plan("paper", rounds=rounds, device=device, executor=executor, seeds=[0])
        for m in ("fedavg", "fedproto", "gfpl"):
            out[f"{plan.label(m)}, GFPL Table 1 (MNIST-5k, w-bar 4)"] = G.config(plan, m, "mnist5k", 4)
    if suite in ("ht0", "all"):
        from fedlib.config import apply_overrides, validate
        from fedlib.papers import protonorm as P

        cfg = P.table1_config(P.load_plan("paper"), "protonorm", "practical")
        raw = apply_overrides({k: v for k, v in cfg.items() if k not in ("device", "executor")},
                              {"dataset.fraction": fraction, "train.rounds": rounds, "seeds": [0],
                               "device": device, "executor": executor})
        out[f"ProtoNorm Ht0, {100 * fraction:g}% of Fashion-MNIST"] = validate(raw)
    return out


def bench_config(label: str, cfg: dict, rounds: int) -> None:
    seed = cfg["seeds"][0]
    data, ctx, algo = build(cfg, seed)
    cuda = ctx.device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    n_train = sum(len(d) for d in data.train)
    eng, tr, ev, io, bare, per_arch = [], [], [], [], [], {}
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(algo, ctx, data, rounds, run_dir=tmp, progress=False, executor=cfg["executor"])
        _, clients, server, records = sim._fresh_state()
        models = [ctx.new_model(cid) for cid in range(data.num_clients)]
        for r in range(1, rounds + 1):  # engine round r, then bare pass r: drift hits both alike
            clients, server, rec = sim.step(r, clients, server)
            records.append(rec)
            sim._persist(r, clients, server, records, last=r == rounds)
            eng.append(rec["seconds"] + sim.io_seconds[-1])
            tr.append(rec["train_seconds"])
            ev.append(rec["eval_seconds"])
            io.append(sim.io_seconds[-1])
            if r > 1:
                for cid, sec in sim.client_seconds.items():
                    per_arch.setdefault(member(ctx.model_name, cid), []).append(sec / (rounds - 1))
            bare.append(bare_pass(data, ctx, models, r))
    med = lambda v: statistics.median(v[1:] or v)  # noqa: E731 - round 1 is warm-up
    peak_host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_dev = torch.cuda.max_memory_allocated() / 2 ** 20 if cuda else 0.0
    where = f"{ctx.device}" + (f" ({torch.cuda.get_device_name()})" if cuda else f", {torch.get_num_threads()} thread")
    print(f"{label}: {data.num_clients} clients, {n_train} training samples a round, batch {ctx.train.batch_size}; "
          f"{where}, {cfg['executor']} executor; median of rounds 2..{rounds}")
    print(f"  engine round   {med(eng):8.3f} s   train+aggregate {med(tr):.3f} s, evaluate {med(ev):.3f} s, "
          f"writes {med(io):.3f} s ({100 * med(io) / med(eng):.2f}% of the round)   {n_train / med(tr):8.0f} samples/s")
    print(f"  bare loop pass {med(bare):8.3f} s   {n_train / med(bare):8.0f} samples/s   ratio engine/bare "
          f"{med(eng) / med(bare):.3f} x (training alone {med(tr) / med(bare):.3f} x)")
    print(f"  peak memory    host {peak_host:,.0f} MB" + (f", CUDA {peak_dev:,.0f} MB" if cuda else ""))
    if sim.cohort.batched is not None:
        from fedlib.executors import GRAPHS_ENV, step_mode

        ex = sim.cohort.batched
        print(f"  lockstep steps {step_mode(ctx.device, ex.mode)} ({ex.captured} epochs captured as CUDA graphs; "
              f"${GRAPHS_ENV}=1 turns capture on)")
    if len(per_arch) > 1:
        split = ", ".join(f"{a} {sum(v):.3f} s" for a, v in per_arch.items())
        print(f"  training per architecture (all its clients, per round): {split}")


def stacked_config(label: str, cfg: dict, runs: int, rounds: int) -> None:
    """Wall seconds of ``runs`` seeds of ``cfg`` one after another and stacked (:mod:`fedlib.stacked`)."""
    from fedlib.runner import run_one, run_stacked

    seeds = list(range(runs))
    with tempfile.TemporaryDirectory() as tmp:
        base = {**cfg, "executor": "batched", "seeds": seeds}
        warm = {**base, "results_dir": f"{tmp}/warm", "train": {**cfg["train"], "rounds": 1}}
        run_one(warm, 0, progress=False)  # data, kernels and allocator warmed up for both
        alone = {**base, "results_dir": f"{tmp}/alone"}
        t0 = time.perf_counter()
        for s in seeds:
            run_one(alone, s, progress=False)
        _sync_device(cfg["device"])
        t_alone = time.perf_counter() - t0
        together = {**base, "results_dir": f"{tmp}/stacked"}
        t0 = time.perf_counter()
        run_stacked([(together, s) for s in seeds], progress=False)
        _sync_device(cfg["device"])
        t_stacked = time.perf_counter() - t0
    one = t_alone / runs
    print(f"{label}: {runs} seeds x {rounds} rounds on {cfg['device']}, batched executor")
    print(f"  one after another {t_alone:8.2f} s   ({one:.2f} s a run, {runs * rounds / t_alone:.3f} rounds/s)")
    print(f"  stacked           {t_stacked:8.2f} s   ({t_stacked / one:.2f} x one run, "
          f"{runs * rounds / t_stacked:.3f} rounds/s)")


PHASES = (("train.fwdbwd", "train fwd+bwd"), ("train.step", "train other"), ("messages", "messages"),
          ("setup", "setup/finish"), ("evaluate", "evaluate"), ("aggregate", "aggregate"), ("receive", "receive"),
          ("checkpoint", "checkpoint"), ("other", "other"))


def count_round(sim, clients, server, records, r: int):
    """Round ``r`` (state, record and writes) under an :class:`~fedlib.counting.OpCounter`."""
    from fedlib.counting import OpCounter

    with OpCounter() as c:
        clients, server, rec = sim.step(r, clients, server)
        records.append(rec)
        sim._persist(r, clients, server, records, last=False)
    return c, clients, server


def state_tensors(obj) -> int:
    """Tensors in a state."""
    if isinstance(obj, torch.Tensor):
        return 1
    if isinstance(obj, dict):
        return sum(state_tensors(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_tensors(v) for v in obj)
    return 0


def count_config(label: str, cfg: dict, rounds: int) -> dict:
    """Print (and return) the counted round 2 of ``cfg`` and the seconds of rounds 3..``rounds``."""
    data, ctx, algo = build(cfg, cfg["seeds"][0])
    secs = []
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulator(algo, ctx, data, rounds, run_dir=tmp, progress=False, executor=cfg["executor"])
        _, clients, server, records = sim._fresh_state()
        for r in range(1, rounds + 1):
            if r == 2:
                c, clients, server = count_round(sim, clients, server, records, r)
                continue
            t0 = time.perf_counter()
            clients, server, rec = sim.step(r, clients, server)
            records.append(rec)
            sim._persist(r, clients, server, records, last=r == rounds)
            _sync_device(ctx.device)
            if r > 2:
                secs.append(time.perf_counter() - t0)
    steps = c.entries["train.fwdbwd"]
    fwd = c.ops["train.fwdbwd"]
    split = ", ".join(f"{name} {c.ops[key]:,}" + (f" ({fwd // max(steps, 1):,}/step)" if key == "train.fwdbwd" else "")
                      for key, name in PHASES if c.ops[key])
    non_train = c.total_ops - fwd - c.ops["train.step"]
    syncs = ", ".join(f"{k} {c.syncs[k]:,}" for k in ("item", "shape", "h2d", "d2h"))
    where = ", ".join(f"{k} {v:,}" for k, v in c.sync_where.most_common())
    tensors = state_tensors(clients) + state_tensors(server)
    ckpt = store.stacked({"clients": clients, "server": server})[1]  # what save_checkpoint writes
    sec = statistics.median(secs) if secs else float("nan")
    print(f"{label} ({ctx.device}, {cfg['executor']}): round 2 counted, {steps} training steps")
    print(f"  ops/round {c.total_ops:,} (kernel launches {c.total_launches:,}; not training {non_train:,}): {split}")
    print(f"  host syncs/round {c.total_syncs:,}: {syncs}" + (f" (in {where})" if where else ""))
    print(f"  checkpoint: {tensors:,} tensors in {ckpt:,} buffers copied to the host; seconds/round {sec:.3f} "
          f"(rounds 3..{rounds}, not counted)")
    return {"ops": c.total_ops, "launches": c.total_launches, "syncs": c.total_syncs, "steps": steps,
            "non_training": non_train, "seconds": sec, "by_phase": dict(c.ops), "by_kind": dict(c.syncs),
            "checkpoint_tensors": tensors, "checkpoint_buffers": ckpt}


def _sync_device(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedlib.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
    ap.add_argument("--executor", default="auto", help="auto (batched on CUDA, sequential on a CPU), sequential, "
                                                        "batched")
    ap.add_argument("--suite", default="table2", choices=("table2", "gfpl", "ht0", "all", "spiral"))
    ap.add_argument("--rounds", type=int, default=4, help="rounds (and bare passes) to time; the first is warm-up")
    ap.add_argument("--fraction", type=float, help="data fraction of the ht0 suite (default: 1 on CUDA, 0.05 on CPU)")
    ap.add_argument("--count", action="store_true", help="count ATen ops and host syncs per round (any device)")
    ap.add_argument("--models", action="store_true", help="time one SGD step of each heterogeneous-family member")
    ap.add_argument("--stacked", type=int, metavar="R", help="time R seeds one after another and stacked in one "
                    "process (batched executor)")
    args = ap.parse_args(argv)
    if args.models:
        model_steps()
        return 0
    from fedlib.device import resolve
    from fedlib.validation import ConfigError

    try:
        device = resolve(args.device)
        fraction = args.fraction or (1.0 if device == "cuda" else 0.05)
        cfgs = configs(args.suite, fraction, args.rounds, device, args.executor)
    except ConfigError as exc:
        print(f"error: {exc}")
        return 2
    if device == "cuda":
        from fedlib.device import deterministic_cuda

        deterministic_cuda()  # as runs train
    with one_thread() if device == "cpu" else contextlib.nullcontext():
        for label, cfg in cfgs.items():
            if args.stacked:
                stacked_config(label, cfg, args.stacked, args.rounds)
            elif args.count:
                count_config(label, cfg, max(args.rounds, 3))
            else:
                bench_config(label, cfg, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
