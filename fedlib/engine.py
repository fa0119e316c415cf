"""The in-process federated simulator: the one round loop of the project.

Round r (1-based): sample clients with ``np.random.default_rng([seed, r])`` ->
broadcast -> local_update on each sampled client -> aggregate -> (reply -> receive, where the method
has a second half) -> evaluate every client
on its local test set under every inference rule -> log a JSON line -> checkpoint.
Every call gets the round record (:class:`~fedlib.algorithms.base.Round`); the clients'
metrics (mean over the round's clients) and the server's go to the log, not the counts.

Communication is measured from the messages themselves, per direction:
``params`` = elements of floating-point tensors (weights, prototypes, logits: what
papers call "communicated parameters"), ``bytes`` = ``numel * element_size`` of every
tensor plus 8 bytes per plain number (class ids, counts and sample counts included).

Randomness is derived, never global: each local update runs with torch's global RNG
and a generator seeded from (seed, round, cid), the server from (seed, round), so a
run resumed from a checkpoint continues exactly as an uninterrupted one.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from fedlib import store
from fedlib.algorithms.base import Algorithm, Context, Message, Round, derive_seed
from fedlib.counting import phase
from fedlib.data.federated import FederatedData
from fedlib.executors import EXECUTORS, Batched, sequential
from fedlib.interrupts import STOP  # the round loop stops after a round once it is set
from fedlib.metrics import client_accuracies, over_clients, to_host

log = logging.getLogger(__name__)



def message_size(msg: Message) -> tuple[int, int]:
    """``(params, bytes)`` of a message (see the module docstring)."""
    params = nbytes = 0
    for key, v in msg.items():
        if isinstance(v, torch.Tensor):
            nbytes += v.numel() * v.element_size()
            if v.is_floating_point():
                params += v.numel()
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            nbytes += 8
        else:
            raise TypeError(f"message field {key!r} is a {type(v).__name__}; messages hold only "
                            "tensors, ints and floats")
    return params, nbytes


def copy_message(msg: Message) -> Message:
    """A detached copy, so no party can reach another's tensors by reference."""
    return {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in msg.items()}


def sample_clients(seed: int, round_idx: int, num_clients: int, participation: float) -> list[int]:
    """Clients taking part in ``round_idx``: all, or ``max(1, round(rate * M))`` drawn without replacement."""
    if participation >= 1.0:
        return list(range(num_clients))
    k = max(1, int(round(participation * num_clients)))
    rng = np.random.default_rng([seed, round_idx])
    return sorted(rng.choice(num_clients, size=k, replace=False).tolist())


def client_evaluation(algo: Algorithm, ctx: Context, cid: int, client, msg: Message, test) -> tuple[dict, int]:
    """Client ``cid``'s accuracies on its test set ``test`` under every rule (with the server's
    message ``msg``) and the test set's size."""
    scores = algo.predict(ctx, cid, client, msg, test.x)
    per = to_host([client_accuracies(scores, test.y, test.classes, ctx.num_classes)])
    return {k: v[0] for k, v in per.items()}, len(test)


def client_receive(algo: Algorithm, ctx: Context, cid: int, client, msg: Message, data, rnd: Round):
    """The second half of client ``cid``'s round (``receive``), torch's global RNG seeded from (seed, round, cid)."""
    torch.manual_seed(derive_seed(rnd.seed, 5, rnd.index, cid))
    return algo.receive(ctx, cid, client, msg, data, rnd)


