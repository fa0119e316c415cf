"""Running experiments: the result cache, run locks, resume, the process pool, finished
runs brought back.

Each run's folder ``<results_dir>/<run id>/`` (:func:`fedlib.config.run_dir`) holds
``config.yaml``, ``partition.json``, ``rounds.jsonl``, ``checkpoint.pt`` and, once
finished, ``summary.json``: a finished run is a cache hit, an unfinished one resumes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from fedlib import archive, store
from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Context, Round
from fedlib.config import TrainConfig, run_dir, target_rounds
from fedlib.device import deterministic_cuda, machine_record
from fedlib.data import FederatedData, load_dataset, make_partition
from fedlib.data.sources import subsample
from fedlib.engine import Simulator
from fedlib.metrics import over_seeds, run_numbers
from fedlib.validation import ConfigError, Interval, check_value, check_writable


def build(cfg: dict, seed: int):
    """Dataset, partition, context and algorithm of one run (no training).

    Everything that needs the data is checked here, before anything is written: the
    partition (every client gets a training and a test sample) and the model (one sample
    goes through every architecture the clients run).
    """
    ds, partition = split(cfg, seed)
    ctx = make_context(cfg, ds, partition, seed)
    data = FederatedData(ds, partition).to(ctx.device)
    dry_forward(ctx, ds)
    return data, ctx, make_algorithm(cfg["algorithm"])


def split(cfg: dict, seed: int):
    """The run's dataset (its ``fraction``, when set) and partition, checked: every client gets a
    training and a test sample. Kept for the next runs of this process with the same data and partition
    (a grid's methods share them; a retried Dirichlet split can take seconds)."""
    from fedlib.data.sources import data_root

    key = json.dumps([cfg["dataset"], str(data_root(cfg["data_root"])), cfg["partition"], seed], sort_keys=True)
    return _split(key)


@functools.lru_cache(maxsize=4)
def _split(key: str):
    dataset, data_root, partition, seed = json.loads(key)
    return _split_now({"dataset": dataset, "data_root": data_root, "partition": partition}, seed)


def _split_now(cfg: dict, seed: int):
    ds = load_dataset(cfg["dataset"]["name"], cfg["data_root"], cfg["dataset"].get("encoder"))
    if cfg["dataset"].get("fraction", 1) != 1:
        ds = subsample(ds, cfg["dataset"]["fraction"], seed=0)  # the same images for every run seed
    pargs = dict(cfg["partition"])
    pargs.setdefault("seed", seed)
    check_clients(pargs.get("num_clients"), ds)
    partition = make_partition(pargs, ds.y_train.numpy(), ds.y_test.numpy(), ds.num_classes,
                               domains=None if ds.domain_names is None else (ds.domain_train, ds.domain_test))
    empty = [c for c in range(partition.num_clients) if not len(partition.train[c]) or not len(partition.test[c])]
    if empty:
        shown = ", ".join(map(str, empty[:8])) + (f" and {len(empty) - 8} more" if len(empty) > 8 else "")
        raise ConfigError("partition.num_clients", partition.num_clients, (
            f"a split that leaves every client a training and a test sample; clients {shown} get none of one "
            f"({len(ds.y_train)} + {len(ds.y_test)} samples in {ds.name}): use fewer clients or more data"))
    return ds, partition


def make_context(cfg: dict, ds, partition, seed: int) -> Context:
    """What every party of the run knows (shapes, model recipe, training settings, seed, device)."""
    model_args = {k: v for k, v in cfg["model"].items() if k != "name"}
    return Context(num_classes=ds.num_classes, input_shape=ds.input_shape, num_clients=partition.num_clients,
                   model_name=cfg["model"]["name"], model_args=model_args,
                   train=TrainConfig(**cfg["train"]).settings(), seed=seed, device=cfg.get("device", "cpu"),
                   dp_sgd=dp_sgd_settings(cfg.get("defense")))


def dp_sgd_settings(spec) -> tuple[float, float] | None:
    """``(clip_sample, noise_multiplier)`` of a DP-SGD ``defense`` block (local training clips and noises each
    sample's gradient: :mod:`fedlib.privacy.dpsgd`); None for no defence or the upload defence."""
    if not spec or spec.get("mechanism") != "dp_sgd":
        return None
    return float(spec["clip_sample"]), float(spec["noise_multiplier"])


def check_clients(num_clients, ds) -> None:
    """Fail fast when there are more clients than samples (before a partitioner tries)."""
    n = len(ds.y_train) + len(ds.y_test)
    if isinstance(num_clients, int) and not isinstance(num_clients, bool) and num_clients > len(ds.y_train):
        raise ConfigError("partition.num_clients", num_clients,
                          f"at most {len(ds.y_train)}, the training samples of {ds.name} ({n} with the test split): "
                          "every client needs at least one")


def dry_forward(ctx: Context, ds) -> None:
    """One sample through every architecture the clients run; a mismatch names the model's
    expected input, the dataset's shape and the models that fit."""
    from fedlib.models import FAMILIES, MODELS, build_model, member

    x = ds.x_train[:1].to(ctx.device)
    archs = {member(ctx.model_name, c): c for c in range(min(ctx.num_clients, 8))}
    for arch, cid in archs.items():
        try:
            with torch.random.fork_rng(devices=[]), torch.no_grad():
                model = ctx.new_model(cid)
                model.eval()
                model(x)
        except TypeError as exc:
            raise ConfigError("model", ctx.model_name, f"arguments the model takes ({exc})") from None
        except (RuntimeError, ValueError, ConfigError) as exc:
            fit = []
            for name in sorted(MODELS):
                try:
                    with torch.random.fork_rng(devices=[]), torch.no_grad():
                        build_model(name, ds.input_shape, ds.num_classes).eval()(x)
                    fit.append(name)
                except Exception:  # noqa: BLE001 - any failure means "does not fit"
                    pass
            fit += [f for f, members in FAMILIES.items() if all(m in fit for m in members)]
            why = " ".join(str(exc).split())[:160]
            raise ConfigError("model", ctx.model_name, (
                f"a model for {ds.name} inputs of shape {tuple(ds.input_shape)} ({arch} failed on one sample: {why}); "
                f"models that fit: {', '.join(fit) or 'none'}")) from None


@contextlib.contextmanager
def one_thread():
    """Train with a single torch thread, restoring the previous setting afterwards.

    Float reductions depend on the thread count, so fixing it makes a (config, seed)
    give the same numbers on any machine; on 2 cores two single-threaded runs side by
    side also finish ~1.5x sooner than one after the other with two threads each
    (see :func:`run_many`).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_one(cfg: dict, seed: int, progress: bool = True, on_round=None) -> dict:
    """Run (or resume, or fetch from the cache) one seed of ``cfg``; return its summary.
    ``on_round(r)`` is called after each round this call trains (see :class:`~fedlib.engine.Simulator`)."""
    if cfg.get("device") == "cuda":
        deterministic_cuda()
    with one_thread():
        return _run_one(cfg, seed, progress, on_round)


@contextlib.contextmanager
def run_lock(folder: Path):
    """Exclusive lock on a run folder (``.lock``, POSIX ``flock``): a second process asking
    for the same run waits until the first has finished (then finds it cached) instead of
    training it again and interleaving the two logs. The lock dies with its process."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            print(f"{folder.name}: another process (pid {owner}) is running this run; waiting for it", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        store.remove_stale_temporary(folder)   # left by a process killed mid-write (kill -9): it holds no lock now
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_summary(cfg: dict, seed: int, repair: bool = False) -> dict | None:
    """The summary of a finished, consistent run of ``(cfg, seed)`` in the results folder, or ``None`` (trains
    nothing). While :func:`fedlib.results.archive_only` is in force, the run archive's record of it instead."""
    if archive.reading_only():   # the archive's record of this very run stands in for the results folder
        return archive.summary(cfg, seed)
    summary = store.verify_finished(run_dir(cfg, seed), cfg["train"]["rounds"], repair=repair,
                                    at_least=target_rounds(cfg))
    return None if summary is None else {**summary, "cache_hit": True}


_LOADED_CODE: str | None = None


def loaded_code() -> str:
    """The commit of the code this process runs (:func:`fedlib.paths.git_commit`), read once, before
    its first run trains: a run records the code it was made with, not a checkout that moved on while
    a long grid ran."""
    global _LOADED_CODE
    if _LOADED_CODE is None:
        from fedlib.paths import git_commit

        _LOADED_CODE = git_commit()
    return _LOADED_CODE


def _run_one(cfg: dict, seed: int, progress: bool, on_round=None) -> dict:
    folder = run_dir(cfg, seed)
    cached = cached_summary(cfg, seed)
    if cached is not None:
        return cached
    refuse_to_train([(cfg, seed)])
    check_writable(cfg["results_dir"])
    loaded_code()
    built = build(cfg, seed)  # data-dependent config errors surface here, before any file is written
    with run_lock(folder):
        cached = cached_summary(cfg, seed, repair=True)  # finished by a process we waited for, or damaged
        if cached is not None:
            return cached
        return _train(cfg, seed, folder, progress, built, on_round)


def refuse_to_train(jobs: list[tuple[dict, int]]) -> None:
    """Raise :class:`fedlib.results.NotArchived` naming ``jobs`` while the archive alone is read (nothing may train
    or be written then); nothing otherwise."""
    if archive.reading_only() and jobs:
        names = ", ".join(f"{c['name']} seed {s}" for c, s in jobs[:3]) + (f" and {len(jobs) - 3} more"
                                                                           if len(jobs) > 3 else "")
        raise archive.NotArchived(f"{len(jobs)} run{'s' if len(jobs) != 1 else ''} not in the run archive: {names}")


def rerunnable_config(cfg: dict, seed: int) -> dict:
    """The run's config as ``python -m fedlib run`` accepts it: this seed only, every default
    written out (so it reruns exactly this run: same id, a cache hit where the run exists)."""
    out = {k: v for k, v in cfg.items() if k != "seeds" and not (k == "data_root" and v is None)}
    out["seeds"] = [seed]
    return out


def config_text(cfg: dict, seed: int, folder: Path) -> str:
    """The run folder's ``config.yaml``: :func:`rerunnable_config` under one comment line saying how to rerun it
    (:func:`fedlib.store.rerun_hint`: a command to paste, whatever the folder's name holds)."""
    return store.rerun_hint(folder, seed) + "\n" + yaml.safe_dump(rerunnable_config(cfg, seed), sort_keys=False)


def trained_by(cfg: dict, algo) -> str:
    """The executor that trained the run's clients: the config's, except that a method the batched
    executor cannot batch (:meth:`~fedlib.algorithms.batching.Batching.batch_support`) trained sequentially
    under it (the run's identity keeps the config's executor; its summary and "made by" line say how)."""
    executor = cfg.get("executor", "sequential")
    return "sequential" if executor == "batched" and algo.batch_support() else executor


def _train(cfg: dict, seed: int, folder: Path, progress: bool, built, on_round=None, local=None,
           stacked: int = 1) -> dict:
    """Train a run into ``folder``; ``local``: the in-process clients (default :class:`~fedlib.engine.LocalClients`;
    :mod:`fedlib.stacked` gives its lockstep cohort, ``stacked`` saying how many runs trained together)."""
    if archive.reading_only():
        raise archive.NotArchived(f"{cfg['name']} seed {seed} (run {folder.name}) is not in the run archive")
    data, ctx, algo = built
    start_folder(cfg, seed, folder, data.partition)
    t = cfg["train"]
    executor = cfg.get("executor", "sequential")
    cohort = local
    from fedlib.privacy.defense import upload_defense

    if upload_defense(cfg.get("defense")):  # every upload clipped and noised before the server sees it
        from fedlib.engine import LocalClients
        from fedlib.privacy.defense import DefendedClients

        cohort = DefendedClients(local or LocalClients(algo, ctx, data, executor), cfg["defense"], seed)
    (folder / store.SUMMARY).unlink(missing_ok=True)   # a run shorter than asked: unfinished until extended
    sim = Simulator(algo, ctx, data, target_rounds(cfg), t["participation"], t["eval_every"], run_dir=folder,
                    progress=progress, desc=f"{cfg['name']} seed {seed}", executor=executor, clients=cohort,
                    on_round=on_round, total=t["rounds"])
    t0 = time.perf_counter()
    records = sim.run()
    return finish_folder(cfg, seed, folder, algo, ctx, data.dataset, data.partition, records, t0,
                         trained_by(cfg, algo), stacked)


def start_folder(cfg: dict, seed: int, folder: Path, partition) -> None:
    """A new run folder's ``config.yaml`` (it reruns the run) and ``partition.json``."""
    store.atomic_write(folder / store.CONFIG, config_text(cfg, seed, folder))
    store.atomic_write(folder / store.PARTITION, json.dumps(partition.record()))


def finish_folder(cfg: dict, seed: int, folder: Path, algo, ctx: Context, dataset, partition, records: list[dict],
                  t0: float, executor: str, stacked: int = 1) -> dict:
    """Write the finished run's ``summary.json`` (``t0``: when training started; ``executor``: what trained
    the clients; ``stacked``: how many runs trained in one stacked group with it, recorded when more than one)
    and return it."""
    summary = {
        "run_id": folder.name, "name": cfg["name"], "seed": seed, "algorithm": cfg["algorithm"]["name"],
        "rules": list(algo.RULES), "data": dataset.record(), "partition_hash": partition.hash,
        **run_numbers(records), "wall_seconds_this_call": time.perf_counter() - t0,
        "machine": machine_record(ctx.device), "executor": executor,
        "code": loaded_code(), "finished_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    if len(records) > cfg["train"]["rounds"]:
        summary["extended_from"] = cfg["train"]["rounds"]
    if stacked > 1:
        summary["stacked_runs"] = stacked
    if records[-1].get("diverged"):
        summary["diverged_at"] = records[-1]["round"]
    summary = store.write_summary(folder, summary, store.log_text(records), checkpoint_round=len(records))
    summary["cache_hit"] = False
    return summary


def run_experiment(cfg: dict, progress: bool = True) -> list[dict]:
    """Every seed of a validated config; returns their summaries."""
    return [run_one(cfg, s, progress) for s in cfg["seeds"]]


_TRAINING = False  # in a worker: whether a run is in progress


def _init_worker() -> None:
    """Worker initializer. Only the parent decides to stop: a terminal's Ctrl-C (sent to the whole
    process group) is ignored here, and the parent's SIGTERM (also sent, on Linux, when the parent
    dies: otherwise killing a notebook or script leaves its workers training) ends the run in
    progress through ``KeyboardInterrupt`` (its temporary files go, its checkpoint stays) or an
    idle worker at once. It logs as the parent does (:func:`fedlib.logs.from_env`)."""
    import signal

    from fedlib import logs

    logs.from_env()

    def stop(signum, frame):
        if _TRAINING:
            raise KeyboardInterrupt
        os._exit(130)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, stop)
    # tqdm's default lock is a multiprocessing RLock, a named semaphore in a spawned process; a worker stopped by
    # the parent ends in os._exit, so that semaphore would never be unlinked and multiprocessing's resource tracker
    # would print a two-line "leaked semaphore" warning after Ctrl-C. A worker shows no bar: a thread lock does.
    import threading

    from tqdm import std as tqdm_std

    tqdm_std.tqdm.set_lock(threading.RLock())
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(cfg: dict, seed: int) -> dict:
    global _TRAINING
    _TRAINING = True
    try:
        return run_one(cfg, seed, progress=False)
    except KeyboardInterrupt:  # stopped by the parent: unwound (files closed, temporary files removed); no report
        os._exit(130)
    finally:
        _TRAINING = False


def _stop_pool(pool, jobs: list[tuple[dict, int]], grace: float = 5.0) -> None:
    """Cancel the queued runs of ``pool`` and stop its workers (SIGTERM, then SIGKILL after ``grace``
    seconds); remove the temporary files the workers left in the runs' folders. Finished runs stay
    cached and started ones resume from their last checkpoint."""
    procs = list(pool._processes.values())  # the executor has no public way to stop its workers (3.11)
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.time() + grace
    for p in procs:
        p.join(max(0.0, deadline - time.time()))
        if p.is_alive():
            p.kill()
            p.join(1.0)
    pids = {p.pid for p in procs}
    for cfg, seed in jobs:
        store.remove_temporary(run_dir(cfg, seed), pids)


def _rounds_done(cfg: dict, seed: int) -> int:
    folder = run_dir(cfg, seed)
    if (folder / store.SUMMARY).exists():
        return target_rounds(cfg)
    path = folder / store.LOG
    return path.read_text().count("\n") if path.exists() else 0


class Progress:
    """Runs done / total with an ETA, written (when ``$FEDLIB_PROGRESS`` names a file) for a
    process that watches this one: ``python -m fedlib reproduce`` prints it while a notebook's
    cell trains, where papermill's own counter would sit on one cell."""

    def __init__(self, desc: str, runs: int, cached: int, rounds: int):
        self.path = os.environ.get("FEDLIB_PROGRESS")
        self.desc, self.runs, self.cached, self.rounds = desc, runs, cached, rounds
        self.t0 = time.time()

    def write(self, finished: int, rounds_done: int) -> None:
        if not self.path:
            return
        elapsed = time.time() - self.t0
        eta = elapsed / rounds_done * (self.rounds - rounds_done) if rounds_done else None
        state = {"desc": self.desc, "runs_done": self.cached + finished, "runs_total": self.runs,
                 "rounds_done": rounds_done, "rounds_total": self.rounds, "elapsed_seconds": elapsed,
                 "eta_seconds": eta, "updated": time.time()}
        try:
            store.atomic_write(Path(self.path), json.dumps(state))
        except OSError:  # progress is a courtesy: never a reason to fail a run
            pass


# Runs that share one GPU at a time by default. Measured on an NVIDIA H200 (16 CPU cores, torch 2.11,
# 2026-11-27, docs/runs.md "Devices and executors"): FedProto in FedMPS's Table II setting trained 1.23 rounds/s
# in one process and 1.94 rounds/s over 4 processes at once; 14 processes sharing it (8 of FedMPS's
# Table VI, 6 of GFPL's Table 2) made 1.4 rounds/s in all, a tenth of a round per second each.
CUDA_WORKERS = 4


#: a grid of at most this many client-rounds (rounds x clients, summed over the runs to train) trains in the
#: calling process, one run after the other: starting worker processes (each importing torch and loading the
#: data again) costs more than it saves. Every smoke grid is below it (160-500), every quick grid far above
#: (4,440-33,600).
IN_PROCESS_CLIENT_ROUNDS = 1000


def client_rounds(jobs: list[tuple[dict, int]]) -> int:
    """Rounds x clients summed over ``jobs``: the size :data:`IN_PROCESS_CLIENT_ROUNDS` is compared with."""
    return sum(target_rounds(cfg) * int(cfg["partition"].get("num_clients", 1)) for cfg, _ in jobs)


def default_workers(jobs: list[tuple[dict, int]]) -> int:
    """How many runs ``run_many`` trains at once when not told: 0 (in this process) for a grid of at most
    :data:`IN_PROCESS_CLIENT_ROUNDS` client-rounds on the CPU, else one per CPU core, as each trains with
    one thread; where any run is on CUDA, :data:`CUDA_WORKERS` (they share the one GPU), or the
    core count when that is smaller."""
    if all(cfg.get("device") in (None, "cpu") for cfg, _ in jobs) and client_rounds(jobs) <= IN_PROCESS_CLIENT_ROUNDS:
        return 0
    cores = os.cpu_count() or 1
    if any(cfg.get("device") == "cuda" for cfg, _ in jobs):
        return min(CUDA_WORKERS, cores)
    return cores


class RunsFailed(RuntimeError):
    """Some runs of a grid raised; the message counts and lists them (the others finished and are kept)."""


def _train_stack(jobs: list[tuple[dict, int]], on_round=None) -> list:
    """Train ``jobs`` (all of one stack) in lockstep (:mod:`fedlib.stacked`); each job's summary or the exception
    it raised."""
    import threading

    from fedlib.interrupts import STOP
    from fedlib.stacked import Lockstep, StackedClients, log

    out: list = [None] * len(jobs)
    todo = []
    for i, (cfg, seed) in enumerate(jobs):
        out[i] = cached_summary(cfg, seed)
        if out[i] is None:
            todo.append(i)
    if not todo:
        return out
    refuse_to_train([jobs[i] for i in todo])
    for results in sorted({jobs[i][0]["results_dir"] for i in todo}):
        check_writable(results)
    loaded_code()
    built = {}
    for i in todo:
        try:
            built[i] = build(*jobs[i])
        except Exception as exc:  # noqa: BLE001 - reported per run, as run_many does
            out[i] = exc
    todo = [i for i in todo if i in built]
    folders = {i: run_dir(*jobs[i]) for i in todo}
    with contextlib.ExitStack() as locks:
        for i in sorted(todo, key=lambda i: str(folders[i])):  # one order everywhere: no two stacks deadlock
            locks.enter_context(run_lock(folders[i]))
        for i in list(todo):
            cached = cached_summary(*jobs[i], repair=True)
            if cached is not None:
                out[i] = cached
                todo.remove(i)
        if not todo:
            return out
        lockstep = Lockstep(len(todo))
        threads = []

        def body(k: int, i: int) -> None:
            cfg, seed = jobs[i]
            data, ctx, algo = built[i]
            with lockstep.cond:
                try:
                    cohort = StackedClients(algo, ctx, data, lockstep, k)
                    out[i] = _train(cfg, seed, folders[i], False, built[i],
                                    None if on_round is None else (lambda r: on_round(i, r)),
                                    local=cohort, stacked=len(todo))
                except BaseException as exc:  # noqa: BLE001 - the caller reports it (an interrupt included)
                    out[i] = exc
                finally:
                    lockstep.leave()

        for k, i in enumerate(todo):
            t = threading.Thread(target=body, args=(k, i), name=f"stacked-run-{k}", daemon=True)
            threads.append(t)
            t.start()
        interrupted = False
        try:
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        except KeyboardInterrupt:  # the runs stop after their round (their checkpoints stay), then it propagates
            interrupted = not STOP.is_set()
            STOP.set()
            for t in threads:
                t.join()
            if interrupted:
                STOP.clear()
            raise
        log.info("stacked %d runs of %s: %d training calls of %s runs", len(todo), jobs[todo[0]][0]["name"],
                 len(lockstep.calls["train"]), sorted(set(lockstep.calls["train"])))
    for i in todo:
        if isinstance(out[i], KeyboardInterrupt):
            raise out[i]
    return out


def run_stacked(jobs: list[tuple[dict, int]], progress: bool = True, on_round=None) -> list[dict]:
    """The summaries of ``jobs`` (``(config, seed)`` pairs) in their order: the jobs of each stack
    (:func:`fedlib.stacked.stacks`: the seeds and sweep points of one config) trained in lockstep in this process
    (:mod:`fedlib.stacked`), the others one after another, with one log line naming what did not stack and why.
    Cached runs return at once; a failing run does not stop the others (:class:`RunsFailed` lists the failures
    after all have ended). ``on_round(i, r)``: after round
    ``r`` of ``jobs[i]`` is stored."""
    results = _stacked(jobs, progress, on_round)
    failures = [(jobs[i][0]["name"], jobs[i][1], f"{type(v).__name__}: {v}") for i, v in enumerate(results)
                if isinstance(v, BaseException)]
    if failures:
        lines = "\n".join(f"  {name} seed {seed}: {why}" for name, seed, why in failures)
        raise RunsFailed(f"{len(failures)} of {len(jobs)} runs failed (finished runs are cached):\n{lines}")
    return results


def _stacked(jobs: list[tuple[dict, int]], progress: bool = True, on_round=None) -> list:
    """:func:`run_stacked` without raising: each job's summary or its exception (an interrupt propagates)."""
    from fedlib.stacked import log, note, stacks, why_not_stacked

    out: list = [None] * len(jobs)
    units = stacks(jobs)
    if 1 < len(units) < len(jobs):
        log.info("stacked runs: %d runs in %d stacks of %s runs (the seeds and sweep points of one config stack; "
                 "configs that differ in anything else train in stacks of their own)", len(jobs), len(units),
                 "/".join(str(len(u)) for u in units))
    for unit in units:
        cfg = jobs[unit[0]][0]
        why = why_not_stacked(cfg)
        if len(unit) > 1:
            try:
                mine = None if on_round is None else (lambda j, r, unit=unit: on_round(unit[j], r))
                got = _one_thread_stack(lambda unit=unit, mine=mine: _train_stack([jobs[i] for i in unit], mine), cfg)
            except Exception as exc:  # noqa: BLE001 - before any run of the stack trained (its results folder)
                got = [exc] * len(unit)
            for i, v in zip(unit, got, strict=True):
                out[i] = v
            continue
        i = unit[0]
        if why is not None:
            note(f"{cfg['name']} seed {jobs[i][1]} trains alone, not stacked: {why}")
        try:
            out[i] = run_one(*jobs[i], progress=progress,
                             on_round=None if on_round is None else (lambda r, i=i: on_round(i, r)))
        except Exception as exc:  # noqa: BLE001 - reported with the others
            out[i] = exc
    return out


def _one_thread_stack(fn, cfg: dict):
    """``fn()`` as :func:`run_one` trains: one torch thread, deterministic CUDA kernels."""
    if cfg.get("device") == "cuda":
        deterministic_cuda()
    with one_thread():
        return fn()


def stacking(jobs: list[tuple[dict, int]], stack: bool | None = None) -> bool:
    """Whether :func:`run_many` trains the seeds of a config stacked (:mod:`fedlib.stacked`): ``stack`` when
    given, else ``$FEDLIB_STACK`` (``1`` or ``0``) when set, else where every run is on CUDA (a GPU is not
    filled by one run, nor by several processes; on a CPU stacking gains nothing)."""
    if stack is not None:
        return bool(stack)
    env = os.environ.get("FEDLIB_STACK", "").strip()
    if env in ("0", "1"):
        return env == "1"
    return bool(jobs) and all(cfg.get("device") == "cuda" for cfg, _ in jobs)


def _units(jobs: list[tuple[dict, int]], todo: list[int], stack: bool) -> list[list[int]]:
    """The runs of ``todo`` as the units ``run_many`` trains: one run each, or the runs of a stack together."""
    if not stack:
        return [[i] for i in todo]
    from fedlib.stacked import stacks

    return [[todo[j] for j in unit] for unit in stacks([jobs[i] for i in todo])]


def _train_unit(unit_jobs: list[tuple[dict, int]], on_round=None) -> list:
    """Each job's summary or exception: one run (:func:`run_one`) or a stack (:mod:`fedlib.stacked`)."""
    if len(unit_jobs) == 1:
        try:
            return [run_one(*unit_jobs[0], progress=False,
                            on_round=None if on_round is None else (lambda r: on_round(0, r)))]
        except Exception as exc:  # noqa: BLE001 - reported with the others
            return [exc]
    return _stacked(unit_jobs, progress=False, on_round=on_round)


def _stack_worker(unit_jobs: list[tuple[dict, int]]) -> list:
    global _TRAINING
    _TRAINING = True
    try:
        return _train_unit(unit_jobs)
    except KeyboardInterrupt:  # stopped by the parent (see _worker)
        os._exit(130)
    finally:
        _TRAINING = False


def run_many(jobs: list[tuple[dict, int]], workers: int | None = None, progress: bool = True,
             desc: str = "runs", stack: bool | None = None, on_done=None) -> list[dict]:
    """Run many (config, seed) jobs, ``workers`` at a time in separate processes (default:
    :func:`default_workers`); ``workers=0``: one after the other in this process (what a small grid
    gets by default), with the same numbers (every run trains with one thread either way).

    Each worker trains with one thread (see :func:`one_thread`), so the numbers are the
    same as ``run_one`` in this process. Cached runs return at once; one progress bar
    counts rounds over all jobs. A failing job does not stop the others (their results
    stay in the cache); after all have ended, a :class:`RuntimeError` lists the failures.
    An interrupt (``KeyboardInterrupt``) cancels the queued runs and stops the workers within
    seconds (:func:`_stop_pool`), then propagates. Returns the summaries in the order of ``jobs``.
    This is the local pool; :func:`fedlib.grid.run_many` chooses between it and Ray.

    ``stack`` (default: :func:`stacking`, on for CUDA runs): the seeds of each config train in one process as
    one stacked group (:mod:`fedlib.stacked`), a stack being one unit of work (of the calling process, or of a
    worker).

    ``on_done(i)``, where given, is called in this process as each job ``i`` it trains finishes (not for cached or
    failed ones), while the others go on: a caller archives each run as it ends without waiting for a batch's
    slowest run, with every worker kept busy.
    """
    from tqdm.auto import tqdm

    summaries: list[dict | None] = [None] * len(jobs)
    todo = []
    for i, (cfg, seed) in enumerate(jobs):
        summaries[i] = cached_summary(cfg, seed)
        if summaries[i] is None:
            todo.append(i)
    refuse_to_train([jobs[i] for i in todo])
    for results in sorted({jobs[i][0]["results_dir"] for i in todo}):  # before any worker loads data
        check_writable(results)
    total = sum(target_rounds(jobs[i][0]) for i in todo)
    if workers is None:
        workers = default_workers([jobs[i] for i in todo])
    check_value("workers", workers, Interval(0, None, integer=True))
    in_process = workers == 0
    units = _units(jobs, todo, stacking([jobs[i] for i in todo], stack))
    workers = max(1, min(workers, len(units) or 1))
    failures = []
    bar = tqdm(total=total, desc=f"{desc}: {len(todo)} to run, {len(jobs) - len(todo)} cached",
               disable=not progress or not todo, unit="round")
    tracker = Progress(desc, len(jobs), len(jobs) - len(todo), total)
    tracker.write(0, 0)
    if todo and in_process:
        _run_here(jobs, todo, units, summaries, failures, bar, tracker, on_done)
    elif todo:
        _run_pool(jobs, todo, units, workers, summaries, failures, bar, tracker, on_done)
    tracker.write(len(todo), total)
    bar.close()
    if failures:
        lines = "\n".join(f"  {name} seed {seed}: {why}" for name, seed, why in failures)
        raise RunsFailed(f"{len(failures)} of {len(jobs)} runs failed (finished runs are cached):\n{lines}")
    return summaries  # type: ignore[return-value]


def _run_here(jobs, todo, units, summaries, failures, bar, tracker, on_done=None) -> None:
    """:func:`run_many` with ``workers=0``: the units one after the other in this process, the bar moving with every
    round; a finished run's summary into ``summaries``, a failed one into ``failures``."""
    try:
        counted = 0   # rounds done over the grid (the bar's own count stays 0 when it is disabled)
        started = 0   # runs of the units before this one
        for unit in units:
            before = counted
            bar.set_postfix_str(f"runs {len(jobs) - len(todo) + started}/{len(jobs)}", refresh=False)

            def one_round(_j, _r, started=started):   # the bar moves with every round trained, not only per run
                nonlocal counted
                counted += 1
                bar.update(1)
                tracker.write(started, counted)

            for i, got in zip(unit, _train_unit([jobs[i] for i in unit], on_round=one_round), strict=True):
                if isinstance(got, BaseException):  # keep going, as the pool does
                    failures.append((jobs[i][0]["name"], jobs[i][1], f"{type(got).__name__}: {got}"))
                else:
                    summaries[i] = got
                    if on_done is not None:
                        on_done(i)
            started += len(unit)
            counted = before + sum(_rounds_done(*jobs[i]) for i in unit)   # a resumed run's earlier rounds too
            bar.n = counted
            bar.set_postfix_str(f"runs {len(jobs) - len(todo) + started}/{len(jobs)}", refresh=False)
            bar.refresh()
            tracker.write(started, counted)
    except BaseException:
        bar.close()
        raise


def _run_pool(jobs, todo, units, workers, summaries, failures, bar, tracker, on_done=None) -> None:
    """:func:`run_many` with workers: the units in a pool of ``workers`` spawned processes, polled every 2 s for the
    bar; an interrupt stops the pool within seconds (:func:`_stop_pool`) and propagates."""
    import concurrent.futures as cf
    import multiprocessing as mp

    pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"), initializer=_init_worker)
    try:
        futures = {(pool.submit(_worker, *jobs[unit[0]]) if len(unit) == 1 else
                    pool.submit(_stack_worker, [jobs[i] for i in unit])): unit for unit in units}
        pending = set(futures)
        while pending:
            done, pending = cf.wait(pending, timeout=2.0)
            for f in done:
                unit = futures[f]
                try:
                    got = f.result()
                    got = [got] if len(unit) == 1 else got
                except Exception as exc:  # keep going: the other runs' work is not lost
                    got = [exc] * len(unit)
                for i, v in zip(unit, got, strict=True):
                    if isinstance(v, BaseException):
                        failures.append((jobs[i][0]["name"], jobs[i][1], f"{type(v).__name__}: {v}"))
                    else:
                        summaries[i] = v
                        if on_done is not None:
                            on_done(i)
            bar.n = sum(_rounds_done(*jobs[i]) for i in todo)
            finished = sum(summaries[i] is not None for i in todo) + len(failures)
            bar.set_postfix_str(f"runs {len(jobs) - len(todo) + finished}/{len(jobs)}", refresh=False)
            bar.refresh()
            tracker.write(finished, bar.n)
    except BaseException:  # Ctrl-C, SIGTERM, a notebook's interrupt: stop now, not after the queue
        bar.close()
        _stop_pool(pool, [jobs[i] for i in todo])
        raise
    pool.shutdown()


@dataclasses.dataclass
class RunState:
    """A finished (or checkpointed) run brought back: data, context, algorithm, final states."""

    cfg: dict
    seed: int
    data: Any
    ctx: Context
    algorithm: Any
    clients: dict
    server: Any
    round: int

    def message(self, cid: int) -> dict:
        """What the server would send client ``cid`` next (e.g. the global prototypes)."""
        rnd = Round(self.round + 1, self.cfg["train"]["rounds"] if self.cfg else self.round, self.seed)
        return self.algorithm.broadcast(self.ctx, self.server, cid, rnd)

    def model(self, cid: int):
        """A fresh copy (yours to keep) of the model client ``cid`` predicts with, in eval mode."""
        return self.algorithm.predict_model(self.ctx, cid, self.clients[cid], self.message(cid), fresh=True)

    def features(self, cid: int, x: torch.Tensor) -> dict:
        """Feature levels of ``x`` under client ``cid``'s predicting model (no state changes)."""
        return self.algorithm.features(self.ctx, cid, self.clients[cid], self.message(cid), x)

    def predict(self, cid: int, x: torch.Tensor) -> dict:
        """Scores of ``x`` under every inference rule of client ``cid`` (no state changes)."""
        return self.algorithm.predict(self.ctx, cid, self.clients[cid], self.message(cid), x)

    def collect(self, level: str, split: str = "test", clients=None) -> tuple[np.ndarray, np.ndarray]:
        """The ``level`` features and the labels of the ``split`` ("train" or "test") samples of ``clients``
        (default: every client), each client's under its own model, stacked in client order."""
        zs, ys = [], []
        for cid in range(self.data.num_clients) if clients is None else clients:
            part = getattr(self.data, split)[cid]
            with torch.no_grad():
                zs.append(self.features(cid, part.x)[level].numpy())
            ys.append(part.y.numpy())
        return np.concatenate(zs), np.concatenate(ys)


def load_state(cfg: dict, seed: int) -> RunState:
    """The last checkpoint of a run (client and server states) with its data. A finished run
    is checked first (a damaged one is repaired by :func:`run_one`, with a warning). The run archive keeps no
    model: while it alone is read (:func:`fedlib.results.archive_only`) this raises
    :class:`fedlib.results.NotArchived`."""
    if archive.reading_only():
        raise archive.NotArchived(f"{cfg['name']} seed {seed}: a trained model, which the run archive does not keep")
    folder = run_dir(cfg, seed)
    if not (folder / store.CHECKPOINT).exists() and not (folder / store.SUMMARY).exists():
        raise FileNotFoundError(f"no checkpoint for {cfg['name']} seed {seed} in {folder}: run it first")
    if (folder / store.SUMMARY).exists() and cached_summary(cfg, seed) is None:
        run_one(cfg, seed, progress=False)
    ckpt, problem = store.load_checkpoint(folder)
    if ckpt is None and store.left_checkpoint_behind(folder):  # finished on a Ray worker: remade here
        print(f"{cfg['name']} seed {seed}: its checkpoint stayed on the node that ran it; training it again here")
        with run_lock(folder):
            store.forget(folder)
        run_one(cfg, seed, progress=False)
        ckpt, problem = store.load_checkpoint(folder)
    if ckpt is None:
        raise FileNotFoundError(f"{folder / store.CHECKPOINT}: {problem}; run it again to recompute it")
    data, ctx, algo = build(cfg, seed)
    return RunState(cfg, seed, data, ctx, algo, ckpt["clients"], ckpt["server"], ckpt["round"])


def load_rounds(cfg: dict, seed: int) -> list[dict]:
    """The per-round records of a run in the results folder, training nothing: of a finished run after
    the same checks as a cache hit (``[]`` for a damaged one, whose warning names the file; :func:`run_one`
    recomputes it); of a run in progress, the consecutive rounds logged so far. While
    :func:`fedlib.results.archive_only` is in force, the run archive's records of it instead."""
    if archive.reading_only():
        return archive.rounds(cfg, seed)
    folder = run_dir(cfg, seed)
    if (folder / store.SUMMARY).exists() and cached_summary(cfg, seed) is None:
        return []
    return store.read_log(folder)


def format_summary(cfg: dict, summaries: list[dict]) -> str:
    """A one-screen summary: every metric's best and last round, mean +- std over seeds (the
    value alone, with n=1, for one seed), and which seeds diverged."""
    s0 = summaries[0]
    n = len(summaries)
    lines = [f"{cfg['name']}: {cfg['algorithm']['name']} on {cfg['dataset']['name']} "
             f"({s0['data']['source']})",
             f"  partition {cfg['partition'].get('scheme')} hash {s0['partition_hash']}, "
             f"{cfg['train']['rounds']} rounds, seeds {cfg['seeds']}",
             f"  {'metric':<18}{'best' + (' (mean+-std over seeds)' if n > 1 else ' (n=1)'):>30}{'last':>22}"
             "  std across clients (last)"]
    keys = [k for k in s0["metrics"] if all(k in s["metrics"] for s in summaries)]

    def cell(m, sd, width):
        return f"{100 * m:>{width}.2f} +- {100 * sd:5.2f}" if n > 1 else f"{100 * m:>{width + 9}.2f}"

    for key in keys:
        bm, bs = over_seeds(summaries, key, "best")
        lm, ls = over_seeds(summaries, key, "last")
        cs = np.mean([s["metrics"][key]["last_std"] for s in summaries])
        lines.append(f"  {key:<18}{cell(bm, bs, 22)}{cell(lm, ls, 14)}  {100 * cs:6.2f}")
    for s in summaries:
        if s.get("diverged_at"):
            before = "the numbers above are from the rounds before" if keys else "no round was scored before"
            lines.append(f"  seed {s['seed']}: DIVERGED at round {s['diverged_at']} (training loss not finite); "
                         + before)
    c = s0["comm_per_round"]
    lines.append(f"  per round: up {c['up_params']:,.0f} params ({c['up_bytes']:,.0f} B), down "
                 f"{c['down_params']:,.0f} params ({c['down_bytes']:,.0f} B); "
                 f"median {np.median([s['seconds_per_round_median'] for s in summaries]):.2f} s/round")
    for s in summaries:
        lines.append(f"  seed {s['seed']}: {Path(cfg['results_dir']) / s['run_id']}"
                     f"{'  (cached)' if s.get('cache_hit') else ''}")
    lines.append("  acc_<rule>: argmax over all classes; acc_<rule>_own: restricted to the client's classes; "
                 "means are unweighted over clients (in %).")
    return "\n".join(lines)
