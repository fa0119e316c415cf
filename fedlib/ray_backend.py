"""``--backend ray``: a grid of runs as Ray tasks, one task per run, on this machine or a cluster.

Each run is one task (``max_calls=1``: a fresh worker process per run, so a run's GPU memory goes with it)
that calls exactly what the local pool calls, :func:`fedlib.runner.run_one`, with ``num_cpus`` (default 1: a
run trains with one thread) and, for a CUDA run, a fractional ``num_gpus`` (:func:`gpu_share`). Where the
results folder goes is said in one line at the start (:func:`results_mode`):

- **shared**: every node sees the results folder (one machine, or a cluster file system): tasks write their
  run folders there directly, under the run's lock, and a retried task resumes from the run's checkpoint;
- **returned**: a task trains in a scratch folder of its node (``$FEDLIB_RAY_SCRATCH``, default
  ``<tmp>/fedlib-ray-<uid>``; a retry on the same node resumes there) and returns the run's config,
  partition, log and summary, which this process writes through :func:`fedlib.store.write_returned` (the
  log is checked against the summary, every file is written atomically, the summary last) and then serves
  through the same check as a cache hit. The checkpoint stays behind (a notebook that loads a run's final
  models remakes it: :func:`fedlib.runner.load_state`).

Faults: a task whose worker dies (killed, out of memory, a lost node) is retried by Ray (:data:`MAX_RETRIES`);
a run that raises is not retried (it would raise again) and is listed with its config and error after the
others finished (:class:`fedlib.runner.RunsFailed`); Ctrl-C cancels the tasks still running and keeps every
finished run. Progress: one bar over all rounds (runs done / total, ETA) and, per node, the runs it holds.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

from fedlib import backends, store
from fedlib.config import run_dir, run_id, target_rounds
from fedlib.runner import (CUDA_WORKERS, Progress, RunsFailed, _rounds_done, cached_summary, config_text, run_lock,
                           run_one)

MAX_RETRIES = 3              # tries after a worker died, per run
FILES = (store.CONFIG, store.PARTITION, store.LOG, store.SUMMARY)
GPU_MEMORY = "gpu_memory.json"   # in the results folder: peak GPU memory measured per config (any seed)
CUDA_CONTEXT_BYTES = 600 << 20   # what a process holds on a GPU beyond torch's allocations
HEADROOM = 1.25              # on the measured peak
GPU_STEP = 0.05              # GPU shares are multiples of this


def init_local(num_cpus: int | None = None, num_gpus: int | None = None):
    """Start Ray on this machine (every core, every GPU unless told), with this checkout importable by its
    workers; a no-op where Ray is running in this process already."""
    ray = backends.require_ray()
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # Ray's own future default
    if ray.is_initialized():
        return ray
    kwargs = {"num_cpus": num_cpus or os.cpu_count(), "num_gpus": num_gpus, "include_dashboard": False,
              "logging_level": "WARNING", "runtime_env": _runtime_env()}
    try:
        ray.init(**kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray gives its node 30 s to start, too few on a busy machine
        if "timed out during startup" not in str(exc):
            raise
        print("ray: the local instance did not start within Ray's 30 s (a busy machine?); trying once more",
              flush=True)
        ray.shutdown()
        ray.init(**kwargs)
    return ray


def _runtime_env() -> dict:
    """Workers import fedlib from this checkout where they see it (this machine, a shared file system), else
    from their own installation."""
    checkout = str(Path(__file__).resolve().parents[1])
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)}}


def connect(address: str | None = None):
    """Ray in this process: the cluster at ``address`` (or ``$FEDLIB_RAY_ADDRESS``; ``auto`` is the one
    ``ray start`` made on this machine), else a Ray instance started here (:func:`init_local`)."""
    ray = backends.require_ray()
    address = address or backends.setting("address")
    if ray.is_initialized() or not address:
        return init_local()
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    ray.init(address=address, logging_level="WARNING", runtime_env=_runtime_env())
    return ray


def scratch_root() -> Path:
    return Path(os.environ.get("FEDLIB_RAY_SCRATCH") or Path(tempfile.gettempdir()) / f"fedlib-ray-{os.getuid()}")


def shape_key(cfg: dict) -> str:
    """The runs whose GPU memory is alike: one config, any seed."""
    return run_id(cfg, 0)


def _gpu_record(cfg: dict) -> dict:
    if cfg.get("device") != "cuda":
        return {}
    import torch

    return {"peak": int(torch.cuda.max_memory_allocated()),
            "total": int(torch.cuda.get_device_properties(0).total_memory)}


def gpu_share(cfg: dict, measured: dict) -> float:
    """The GPU share of one run: ``--gpus-per-run`` where given; else from the peak memory measured for the
    same config (:data:`GPU_MEMORY`: an earlier grid, or a run of this grid past its first round) plus
    :data:`CUDA_CONTEXT_BYTES`, with :data:`HEADROOM`, rounded up to :data:`GPU_STEP`; else
    ``1/CUDA_WORKERS`` (what the local pool does: 4 runs per GPU). A CPU run takes none."""
    if cfg.get("device") != "cuda":
        return 0.0
    if backends.setting("gpus_per_run"):
        return backends.check_share("--gpus-per-run", float(backends.setting("gpus_per_run")), gpu=True)
    m = measured.get(shape_key(cfg))
    if not m:
        return 1 / CUDA_WORKERS
    need = (m["peak"] * HEADROOM + CUDA_CONTEXT_BYTES) / m["total"]
    return min(1.0, max(GPU_STEP, math.ceil(need / GPU_STEP) * GPU_STEP))


def _report(tracker, key: str, node: str, cfg: dict, seed: int, stop: threading.Event) -> None:
    """In the task: rounds done (and the GPU peak so far) to the driver's tracker, every second."""
    while True:
        tracker.report.remote(key, node, _rounds_done(cfg, seed), _gpu_record(cfg))
        if stop.wait(1.0):
            return