class LocalClients:
    """The clients of a simulation: their states stay in ``clients`` dicts of this process, their data in
    ``data``, and ``executor`` trains them (:mod:`fedlib.executors`). The engine reaches clients only
    through ``init_states``, ``states``, ``train``, ``receive`` and ``evaluate``, so another cohort (the
    nodes of a Flower deployment, :mod:`fedlib.flower`) can stand in for this one."""

    def __init__(self, algo: Algorithm, ctx: Context, data: FederatedData, executor: str = "sequential"):
        if executor not in EXECUTORS:
            raise ValueError(f"executor: got {executor!r}; allowed: {', '.join(EXECUTORS)}")
        self.algo, self.ctx, self.data = algo, ctx, data
        self.batched = Batched() if executor == "batched" else None
        self.seconds: dict = {}  # each client's local training seconds in the last round

    @property
    def num_clients(self) -> int:
        return self.data.num_clients

    def init_states(self) -> dict:
        return {cid: self.algo.init_client(self.ctx, cid) for cid in range(self.num_clients)}

    def states(self, clients: dict) -> dict:
        """Every client's state, for a checkpoint."""
        return clients

    def train(self, clients: dict, msgs: dict, rnd: Round) -> dict:
        """``{cid: (upload, metrics)}`` of each ``msgs[cid]``'s local update; ``clients`` takes the new states."""
        jobs = {cid: (clients[cid], msg, self.data.train[cid]) for cid, msg in msgs.items()}
        if self.batched is not None:
            results = self.batched.local_updates(self.algo, self.ctx, jobs, rnd)
            self.seconds = dict(self.batched.times)
        else:
            self.seconds = {}
            results = sequential(self.algo, self.ctx, jobs, rnd, self.seconds)
        out = {}
        for cid in msgs:
            clients[cid], up, metrics = results[cid]
            out[cid] = (up, metrics)
        return out

    def receive(self, clients: dict, msgs: dict, rnd: Round) -> dict:
        """``{cid: metrics}`` of each ``msgs[cid]``'s receive; ``clients`` takes the new states."""
        out = {}
        for cid, msg in msgs.items():
            with phase("receive"):
                clients[cid], out[cid] = client_receive(self.algo, self.ctx, cid, clients[cid], msg,
                                                        self.data.train[cid], rnd)
        return out

    def evaluate(self, clients: dict, msgs: dict) -> dict:
        """``{cid: (accuracies, test size)}`` of every client under ``msgs[cid]``, the accuracies of all
        clients read from the device in one transfer."""
        tests = {cid: self.data.test[cid] for cid in msgs}
        if self.batched is not None:
            return self.batched.evaluate(self.algo, self.ctx, {cid: (clients[cid], msg) for cid, msg in msgs.items()},
                                         tests)
        scores = {cid: self.algo.predict(self.ctx, cid, clients[cid], msg, tests[cid].x) for cid, msg in msgs.items()}
        C = self.ctx.num_classes
        per = to_host([client_accuracies(scores[cid], t.y, t.classes, C) for cid, t in tests.items()])
        return {cid: ({k: v[i] for k, v in per.items()}, len(t)) for i, (cid, t) in enumerate(tests.items())}


class Traffic:
    """Parameters and bytes of a round's messages per direction (:func:`message_size`)."""

    def __init__(self):
        self.counts = {"up_params": 0, "up_bytes": 0, "down_params": 0, "down_bytes": 0}

    def add(self, way: str, msg: Message, size: tuple[int, int] | None = None) -> Message:
        p, b = message_size(msg) if size is None else size
        self.counts[f"{way}_params"] += p
        self.counts[f"{way}_bytes"] += b
        return msg


