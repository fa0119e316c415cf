"""Experiment configs (YAML), validation, run ids, the result cache and seed grids.

A config file looks like::

    name: fedproto_fmnist
    dataset: fmnist
    model: cnn_fmnist                 # or {name: fedavg_cnn, feature_dim: 512}
    partition: {scheme: nway_kshot, num_clients: 20, ways: 3, shots: 100, stdev: 2,
                block: 110, test_shots: 15}
    algorithm: {name: fedproto, lam: 1.0}
    train: {rounds: 100, batch_size: 8, lr: 0.01, momentum: 0.5, local_epochs: 1}
    seeds: [1234, 1235, 1236]

A run is (config, one seed). Its id hashes the whole validated config (defaults filled
in) with that seed, except fields that cannot change a number (``name``,
``data_root``, ``results_dir``). Its folder ``<results_dir>/<run id>/`` holds
``config.yaml``, ``partition.json``, ``rounds.jsonl``, ``checkpoint.pt`` and, once
finished, ``summary.json``: a finished run is a cache hit, an unfinished one resumes.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import Context, TrainSettings
from fedlib.data import FederatedData, load_dataset, make_partition
from fedlib.data.sources import LOADERS, subsample
from fedlib.engine import Simulator, median_seconds
from fedlib.metrics import over_seeds, summarize_rounds
from fedlib.models import FAMILIES, MODELS
from fedlib.validation import BOOL, ConfigError, Interval, check_fields, from_dict, unknown_key_error

# Bump when a change to the code changes the numbers of existing runs.
# 2: every run trains with one torch thread (numbers must not depend on the machine's cores).
CACHE_VERSION = 2
NON_SEMANTIC = ("name", "data_root", "results_dir")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    rounds: int = 100
    participation: float = 1.0
    local_epochs: int = 1
    batch_size: int = 8
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    drop_last: bool = True
    eval_every: int = 1

    def __post_init__(self):
        check_fields(self, {
            "rounds": Interval(1, None, integer=True), "participation": Interval(0, 1, low_open=True),
            "local_epochs": Interval(1, None, integer=True), "batch_size": Interval(1, None, integer=True),
            "lr": Interval(0, None, low_open=True), "momentum": Interval(0, 1, high_open=True),
            "weight_decay": Interval(0, None), "drop_last": BOOL,
            "eval_every": Interval(1, None, integer=True)}, prefix="train")

    def settings(self) -> TrainSettings:
        return TrainSettings(lr=float(self.lr), momentum=float(self.momentum), weight_decay=float(self.weight_decay),
                             batch_size=self.batch_size, local_epochs=self.local_epochs, drop_last=self.drop_last)


TOP_KEYS = ("name", "dataset", "model", "partition", "algorithm", "train", "seeds", "data_root", "results_dir")


def _as_spec(value: Any, field: str) -> dict:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(field, value, "a name or a mapping with a 'name' key")


def validate(raw: dict) -> dict:
    """Check every field of a raw config; return it normalised with all defaults filled.

    Raises :class:`ConfigError` naming the field, the value and what is allowed. Checks
    that need the data (shots vs samples per class) happen when the partition is made.
    """
    if not isinstance(raw, dict):
        raise ConfigError("config", raw, "a mapping of " + ", ".join(TOP_KEYS))
    for key in raw:
        if key not in TOP_KEYS:
            raise unknown_key_error("config", key, list(TOP_KEYS))
    cfg: dict[str, Any] = {"name": str(raw.get("name", "experiment"))}

    ds = _as_spec(raw.get("dataset", "fmnist"), "dataset")
    if set(ds) - {"name", "fraction"}:
        raise unknown_key_error("dataset", next(iter(set(ds) - {"name", "fraction"})), ["name", "fraction"])
    if "fraction" in ds:
        fr = ds["fraction"]
        if isinstance(fr, bool) or not isinstance(fr, (int, float)) or not 0 < fr <= 1:
            raise ConfigError("dataset.fraction", fr, "a number in (0, 1] (a stratified subsample of both splits)")
    if ds.get("name") not in LOADERS:
        raise ConfigError("dataset.name", ds.get("name"), "one of " + ", ".join(sorted(LOADERS)))
    cfg["dataset"] = ds

    model = _as_spec(raw.get("model", "cnn_fmnist"), "model")
    if model.get("name") not in MODELS and model.get("name") not in FAMILIES:
        raise ConfigError("model.name", model.get("name"), "one of " + ", ".join(sorted(MODELS) + sorted(FAMILIES)))
    cfg["model"] = model

    part = dict(raw.get("partition") or {})
    part.setdefault("scheme", "nway_kshot")
    cfg["partition"] = part

    algo_spec = _as_spec(raw.get("algorithm", "fedavg"), "algorithm")
    algo = make_algorithm(algo_spec)
    cfg["algorithm"] = {"name": algo.name, **algo.hyperparameters()}

    train = from_dict(TrainConfig, raw.get("train"), owner="train")
    cfg["train"] = dataclasses.asdict(train)

    seeds = raw.get("seeds", [1234])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise ConfigError("seeds", seeds, "a non-empty list of non-negative integers")
    cfg["seeds"] = seeds
    cfg["data_root"] = raw.get("data_root")
    cfg["results_dir"] = str(raw.get("results_dir", "results"))
    return cfg


def load_config(path: str | Path, overrides: list[str] | dict | None = None) -> dict:
    """Read a YAML config, apply ``key.sub=value`` overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("config file", str(path), "an existing YAML file")
    raw = yaml.safe_load(path.read_text()) or {}
    return validate(apply_overrides(raw, overrides))