def _task(cfg: dict, seed: int, mode: str, tracker) -> tuple[dict, dict | None, dict]:
    """One run in a Ray worker: ``(summary, returned files or None, {node, resumed_from_round, gpu})``."""
    import ray

    node = ray.util.get_node_ip_address()
    here = cfg if mode == "shared" else {**cfg, "results_dir": str(scratch_root())}
    start = _rounds_done(here, seed)
    stop = threading.Event()
    reporter = threading.Thread(target=_report, args=(tracker, run_id(cfg, seed), node, here, seed, stop), daemon=True)
    reporter.start()
    try:
        summary = run_one(here, seed, progress=False)
    finally:
        stop.set()
        reporter.join()
    info = {"node": node, "resumed_from_round": start, "gpu": _gpu_record(cfg)}
    if mode == "shared":
        return summary, None, info
    folder = run_dir(here, seed)
    files = {name: (folder / name).read_text() for name in FILES}
    shutil.rmtree(folder, ignore_errors=True)
    return summary, files, info


class _Tracker:
    """Driver-side record of the runs in flight: ``{run id: (node, rounds done, gpu record)}``."""

    def __init__(self):
        self.runs: dict = {}

    def report(self, key: str, node: str, rounds: int, gpu: dict) -> None:
        self.runs[key] = (node, rounds, gpu)

    def snapshot(self) -> dict:
        return self.runs