class Simulator:
    """Runs ``algorithm`` on ``data`` for ``rounds`` rounds; optionally logs and checkpoints.

    With ``run_dir``, writes ``rounds.jsonl`` (every round) and ``checkpoint.pt`` (every
    ``checkpoint_every`` rounds), both atomically and cross-checked (:mod:`fedlib.store`), and
    resumes from the last consistent point found there. ``clients`` replaces the in-process clients
    (:class:`LocalClients` on ``data`` with ``executor``) by another cohort; ``data`` is then unused.
    ``on_round(r)`` is called after round ``r`` is stored (a grid's progress bar moves with it).
    ``total`` (default ``rounds``) is the run's own length, what :class:`Round` tells the method: a run extended
    past it (``train.extend_to``) trains its first ``total`` rounds exactly as the run without the extension did,
    and both evaluate after round ``total``.
    """

    def __init__(self, algorithm: Algorithm, ctx: Context, data: FederatedData | None, rounds: int,
                 participation: float = 1.0, eval_every: int = 1, run_dir: str | os.PathLike | None = None,
                 checkpoint_every: int = 1, progress: bool = True, desc: str | None = None,
                 executor: str = "sequential", clients=None, on_round=None, total: int | None = None):
        self.algo, self.ctx, self.data = algorithm, ctx, data
        self.total = total or rounds
        if self.total > rounds:
            raise ValueError(f"Simulator: total {self.total} is more than the {rounds} rounds to train")
        self.on_round = on_round
        self.rounds, self.participation, self.eval_every = rounds, participation, eval_every
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.checkpoint_every, self.progress = checkpoint_every, progress
        self.desc = desc or algorithm.name
        self.io_seconds: list[float] = []  # persistence time per round (python -m fedlib.bench)
        self.cohort = clients if clients is not None else LocalClients(algorithm, ctx, data, executor)
        # the rounds' ``exact``: False where the batched executor trains the clients (results at rounding level)
        self.exact = executor != "batched" or algorithm.batch_support() is not None
        self._shared = None  # (server, round, message, size) of the last shared broadcast

    @property
    def client_seconds(self) -> dict:
        """Each client's local training seconds in the last round (python -m fedlib.bench)."""
        return self.cohort.seconds

    # -- state -------------------------------------------------------------------------
    def _fresh_state(self):
        return 0, self.cohort.init_states(), self.algo.init_server(self.ctx), []

    def _load(self):
        """Fresh state, or the last consistent point of ``run_dir`` (see :mod:`fedlib.store`)."""
        if self.run_dir is None:
            return self._fresh_state()
        point = store.resume_point(self.run_dir, self.rounds)
        if point.done == 0:
            return self._fresh_state()
        log.info("resuming %s from round %d", self.run_dir, point.done)
        return point.done, point.clients, point.server, point.records

    def _persist(self, round_idx: int, clients, server, records, last: bool) -> None:
        """The log (every round) and the checkpoint (every ``checkpoint_every`` rounds and the
        last), both atomic; the checkpoint records the log it belongs to."""
        t0 = time.perf_counter()
        with phase("checkpoint"):
            text = store.write_log(self.run_dir, records)
            if round_idx % self.checkpoint_every == 0 or last:
                store.save_checkpoint(self.run_dir, round_idx, self.cohort.states(clients), server, text)
        self.io_seconds.append(time.perf_counter() - t0)

    # -- one round ---------------------------------------------------------------------
    def round_record(self, round_idx: int) -> Round:
        return Round(index=round_idx, total=self.total, seed=self.ctx.seed, exact=self.exact)

    def evaluate(self, clients, server, round_idx: int) -> dict:
        """Accuracy of every client on its local test set, per rule and convention, with what
        the server would send after round ``round_idx``."""
        per: dict[str, list[float]] = {}
        sizes = []
        rnd = self.round_record(round_idx + 1)
        with torch.no_grad(), phase("evaluate"):
            msgs = {cid: msg for cid, (msg, _) in self.broadcasts(server, range(self.cohort.num_clients), rnd).items()}
            results = self.cohort.evaluate(clients, msgs)
        for cid in range(self.cohort.num_clients):
            accs, size = results[cid]
            for k, v in accs.items():
                per.setdefault(k, []).append(v)
            sizes.append(size)
        return {"acc": over_clients(per, sizes), "clients": per}

    def broadcasts(self, server, cids, rnd: Round) -> dict:
        """``{cid: (message copy, (params, bytes))}``. A method whose broadcast is the same for
        every client (``SHARED_BROADCAST``) builds it once per server state and round, and every
        client gets that one copy: the evaluation after round r and the training of round r + 1 share it."""
        if not self.algo.SHARED_BROADCAST:
            out = {}
            for cid in cids:
                msg = copy_message(self.algo.broadcast(self.ctx, server, cid, rnd))
                out[cid] = (msg, message_size(msg))
            return out
        held = self._shared
        if held is None or held[0] is not server or held[1] != rnd.index:
            msg = copy_message(self.algo.broadcast(self.ctx, server, None, rnd))
            held = self._shared = (server, rnd.index, msg, message_size(msg))
        return {cid: (held[2], held[3]) for cid in cids}

    def step(self, round_idx: int, clients: dict, server) -> tuple[dict, object, dict]:
        """Run round ``round_idx``; return new client states, server state and its record."""
        t0 = time.perf_counter()
        seed = self.ctx.seed
        rnd = self.round_record(round_idx)
        chosen = sample_clients(seed, round_idx, self.cohort.num_clients, self.participation)
        traffic, local = Traffic(), {}
        with phase("messages"):
            msgs = {}
            for cid, (msg, size) in self.broadcasts(server, chosen, rnd).items():
                msgs[cid] = traffic.add("down", msg, size)
        results = self.cohort.train(clients, msgs, rnd)
        uploads = {}
        with phase("messages"):
            for cid in chosen:
                up, metrics = results[cid]
                uploads[cid] = copy_message(traffic.add("up", up))
                for k, v in metrics.items():
                    local.setdefault(k, []).append(float(v))
        torch.manual_seed(derive_seed(seed, 2, round_idx))
        with phase("aggregate"):
            server, server_metrics = self.algo.aggregate(self.ctx, server, uploads, rnd)
        # the optional second half of a round: server reply -> client receive
        replies = {cid: self.algo.reply(self.ctx, server, cid, rnd) for cid in chosen}
        replies = {cid: traffic.add("down", copy_message(m)) for cid, m in replies.items() if m is not None}
        if replies:
            for metrics in self.cohort.receive(clients, replies, rnd).values():
                for k, v in metrics.items():
                    local.setdefault(k, []).append(float(v))
        t1 = time.perf_counter()
        losses = local.pop("train_loss", [])
        rec = {"round": round_idx, "participants": len(chosen),
               "train_loss": float(np.mean(losses)) if losses else None, **traffic.counts}
        if local:
            rec["local"] = {k: float(np.mean(v)) for k, v in local.items()}
        if server_metrics:
            rec["server"] = {k: (v if isinstance(v, int) else float(v)) for k, v in server_metrics.items()}
        if rec["train_loss"] is not None and not math.isfinite(rec["train_loss"]):
            # divergence is a result: the run stops here and no NaN model is scored
            rec["diverged"] = True
        elif round_idx % self.eval_every == 0 or round_idx in (self.total, self.rounds):
            rec.update(self.evaluate(clients, server, round_idx))
        t2 = time.perf_counter()
        rec.update(train_seconds=t1 - t0, eval_seconds=t2 - t1, seconds=t2 - t0)
        return clients, server, rec

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> list[dict]:
        """Run (or resume) all rounds; return the per-round records. A round whose training
        loss is not finite is marked ``diverged`` and ends the run."""
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        done, clients, server, records = self._load()
        if records and records[-1].get("diverged"):
            done = self.rounds
        bar = tqdm(total=self.rounds, initial=done, desc=self.desc, disable=not self.progress, leave=False)
        try:
            for r in range(done + 1, self.rounds + 1):
                clients, server, rec = self.step(r, clients, server)
                records.append(rec)
                stop = bool(rec.get("diverged"))
                if self.run_dir is not None:
                    self._persist(r, clients, server, records, last=stop or r == self.rounds)
                bar.update(1)
                if self.on_round is not None:
                    self.on_round(r)
                if STOP.is_set():  # an interrupt that landed where Python swallows it (a finaliser) stops here
                    raise KeyboardInterrupt
                if "acc" in rec:
                    main = self.main_metric(rec)
                    bar.set_postfix({main: f"{rec['acc'][main]['mean']:.4f}", "s/round": f"{rec['seconds']:.2f}"})
                if stop:
                    log.warning("%s: training loss is not finite in round %d: diverged, stopping", self.desc, r)
                    break
        finally:
            bar.close()
        self.clients, self.server = clients, server
        return records

    def main_metric(self, rec: dict) -> str:
        """The metric shown in the progress bar: the algorithm's last (own) rule, own classes."""
        key = f"acc_{self.algo.RULES[-1]}_own"
        return key if key in rec["acc"] else next(iter(rec["acc"]))
