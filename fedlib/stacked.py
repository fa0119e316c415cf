"""Several runs of the same shape trained in one process as one stacked group (runs x clients).

A GPU is not filled by one run's batched round (launch-bound, docs/engine.md), nor by several processes
sharing it (four FedProto processes on one H200 made 1.94 rounds/s together against 1.23 for one alone).
:func:`fedlib.runner.run_stacked` trains R runs whose configs differ only in their seed (the seeds of one config:
a table's repetitions) or in sweepable values (below) in lockstep: every round, each run's server broadcasts,
the local updates of all runs' clients go to the batched executor as one group
(:meth:`fedlib.executors.Batched.local_updates_runs`: one vmapped step trains runs x clients, each client with
its own run's generator), each run aggregates, and the
evaluation is one batched pass over runs x clients (:meth:`~fedlib.executors.Batched.evaluate_runs`). Each run
logs, checkpoints and finishes its own run folder exactly as :func:`fedlib.runner.run_one` does (the same
files, run ids and resume; its summary adds ``stacked_runs``).

How: each run's :class:`~fedlib.engine.Simulator` runs unchanged in a thread of its own, with a cohort
(:class:`StackedClients`) that hands its training and its evaluation to a :class:`Lockstep`. Exactly one thread
runs at any time (each holds the lockstep's lock except while it waits), so the runs interleave like
coroutines: when every live run has asked, the last to ask executes the requests of the earliest round for
all of them and wakes the others. A run resumed at another round than the rest trains alone until it
catches up (requests of the earliest round go first). No randomness is shared: each run's draws are derived
from its own seed (:mod:`fedlib.engine`).

Sweep points stack too: runs that differ only in their learning rate or in their method's
:attr:`~fedlib.algorithms.batching.Batching.SWEEPABLE` fields (each row's loss reads its own run's values and
each row steps with its own run's rate). What does not stack, trained one run after another with one log line
saying why: a config whose executor is not ``batched`` (the sequential reference stays exactly as it was), a
method the batched executor cannot batch (:meth:`~fedlib.algorithms.batching.Batching.batch_support`), a
config with a ``defense``, and a config alone in its stack. Runs that differ in anything else (another
hyperparameter, model or dataset) form separate stacks.

Numbers: a stacked run equals the same run trained alone under ``executor: batched`` within the executor
tolerances (batched kernels over a larger group agree to ~1e-7 relative; dropout masks come from one stream
per stacked group, as they already do per group). The speed-up is for GPUs (launch-bound rounds); on a CPU
stacking is there for the tests (docs/runs.md has the one CPU figure, of a tiny overhead-bound model).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import torch

from fedlib.engine import LocalClients
from fedlib.executors import Batched
from fedlib.interrupts import STOP

log = logging.getLogger(__name__)


def stack_key(cfg: dict) -> str:
    """Runs whose configs give the same key train in one stack: the config without its seeds, its learning
    rate (each row steps with its own run's) and its method's sweepable hyperparameters
    (:attr:`~fedlib.algorithms.batching.Batching.SWEEPABLE`: each row's loss reads its own run's)."""
    from fedlib.algorithms import make_algorithm

    free = make_algorithm(cfg["algorithm"]).SWEEPABLE if "algorithm" in cfg else ()
    key = {k: v for k, v in cfg.items() if k not in ("seeds", "train", "algorithm")}
    key["train"] = {k: v for k, v in cfg.get("train", {}).items() if k != "lr"}
    key["algorithm"] = {k: v for k, v in cfg.get("algorithm", {}).items() if k not in free}
    return json.dumps(key, sort_keys=True, default=str)


def why_not_stacked(cfg: dict) -> str | None:
    """``None`` when runs of ``cfg`` can train stacked, else why not (one line)."""
    from fedlib.algorithms import make_algorithm

    if cfg.get("executor") != "batched":
        return f"executor {cfg.get('executor', 'sequential')!r} (stacking needs 'batched')"
    if cfg.get("defense"):
        return "a defense block (noised uploads or DP-SGD)"
    why = make_algorithm(cfg["algorithm"]).batch_support()
    return f"{cfg['algorithm']['name']}: {why}" if why else None


def stacks(jobs: list[tuple[dict, int]]) -> list[list[int]]:
    """The indices of ``jobs`` grouped into stacks (jobs of the same :func:`stack_key`, first-seen order); a job
    that cannot stack (:func:`why_not_stacked`) is a stack of its own."""
    groups: dict = {}
    for i, (cfg, _) in enumerate(jobs):
        key = stack_key(cfg) if why_not_stacked(cfg) is None else ("alone", i)
        groups.setdefault(key, []).append(i)
    return list(groups.values())


class Lockstep:
    """Where the runs of a stack meet: :meth:`call` registers a run's request and waits until the requests of
    the earliest pending (round, stage) have been executed for every run that made one. All methods are called
    with :attr:`cond` held (each run's thread holds it whenever it runs)."""

    def __init__(self, runs: int):
        self.cond = threading.Condition()
        self.live = runs
        self.pending: dict = {}  # run -> (key, kind, payload)
        self.results: dict = {}  # run -> (ok, value)
        self.batched = Batched()
        self.calls = {"train": [], "evaluate": []}  # how many runs each executed request held

    def call(self, run: int, key: tuple, kind: str, payload):
        if STOP.is_set():
            raise KeyboardInterrupt
        self.pending[run] = (key, kind, payload)
        self._maybe_execute()
        while run not in self.results:
            self.cond.wait()
        ok, value = self.results.pop(run)
        if not ok:
            raise value
        return value

    def leave(self) -> None:
        """A run's thread has ended (finished, diverged or failed): the others stop waiting for it."""
        self.live -= 1
        self._maybe_execute()

    def _maybe_execute(self) -> None:
        if not self.pending or len(self.pending) < self.live:
            return
        if STOP.is_set():
            for run in self.pending:
                self.results[run] = (False, KeyboardInterrupt())
            self.pending.clear()
            self.cond.notify_all()
            return
        first = min(key for key, _, _ in self.pending.values())
        runs = sorted(r for r, (key, _, _) in self.pending.items() if key == first)
        kind = self.pending[runs[0]][1]
        payloads = [self.pending.pop(r)[2] for r in runs]
        self.calls[kind].append(len(runs))
        try:
            if kind == "train":
                with torch.enable_grad():
                    out = self.batched.local_updates_runs(payloads)
            else:
                with torch.no_grad():
                    out = self.batched.evaluate_runs(payloads)
        except Exception as exc:  # noqa: BLE001 - every run of the group gets the error, in its own thread
            for r in runs:
                self.results[r] = (False, exc)
        else:
            for r, value in zip(runs, out, strict=True):
                self.results[r] = (True, value)
        self.cond.notify_all()


class StackedClients(LocalClients):
    """A run's in-process clients whose training and evaluation go through a :class:`Lockstep` (everything
    else, the states and the second half of a round, stays the run's own)."""

    def __init__(self, algo, ctx, data, lockstep: Lockstep, run: int):
        super().__init__(algo, ctx, data, "batched")
        self.lockstep, self.run = lockstep, run
        self._round = 0  # the last round trained (the evaluation after it is stage 1 of that round)

    def train(self, clients: dict, msgs: dict, rnd) -> dict:
        jobs = {cid: (clients[cid], msg, self.data.train[cid]) for cid, msg in msgs.items()}
        self._round = rnd.index
        t0 = time.perf_counter()
        results = self.lockstep.call(self.run, (rnd.index, 0), "train", (self.algo, self.ctx, jobs, rnd))
        spent = (time.perf_counter() - t0) / max(1, len(msgs))
        self.seconds = {cid: spent for cid in msgs}  # the stacked group's time, shared over this run's clients
        out = {}
        for cid in msgs:
            clients[cid], up, metrics = results[cid]
            out[cid] = (up, metrics)
        return out

    def evaluate(self, clients: dict, msgs: dict) -> dict:
        tests = {cid: self.data.test[cid] for cid in msgs}
        jobs = {cid: (clients[cid], msg) for cid, msg in msgs.items()}
        return self.lockstep.call(self.run, (self._round, 1), "evaluate", (self.algo, self.ctx, jobs, tests))


_NOTED: set = set()


def note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        log.warning("stacked runs: %s", text)


def folder_files(folder: Path) -> list[str]:
    """The names of a run folder's files (tests compare a stacked run's folder with one trained alone)."""
    return sorted(p.name for p in Path(folder).iterdir())