def _probe(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def results_mode(ray, roots: list[str], chosen: str | None = None) -> tuple[str, str]:
    """``shared`` or ``returned`` (see the module) and the line that says so. ``auto`` (the default): shared
    where every live node reads a token this process writes into each results folder (or the cluster is this
    node alone), else returned."""
    chosen = chosen or backends.setting("ray_results") or "auto"
    if chosen not in backends.RESULT_MODES:
        raise backends.ConfigError(backends.ENV["ray_results"], chosen, ", ".join(backends.RESULT_MODES))
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    blind = []
    if chosen == "auto":
        here = ray.get_runtime_context().get_node_id()
        if any(n["NodeID"] != here for n in nodes):
            blind = _nodes_not_seeing(ray, nodes, roots)
        chosen = "returned" if blind else "shared"
    res = ray.cluster_resources()
    where = f"ray: {len(nodes)} node{'s' * (len(nodes) != 1)}, {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs"
    if chosen == "shared":
        return chosen, (f"{where}; results folder {', '.join(roots)} shared by the nodes: tasks write their run "
                        "folders there (a retried run resumes from its checkpoint)")
    why = f"not seen by node{'s' * (len(blind) > 1)} {', '.join(blind)}" if blind else "not written by the tasks"
    return chosen, (f"{where}; results folder {', '.join(roots)} {why}: each task returns its run's files and "
                    "this process writes them (checkpoints stay on the nodes)")


def _nodes_not_seeing(ray, nodes: list[dict], roots: list[str]) -> list[str]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    probes = []
    for root in roots:
        Path(root).mkdir(parents=True, exist_ok=True)
        probes.append(Path(root) / f".ray-probe-{token}")
        probes[-1].write_text(token)
    try:
        probe = ray.remote(num_cpus=0)(_probe)
        refs = {n["NodeManagerAddress"]: [probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
            n["NodeID"], soft=False)).remote(str(p)) for p in probes] for n in nodes}
        return [addr for addr, rs in refs.items() if any(r != token for r in ray.get(rs))]
    finally:
        for p in probes:
            p.unlink(missing_ok=True)


def load_measured(roots: list[str]) -> dict:
    measured: dict = {}
    for root in roots:
        try:
            measured.update(json.loads((Path(root) / GPU_MEMORY).read_text()))
        except (OSError, ValueError):
            pass
    return measured


def _save_measured(cfg: dict, gpu: dict) -> None:
    path = Path(cfg["results_dir"]) / GPU_MEMORY
    measured = load_measured([cfg["results_dir"]])
    key = shape_key(cfg)
    if gpu and gpu["peak"] > measured.get(key, {}).get("peak", -1):
        measured[key] = gpu
        store.atomic_write(path, json.dumps(measured, indent=1))


def _write_back(cfg: dict, seed: int, files: dict) -> dict:
    """A returned run written through the store, then served through the same check as a cache hit."""
    folder = run_dir(cfg, seed)
    with run_lock(folder):
        store.write_returned(folder, {**files, store.CONFIG: config_text(cfg, seed, folder)})
    summary = cached_summary(cfg, seed)
    if summary is None:
        raise ValueError(f"{folder}: the returned run does not pass the run folder's checks")
    return {**summary, "cache_hit": False}