def apply_overrides(raw: dict, overrides: list[str] | dict | None) -> dict:
    """``["train.rounds=5", "seeds=[1,2]"]`` or ``{"train.rounds": 5}`` applied to a copy of ``raw``."""
    raw = copy.deepcopy(raw)
    if not overrides:
        return raw
    items = overrides.items() if isinstance(overrides, dict) else []
    if not isinstance(overrides, dict):
        parsed = []
        for item in overrides:
            if "=" not in item:
                raise ConfigError("override", item, "key=value, e.g. train.rounds=5 or algorithm.lam=0.5")
            k, v = item.split("=", 1)
            parsed.append((k.strip(), yaml.safe_load(v)))
        items = parsed
    for key, value in items:
        parts = key.split(".")
        node = raw
        for p in parts[:-1]:
            if isinstance(node.get(p), str):  # "model: cnn_fmnist" shorthand
                node[p] = {"name": node[p]}
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return raw


def run_id(cfg: dict, seed: int) -> str:
    """Hash of the validated config with one seed (paths and the display name excluded).

    A hyperparameter added to an algorithm later, at the value that leaves the method
    unchanged (its ``NEUTRAL`` value, e.g. FedProto's ``gamma: 1``), is left out, so runs
    made before it existed stay cache hits.
    """
    from fedlib.algorithms import ALGORITHMS

    body = {k: v for k, v in cfg.items() if k not in NON_SEMANTIC and k != "seeds"}
    algo = dict(body["algorithm"])
    for field, neutral in getattr(ALGORITHMS.get(algo["name"]), "NEUTRAL", {}).items():
        if field in algo and algo[field] == neutral:
            del algo[field]
    body["algorithm"] = algo
    body.update(seed=seed, cache_version=CACHE_VERSION)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]


def build(cfg: dict, seed: int):
    """Dataset, partition, context and algorithm of one run (no training)."""
    ds = load_dataset(cfg["dataset"]["name"], cfg["data_root"])
    if cfg["dataset"].get("fraction", 1) != 1:
        ds = subsample(ds, cfg["dataset"]["fraction"], seed=0)  # the same images for every run seed
    pargs = dict(cfg["partition"])
    pargs.setdefault("seed", seed)
    partition = make_partition(pargs, ds.y_train.numpy(), ds.y_test.numpy(), ds.num_classes)
    data = FederatedData(ds, partition)
    model_args = {k: v for k, v in cfg["model"].items() if k != "name"}
    ctx = Context(num_classes=ds.num_classes, input_shape=ds.input_shape, num_clients=partition.num_clients,
                  model_name=cfg["model"]["name"], model_args=model_args,
                  train=TrainConfig(**cfg["train"]).settings(), seed=seed)
    try:
        ctx.new_model(0)
    except TypeError as exc:
        raise ConfigError("model", cfg["model"], f"arguments the model takes ({exc})") from None
    return data, ctx, make_algorithm(cfg["algorithm"])