def _error(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {text[0] if text else ''}"


def run_many(jobs: list[tuple[dict, int]], progress: bool = True, desc: str = "runs", address: str | None = None,
             results: str | None = None) -> list[dict]:
    """:func:`fedlib.runner.run_many` on Ray: the summaries of ``jobs`` in their order. Finished runs are
    served from the results folder without Ray's help; the rest go out as tasks, a few more than the cluster
    holds at a time (so that a run submitted later gets a GPU share measured by the earlier ones)."""
    from tqdm.auto import tqdm

    summaries: list[dict | None] = [cached_summary(cfg, seed) for cfg, seed in jobs]
    todo = [i for i, s in enumerate(summaries) if s is None]
    if not todo:
        return summaries  # type: ignore[return-value]
    ray = connect(address)
    roots = sorted({str(Path(cfg["results_dir"]).resolve()) for cfg, _ in jobs})
    mode, line = results_mode(ray, roots, results)
    print(line, flush=True)
    cpus = float(backends.setting("cpus_per_run") or 1)
    window = max(2, int(ray.cluster_resources().get("CPU", 1) / cpus) + 2)
    task = ray.remote(max_calls=1)(_task)
    tracker = ray.remote(num_cpus=0)(_Tracker).remote()
    measured = load_measured(roots)
    total = sum(target_rounds(jobs[i][0]) for i in todo)
    bar = tqdm(total=total, desc=f"{desc}: {len(todo)} to run on Ray, {len(jobs) - len(todo)} cached",
               disable=not progress, unit="round")
    watch = Progress(desc, len(jobs), len(jobs) - len(todo), total)
    queue, running, failures, seen = list(todo), {}, [], set()
    try:
        while queue or running:
            while queue and len(running) < window:
                i = queue.pop(0)
                cfg, seed = jobs[i]
                opts = {"num_cpus": cpus, "num_gpus": gpu_share(cfg, measured), "max_retries": MAX_RETRIES,
                        "retry_exceptions": False, "name": f"{cfg['name']} seed {seed}"}
                where = str(Path(cfg["results_dir"]).resolve())  # not the worker's working directory
                running[task.options(**opts).remote({**cfg, "results_dir": where}, seed, mode, tracker)] = i
            done, _ = ray.wait(list(running), num_returns=len(running), timeout=2.0)
            for ref in done:
                i = running.pop(ref)
                cfg, seed = jobs[i]
                try:
                    summary, files, info = ray.get(ref)
                    if files is not None:
                        summary = _write_back(cfg, seed, files)
                    summaries[i] = {**summary, "ray": info}
                    _save_measured(cfg, info["gpu"])
                except Exception as exc:  # a run that raised, or died more often than Ray retries
                    failures.append((cfg, seed, _error(exc)))
            flight = ray.get(tracker.snapshot.remote())
            for key, (_, _, gpu) in flight.items():
                if gpu and gpu["peak"] > measured.get(key, {}).get("peak", -1):
                    measured[key] = gpu
            _show(bar, watch, jobs, todo, summaries, failures, running, flight, seen, progress)
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref, force=True)
        # a worker killed inside an atomic write leaves its temporary file; once the cancelled tasks have ended,
        # no process writes in their run folders (each is locked by the one task that trained it)
        ray.wait(list(running), num_returns=len(running), timeout=30)
        for i in running.values():
            store.remove_temporary(run_dir(*jobs[i]))
        kept = sum(summaries[i] is not None for i in todo)
        print(f"\n{desc}: interrupted; {kept} of {len(todo)} runs finished and are kept, {len(running)} stopped "
              f"({'their checkpoints stay: ' if mode == 'shared' else ''}the same command goes on from there)",
              flush=True)
        raise
    finally:
        bar.close()
        ray.kill(tracker)
    if failures:
        lines = "\n".join(f"  {cfg['name']} seed {seed} (run {run_id(cfg, seed)}, algorithm {cfg['algorithm']}): "
                          f"{why}" for cfg, seed, why in failures)
        raise RunsFailed(f"{len(failures)} of {len(jobs)} runs failed (finished runs are kept):\n{lines}")
    return summaries  # type: ignore[return-value]


def _show(bar, watch: Progress, jobs, todo, summaries, failures, running, flight, seen, progress) -> None:
    """The bar (rounds, runs done / total, ETA, runs per node) and the progress file of a watcher."""
    rounds = 0
    for i in todo:
        cfg, seed = jobs[i]
        done = summaries[i] is not None
        rounds += target_rounds(cfg) if done else flight.get(run_id(cfg, seed), (None, 0))[1]
    per_node: dict = {}
    for i in running.values():
        cfg, seed = jobs[i]
        node = flight.get(run_id(cfg, seed), ("queued",))[0]
        per_node[node] = per_node.get(node, 0) + 1
        if progress and node != "queued" and (i, node) not in seen:
            seen.add((i, node))
            bar.write(f"{cfg['name']} seed {seed} -> {node}")
    finished = sum(summaries[i] is not None for i in todo) + len(failures)
    bar.n = rounds
    bar.set_postfix_str(f"runs {len(jobs) - len(todo) + finished}/{len(jobs)}"
                        + (f", {len(failures)} failed" if failures else "")
                        + "".join(f"; {node}: {k}" for node, k in sorted(per_node.items())), refresh=False)
    bar.refresh()
    watch.write(finished, rounds)