def run_dir(cfg: dict, seed: int) -> Path:
    return Path(cfg["results_dir"]) / run_id(cfg, seed)


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


def run_one(cfg: dict, seed: int, progress: bool = True) -> dict:
    """Run (or resume, or fetch from the cache) one seed of ``cfg``; return its summary."""
    with one_thread():
        return _run_one(cfg, seed, progress)


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
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _cached_summary(folder: Path) -> dict | None:
    path = folder / "summary.json"
    if not path.exists():
        return None
    return {**json.loads(path.read_text()), "cache_hit": True}


def _run_one(cfg: dict, seed: int, progress: bool) -> dict:
    folder = run_dir(cfg, seed)
    cached = _cached_summary(folder)
    if cached is not None:
        return cached
    built = build(cfg, seed)  # data-dependent config errors surface here, before any file is written
    with run_lock(folder):
        cached = _cached_summary(folder)  # finished by the process we waited for
        if cached is not None:
            return cached
        return _train(cfg, seed, folder, progress, built)


def _train(cfg: dict, seed: int, folder: Path, progress: bool, built) -> dict:
    summary_path = folder / "summary.json"
    data, ctx, algo = built
    (folder / "config.yaml").write_text(yaml.safe_dump({**cfg, "seed": seed, "run_id": folder.name}, sort_keys=False))
    (folder / "partition.json").write_text(json.dumps(data.partition.record()))
    t = cfg["train"]
    sim = Simulator(algo, ctx, data, t["rounds"], t["participation"], t["eval_every"], run_dir=folder,
                    progress=progress, desc=f"{cfg['name']} seed {seed}")
    t0 = time.perf_counter()
    records = sim.run()
    summary = {
        "run_id": folder.name, "name": cfg["name"], "seed": seed, "algorithm": cfg["algorithm"]["name"],
        "rules": list(algo.RULES), "data": data.dataset.record(), "partition_hash": data.partition.hash,
        "rounds": len(records), "metrics": summarize_rounds(records),
        "comm_per_round": {k: float(np.mean([r[k] for r in records]))
                           for k in ("up_params", "up_bytes", "down_params", "down_bytes")},
        "seconds_per_round_median": median_seconds(records), "wall_seconds_this_call": time.perf_counter() - t0,
    }
    tmp = folder / "summary.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(summary_path)
    summary["cache_hit"] = False
    return summary


def run_experiment(cfg: dict, progress: bool = True) -> list[dict]:
    """Every seed of a validated config; returns their summaries."""
    return [run_one(cfg, s, progress) for s in cfg["seeds"]]


def _die_with_parent() -> None:
    """Worker initializer: on Linux, ask the kernel to stop this worker when the parent
    process dies (otherwise killing a notebook or script leaves its workers training)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker(cfg: dict, seed: int) -> dict:
    return run_one(cfg, seed, progress=False)


def _rounds_done(cfg: dict, seed: int) -> int:
    folder = run_dir(cfg, seed)
    if (folder / "summary.json").exists():
        return cfg["train"]["rounds"]
    path = folder / "rounds.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def run_many(jobs: list[tuple[dict, int]], workers: int | None = None, progress: bool = True,
             desc: str = "runs") -> list[dict]:
    """Run many (config, seed) jobs, ``workers`` at a time in separate processes.

    Each worker trains with one thread (see :func:`one_thread`), so the numbers are the
    same as ``run_one`` in this process. Cached runs return at once; one progress bar
    counts rounds over all jobs. A failing job does not stop the others (their results
    stay in the cache); after all have ended, a :class:`RuntimeError` lists the failures.
    Returns the summaries in the order of ``jobs``.
    """
    import concurrent.futures as cf
    import multiprocessing as mp

    from tqdm.auto import tqdm

    summaries: list[dict | None] = [None] * len(jobs)
    todo = []
    for i, (cfg, seed) in enumerate(jobs):
        summaries[i] = _cached_summary(run_dir(cfg, seed))
        if summaries[i] is None:
            todo.append(i)
    total = sum(jobs[i][0]["train"]["rounds"] for i in todo)
    workers = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))
    failures = []
    bar = tqdm(total=total, desc=f"{desc}: {len(todo)} to run, {len(jobs) - len(todo)} cached",
               disable=not progress or not todo, unit="round")
    if todo:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                    initializer=_die_with_parent) as pool:
            futures = {pool.submit(_worker, *jobs[i]): i for i in todo}
            pending = set(futures)
            while pending:
                done, pending = cf.wait(pending, timeout=2.0)
                for f in done:
                    i = futures[f]
                    try:
                        summaries[i] = f.result()
                    except Exception as exc:  # keep going: the other runs' work is not lost
                        failures.append((jobs[i][0]["name"], jobs[i][1], f"{type(exc).__name__}: {exc}"))
                bar.n = sum(_rounds_done(*jobs[i]) for i in todo)
                bar.refresh()
    bar.close()
    if failures:
        lines = "\n".join(f"  {name} seed {seed}: {why}" for name, seed, why in failures)
        raise RuntimeError(f"{len(failures)} of {len(jobs)} runs failed (finished runs are cached):\n{lines}")
    return summaries  # type: ignore[return-value]


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
        """What the server would send client ``cid`` now (e.g. global prototypes)."""
        return self.algorithm.broadcast(self.ctx, self.server, cid)


def load_state(cfg: dict, seed: int) -> RunState:
    """The last checkpoint of a run (client models, server state) with its data."""
    path = run_dir(cfg, seed) / "checkpoint.pt"
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint for {cfg['name']} seed {seed} in {path.parent}: run it first")
    data, ctx, algo = build(cfg, seed)
    ckpt = torch.load(path, weights_only=False)
    return RunState(cfg, seed, data, ctx, algo, ckpt["clients"], ckpt["server"], ckpt["round"])


def run_configs(configs: dict, seeds: list[int] | None = None, workers: int | None = None, desc: str = "runs",
                progress: bool = True) -> dict:
    """:func:`run_many` over a mapping of configs: every config for ``seeds`` (default: its
    own ``seeds``); returns ``{key: [summary per seed]}`` in the order of ``configs``."""
    jobs = [(cfg, s) for cfg in configs.values() for s in (seeds or cfg["seeds"])]
    summaries = iter(run_many(jobs, workers=workers, progress=progress, desc=desc))
    return {key: [next(summaries) for _ in (seeds or cfg["seeds"])] for key, cfg in configs.items()}


def load_rounds(cfg: dict, seed: int) -> list[dict]:
    """The per-round records of a run (finished or not)."""
    path = run_dir(cfg, seed) / "rounds.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def format_summary(cfg: dict, summaries: list[dict]) -> str:
    """A one-screen summary: every metric's best and last round, mean +- std over seeds."""
    s0 = summaries[0]
    lines = [f"{cfg['name']}: {cfg['algorithm']['name']} on {cfg['dataset']['name']} "
             f"({s0['data']['source']})",
             f"  partition {cfg['partition'].get('scheme')} hash {s0['partition_hash']}, "
             f"{cfg['train']['rounds']} rounds, seeds {cfg['seeds']}",
             f"  {'metric':<18}{'best (mean+-std over seeds)':>30}{'last':>22}  std across clients (last)"]
    for key in s0["metrics"]:
        bm, bs = over_seeds(summaries, key, "best")
        lm, ls = over_seeds(summaries, key, "last")
        cs = np.mean([s["metrics"][key]["last_std"] for s in summaries])
        lines.append(f"  {key:<18}{100 * bm:>22.2f} +- {100 * bs:5.2f}{100 * lm:>14.2f} +- {100 * ls:5.2f}"
                     f"  {100 * cs:6.2f}")
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


