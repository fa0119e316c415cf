"""How the clients of a round train and are evaluated: one after another, or all at once.

- ``sequential`` (the reference, the default on CPU): each client's
  :meth:`~fedlib.algorithms.base.Algorithm.local_update` in turn, torch's global RNG seeded
  per client.
- ``batched`` (the default on CUDA): clients that run the same architecture step in lockstep.
  Their parameters, buffers (BatchNorm running statistics, updated per client), momentum
  buffers and the tensors their loss reads are stacked along a client axis, and one
  ``torch.func.vmap(torch.func.grad(...))`` call computes every client's gradient of the
  method's own :meth:`~fedlib.algorithms.base.Algorithm.batch_loss` (the same function the
  sequential executor uses). Each client keeps its own batch order (its generator), its own
  number of steps (clients with fewer batches sit out the later steps) and its own batch
  sizes (a step's clients are grouped by batch length: a client smaller than one batch takes
  one step on all its samples). The SGD update is torch's (momentum, weight decay) written
  on the stacked tensors. Heterogeneous families form one group per architecture. A task's
  training phases (each with its trainable part and learning rate) and per-step draws run in
  the same lockstep loop. The method finishes the whole group at once where it can
  (:meth:`~fedlib.algorithms.batching.Batching.finish_group`). Evaluation is batched the same way
  (test sets padded; eval mode has no batch statistics), scored per group where the method
  can (:meth:`~fedlib.algorithms.batching.Batching.scores_group`) and read in one transfer.

Two differences from the sequential executor, both documented in the equivalence tests:
gradients come from batched kernels (they agree to ~1e-7 relative, not bit for bit), and
dropout (only in some Ht0 members) draws per-client masks from one seeded stream per group
instead of one per client. A method that cannot be batched (several trained modules, a loss
with value-dependent shapes) runs sequentially, with one log line saying why.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
import time

import torch
from torch.func import functional_call, grad, vmap

from fedlib.algorithms.batching import TrainedGroup
from fedlib.algorithms.contract import Algorithm, Context, Phase, Round, derive_seed
from fedlib.algorithms.loops import collected, phase_parameters, steps
from fedlib.counting import phase
from fedlib.metrics import client_accuracies, group_accuracies
from fedlib.models import member
from fedlib.prototypes import GroupSums

log = logging.getLogger(__name__)
EXECUTORS = ("sequential", "batched")
STEP_MODES = ("auto", "loop", "fixed", "graph")
SWEPT = "hp."  # the extras holding each row's value of a swept hyperparameter (sweep points stacked)
GRAPHS_ENV = "FEDLIB_CUDA_GRAPHS"  # "1": the lockstep steps captured as CUDA graphs (not yet the default)


def _known_mode(mode: str) -> None:
    if mode not in STEP_MODES:
        raise ValueError(f"step mode: got {mode!r}; allowed: {', '.join(STEP_MODES)}")


def step_mode(device: str, mode: str = "auto") -> str:
    """How an epoch's lockstep steps run: ``loop`` (eager, the host picks what each step needs; the reference on
    a CPU), ``fixed`` (one fixed-shape step body that reads its step's inputs from device tensors through a step
    counter on the device: eager), ``graph`` (that body captured once per epoch as a CUDA graph and replayed:
    one launch per step). ``auto``: ``graph`` on CUDA where ``$FEDLIB_CUDA_GRAPHS`` is ``1``, else ``loop``
    (capture is opt-in until ``scripts/gpu_check.sh`` has confirmed it on a GPU: docs/engine.md)."""
    _known_mode(mode)
    if mode == "auto":
        return "graph" if device == "cuda" and os.environ.get(GRAPHS_ENV, "0") == "1" else "loop"
    if mode == "graph" and device != "cuda":
        raise ValueError(f"step mode: got 'graph' on {device!r}; allowed there: loop or fixed (graphs need CUDA)")
    return mode


def _pick(d: dict, ix: torch.Tensor, full: bool) -> dict:
    """The rows ``ix`` of every stacked tensor (all of them as they are when ``full``)."""
    return d if full else {n: v[ix] for n, v in d.items()}


def _forward(model, w, x):
    return functional_call(model, w, (x,))


def sequential(algo: Algorithm, ctx: Context, jobs: dict, rnd: Round, times: dict | None = None) -> dict:
    """``{cid: (state, upload, metrics)}`` from each ``jobs[cid] = (client, msg, data)`` in turn
    (``times``, if given, receives each client's seconds)."""
    out = {}
    for cid, (client, msg, data) in jobs.items():
        t0 = time.perf_counter()
        torch.manual_seed(derive_seed(rnd.seed, 1, rnd.index, cid))  # dropout and other global-RNG draws
        with phase("train.step"):
            out[cid] = algo.local_update(ctx, cid, client, msg, data, rnd)
        if times is not None:
            _sync(ctx)
            times[cid] = time.perf_counter() - t0
    return out


def _sync(ctx: Context) -> None:
    if ctx.device == "cuda":
        torch.cuda.synchronize()


class _EpochPlan:
    """One local epoch of a group, drawn on the host as :func:`~fedlib.algorithms.loops.sgd_epochs`
    draws it (each client's permutation from its own generator) and uploaded as one tensor.

    ``rows`` (steps, G, batch): the rows of the group's stacked data each client reads at each
    step; ``active`` (steps, G): whether the client takes that step (an inactive client computes
    on its own first samples and every effect of that is masked out), ``all_on`` the same per
    step on the host; ``odd``: ``(g, rows)`` of the batches shorter than ``batch`` (a client with
    fewer samples than one batch, or a last batch without ``drop_last``), each taken alone after
    the group's steps (the client's last step either way).
    """

    def __init__(self, sizes: list[int], t, gens: list, device):
        bs, G = t.batch_size, len(sizes)
        self.steps_of = [steps(n, t) for n in sizes]
        full = [min(k, n // bs) for n, k in zip(sizes, self.steps_of, strict=True)]
        self.steps = max(full)
        rows = torch.zeros(self.steps, G, bs, dtype=torch.int64)
        active = torch.zeros(self.steps, G, dtype=torch.int64)
        odd, start = [], 0
        for g, n in enumerate(sizes):
            perm = (torch.randperm(n, generator=gens[g]) if t.shuffle else torch.arange(n)) + start
            rows[:full[g], g] = perm[:full[g] * bs].view(full[g], bs)
            rows[full[g]:, g] = start + torch.arange(bs) % n
            active[:full[g], g] = 1
            if self.steps_of[g] > full[g]:
                odd.append((g, perm[full[g] * bs:(full[g] + 1) * bs]))
            start += n
        self.full = full
        self.all_on = [s < min(full) for s in range(self.steps)]
        flat = torch.cat([rows.flatten(), active.flatten()] + [r for _, r in odd]).to(device)  # the one upload
        k, at = rows.numel(), rows.numel() + active.numel()
        self.rows = flat[:k].view(self.steps, G, bs)
        self.active = flat[k:at].view(self.steps, G).bool()
        self.odd = []
        for g, r in odd:
            self.odd.append((g, flat[at:at + len(r)]))
            at += len(r)


class _MaskedSGD:
    """torch.optim.SGD's step (weight decay, momentum without dampening; the buffer starts at
    zero, so the first step's buffer is the gradient) on stacked parameters with foreach ops,
    every client of the group at every step: where a client is inactive its momentum factor is
    1, its gradient weight 0 and its learning rate 0."""

    def __init__(self, P: dict, t, lr: float):
        self.P, self.t, self.lr = P, t, lr
        self.M = {n: torch.zeros_like(v) for n, v in P.items()} if t.momentum else {}
        self.ndims = sorted({v.dim() for v in P.values()})

    def epoch_factors(self, active: torch.Tensor) -> list[dict]:
        """Per step of an epoch, ``{(kind, ndim): (G, 1, ...)}``: the per-client factors of that step."""
        a = active.to(next(iter(self.P.values())).dtype)
        kinds = {"lr": a * -self.lr}
        if self.M:
            kinds.update(grad=a, mom=1 - a * (1 - self.t.momentum))
        keys = [(k, d) for k in kinds for d in self.ndims]
        rows = [kinds[k].view(*a.shape, *[1] * (d - 1)).unbind(0) for k, d in keys]
        return [dict(zip(keys, vals, strict=True)) for vals in zip(*rows, strict=True)]

    def factors(self, on: torch.Tensor) -> dict:
        """The per-client factors of one step from its device mask ``on`` (G,): as :meth:`epoch_factors`."""
        return self.epoch_factors(on.unsqueeze(0))[0]

    def row_factors(self, g: int) -> dict | None:
        """The factors of a step of row ``g`` alone (an odd step): ``None`` (plain SGD) unless the rows have their
        own learning rates (a (G,) tensor: sweep points), then row ``g``'s rate as a factor."""
        if not isinstance(self.lr, torch.Tensor):
            return None
        on = torch.zeros(len(self.lr), dtype=self.lr.dtype, device=self.lr.device)
        on[g] = 1
        return {k: v[g:g + 1] for k, v in self.factors(on).items()}

    def step(self, grads: dict, f: dict) -> None:
        self.update(self.P, self.M, grads, f)

    def update(self, P: dict, M: dict, grads: dict, f: dict | None) -> None:
        """One step of ``P`` (momentum ``M``) with the per-client factors ``f`` (``None``: all active)."""
        names = list(P)
        p, g = [P[n] for n in names], [grads[n] for n in names]
        with torch.no_grad():
            if self.t.weight_decay:
                g = torch._foreach_add(g, p, alpha=self.t.weight_decay)
            if M:
                m = [M[n] for n in names]
                if f is None:
                    torch._foreach_mul_(m, self.t.momentum)
                    torch._foreach_add_(m, g)
                else:
                    torch._foreach_mul_(m, [f["mom", v.dim()] for v in p])
                    torch._foreach_addcmul_(m, g, [f["grad", v.dim()] for v in p])
                g = m
            if f is None:
                torch._foreach_add_(p, g, alpha=-self.lr)
            else:
                torch._foreach_addcmul_(p, g, [f["lr", v.dim()] for v in p])


class _FixedStep:
    """One lockstep step of an epoch as a fixed-shape body (:func:`step_mode` ``fixed`` and ``graph``): every
    client steps (inactive ones with learning rate 0, momentum factor 1 and their buffers kept), the step's
    inputs are read from the epoch's device tensors at a step counter on the device (``index_select``), the
    losses and per-class feature sums are added in place on the device, and the counter advances: nothing
    read from or decided on the host, so the body can be captured as a CUDA graph and replayed once per step.
    Same updates as the ``loop`` path; the sums are added in another order (a batched one-hot product per
    step instead of the loop's chunked ``index_add_``), so they agree to rounding, not bit for bit."""

    def __init__(self, step, opt, plan, held, P, B, E, T, D, acc, S, xs, ys, collect, C, epoch):
        self.step, self.opt, self.held, self.P, self.B, self.E, self.T = step, opt, held, P, B, E, T
        self.D, self.acc, self.S, self.xs, self.ys, self.collect, self.C, self.epoch = D, acc, S, xs, ys, collect, \
            C, epoch
        self.active = plan.active
        self.at = torch.zeros(1, dtype=torch.int64, device=xs.device)  # the step counter, on the device
        self.classes = torch.arange(C, device=xs.device)

    def _row(self, v: torch.Tensor) -> torch.Tensor:
        return v.index_select(0, self.at)[0]

    def __call__(self) -> None:
        x, y, on = self._row(self.xs), self._row(self.ys), self._row(self.active)
        d = {k: self._row(v) for k, v in self.D.items()}
        kept = self.held.hold()
        grads, (losses, parts, coll) = self.step(self.P, self.B, x, y, self.E, self.T, d, self.epoch)
        self.opt.step(grads, self.opt.factors(on))
        self.held.keep(kept, on)
        self.acc.add(on, losses, parts)
        if self.collect:
            G = len(on)
            hot = (y.unsqueeze(2) == self.classes) & on.view(G, 1, 1)  # (G, batch, C): active clients' labels
            for lv, z in coll.items():
                self.S[lv][:G * self.C].view(G, self.C, -1).add_(torch.bmm(hot.to(z.dtype).transpose(1, 2), z))
        self.at.add_(1)


class _Accounts:
    """Per-client sums of a group's batch losses (per training phase) and loss parts, kept on the device and
    read once."""

    def __init__(self, G: int, device):
        self.loss = torch.zeros(G, device=device)
        self.phases: dict = {}  # {name: loss sums} of the phases before the current one
        self.parts: dict = {}
        self.steps: list = []  # (losses (G,), parts) of each step of the epoch

    def next_phase(self, name: str) -> None:
        """The losses from here on are phase ``name``'s (the previous phase's are kept)."""
        if self.phases or name:
            self.phases[name] = self.loss = torch.zeros_like(self.loss)

    def add(self, on: torch.Tensor, losses: torch.Tensor, parts: dict) -> None:
        self.loss += torch.where(on, losses, 0.0)
        for k, v in parts.items():
            self.parts.setdefault(k, torch.zeros_like(self.loss)).add_(torch.where(on, v, 0.0))

    def record(self, losses: torch.Tensor, parts: dict) -> None:
        """One lockstep step's values, added (where the client was active) at :meth:`close_epoch`."""
        self.steps.append((losses, parts))

    def close_epoch(self, active: torch.Tensor) -> None:
        """Add the epoch's recorded steps, ``active`` (steps, G) saying which count."""
        if self.steps:
            on = active.to(self.loss.dtype)
            self.loss += (torch.stack([v for v, _ in self.steps]) * on).sum(0)
            for k in self.steps[0][1]:
                total = (torch.stack([p[k] for _, p in self.steps]) * on).sum(0)
                self.parts.setdefault(k, torch.zeros_like(self.loss)).add_(total)
        self.steps = []

    def to_host(self, K: dict, dims: dict, C: int) -> dict:
        """The loss sums (``train_loss``: the last phase's; ``<phase>_loss`` per phase) and the classes each
        client saw, in one transfer to the host."""
        G = len(self.loss)
        losses = {"train_loss": self.loss, **{f"{k}_loss": v for k, v in self.phases.items()}}
        keys = [*losses, *self.parts]
        seen = [(K[lv][:G * C].view(G, C) > 0).to(self.loss.dtype) for lv in dims]
        rows = torch.cat([torch.stack([*losses.values(), *self.parts.values()], 1), *seen], 1).tolist()
        n = len(keys)
        sums = {k: [row[i] for row in rows] for i, k in enumerate(keys)}
        present = {lv: [[c for c in range(C) if row[n + j * C + c]] for row in rows] for j, lv in enumerate(dims)}
        return {"sums": sums, "seen": present}


class _Held:
    """The group's fixed tensors (buffers, frozen parameters) as contiguous views of one flat tensor per dtype
    (tensor after tensor, each (G, ...)), so that keeping the inactive clients' values across a step costs four
    ops per dtype, not three per tensor. ``owner``: the client of each element."""

    def __init__(self, B: dict):
        self.views, self.flats, self.owners = {}, [], []
        by_dtype: dict = {}
        for n, v in B.items():
            by_dtype.setdefault(v.dtype, []).append(n)
        for names in by_dtype.values():
            flat = torch.cat([B[n].flatten() for n in names])
            G, at, owner = len(B[names[0]]), 0, []
            for n in names:
                self.views[n] = flat[at:at + B[n].numel()].view(B[n].shape)
                at += B[n].numel()
                owner.append(torch.arange(G, device=flat.device).view(G, 1).expand(G, B[n][0].numel()).flatten())
            self.flats.append(flat)
            self.owners.append(torch.cat(owner))

    def hold(self) -> list:
        return [f.clone() for f in self.flats]

    def keep(self, held: list, on: torch.Tensor) -> None:
        """Where a client is not ``on``, its tensors go back to ``held``."""
        for f, h, owner in zip(self.flats, held, self.owners, strict=True):
            f.copy_(torch.where(on[owner], f, h))


class _Sums:
    """Per-class feature sums of an epoch's steps, added a chunk of steps at a time (one ``index_add`` per level
    and chunk, the rows in step order: on a CPU the same additions as step by step)."""

    def __init__(self, S: dict, cells: torch.Tensor, chunk: int = 16):
        self.S, self.cells, self.chunk = S, cells, chunk
        self.pending: list = []

    def add(self, s: int, coll: dict) -> None:
        self.pending.append((s, coll))
        if len(self.pending) == self.chunk:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        first, last = self.pending[0][0], self.pending[-1][0]
        rows = self.cells[first:last + 1].flatten()
        for lv in self.pending[0][1]:
            self.S[lv].index_add_(0, rows, torch.stack([c[lv] for _, c in self.pending]).flatten(0, 2))
        self.pending = []


def _draws(plan: _EpochPlan, tasks: list) -> tuple[dict, dict]:
    """Each client's per-step draws of an epoch (:attr:`LocalTask.draws`, in its step order): ``{key: (steps, G,
    ...)}`` for the lockstep steps (zeros where a client sits out) and ``{g: {key: ...}}`` for the odd steps."""
    per = [task.draws(k) for task, k in zip(tasks, plan.steps_of, strict=True)]
    D, odd = {}, {}
    for key, first in per[0].items():
        rows = first.new_zeros(plan.steps, len(tasks), *first.shape[1:])
        for g, dr in enumerate(per):
            rows[:plan.full[g], g] = dr[key][:plan.full[g]]
            if plan.steps_of[g] > plan.full[g]:
                odd.setdefault(g, {})[key] = dr[key][plan.full[g]]
        D[key] = rows
    return D, odd


def _seen_cells(K: torch.Tensor, sizes: list[int], n: int) -> torch.Tensor:
    """The rows ``g * C + c`` of the first ``n`` counts ``K`` that are nonzero, on the device: the host's
    per-client ``sizes`` give their number, so nothing more is read."""
    return torch.nonzero_static(K[:n] > 0, size=sum(sizes)).flatten()


def _client(row) -> int:
    """The client id of a group's row: a client id, or a ``(run, cid)`` pair of stacked runs."""
    return row[1] if isinstance(row, tuple) else row


def _runs_of(rows: list) -> dict:
    """``{run: (lo, hi)}``: the rows of each run of a group (``(run, cid)`` pairs, run after run)."""
    spans: dict = {}
    for g, (k, _) in enumerate(rows):
        lo, _hi = spans.get(k, (g, g))
        if _hi != g:
            raise ValueError("a stacked group's rows must come run after run")
        spans[k] = (lo, g + 1)
    return spans


def _per_run(group: TrainedGroup, rows: list, jobs: dict) -> dict:
    """``{run: TrainedGroup}``: each run's rows of a stacked group as a group of its own (client ids as keys; the
    stacked tensors and sums are views of the group's, the whole group's when one run holds every row)."""
    out = {}
    spans = _runs_of(rows)
    for k, (lo, hi) in spans.items():
        mine = rows[lo:hi]
        whole = len(spans) == 1
        out[k] = TrainedGroup(
            [c for _, c in mine], {c: jobs[k, c] for _, c in mine}, {c: group.tasks[k, c] for _, c in mine},
            {c: group.states[k, c] for _, c in mine},
            group.stacked if whole else {n: v[lo:hi] for n, v in group.stacked.items()},
            group.sums if whole else {lv: s.part(lo, hi) for lv, s in group.sums.items()},
            {c: group.metrics[k, c] for _, c in mine})
    return out


class Batched:
    """The batched executor (module docstring); keeps which methods it already noted as sequential."""

    def __init__(self, mode: str = "auto"):
        _known_mode(mode)  # a bad name fails here, not in the first round
        self.mode = mode  # how the lockstep steps run (:func:`step_mode`)
        self._side = self._pool = None  # the CUDA graphs' stream and memory pool (one graph alive at a time)
        self.captured = 0  # epochs that ran as a CUDA graph
        self._noted: set = set()
        self._stacked: dict = {}  # each group's training data, concatenated (per set of clients and data)
        self.times: dict = {}  # seconds of the last round per client (a group's time split over its clients)

    def _note(self, algo: Algorithm, why: str) -> None:
        if algo.name not in self._noted:
            self._noted.add(algo.name)
            log.warning("batched executor: %s runs sequentially (%s)", algo.name, why)

    def _note_once(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            log.warning("batched executor: %s", text)

    # -- local training ---------------------------------------------------------------------
    def local_updates(self, algo: Algorithm, ctx: Context, jobs: dict, rnd: Round) -> dict:
        return self.local_updates_runs([(algo, ctx, jobs, rnd)])[0]

    def local_updates_runs(self, runs: list) -> list:
        """:meth:`local_updates` of several runs of the same shape at once (:mod:`fedlib.stacked`): ``runs`` =
        ``[(algo, ctx, jobs, rnd)]`` in the same round; the clients of all runs that share a group key train as
        one stacked group (runs x clients, rows run after run), each client with its own run's generator, and each
        run's method finishes its part of the group. Returns each run's ``{cid: (state, upload, metrics)}``.
        The loss function, ``rnd``, the model recipe and the training settings are the first run's, except each
        row's :attr:`~fedlib.algorithms.batching.Batching.SWEEPABLE` values and learning rate (its own run's):
        the runs must differ only there or where it does not matter (:func:`fedlib.stacked.stack_key`). With
        one run: :meth:`local_updates`."""
        algo, ctx, _, rnd = runs[0]
        why = algo.batch_support()
        self.times = {}
        if why:
            self._note(algo, why)
            out = []
            for k, (a, c, jobs, r) in enumerate(runs):
                times: dict = {}
                out.append(sequential(a, c, jobs, r, times))
                self.times.update(times if len(runs) == 1 else {(k, cid): v for cid, v in times.items()})
            return out
        tasks, datas, jobs_of = {}, {}, {}
        with phase("setup"):
            for k, (a, c, jobs, r) in enumerate(runs):
                for cid, (client, msg, data) in jobs.items():
                    tasks[k, cid] = a.task(c, cid, client, msg, data, r)
                    datas[k, cid], jobs_of[k, cid] = data, jobs[cid]
        groups: dict = {}
        for (k, cid), task in tasks.items():
            key = (member(ctx.model_name, cid), tuple(sorted((n, tuple(v.shape)) for n, v in task.extras.items())),
                   tuple(task.teachers), task.collect, task.collect_all_epochs, task.phases, task.draws is None,
                   task.head_on)
            groups.setdefault(key, []).append((k, cid))
        out: list = [{} for _ in runs]
        for n, rows in enumerate(groups.values()):
            t0 = time.perf_counter()
            torch.manual_seed(derive_seed(rnd.seed, 8, rnd.index, n))  # dropout masks of this group
            with phase("setup"):
                group = self._train_stacked(algo, ctx, rows, tasks, datas, rnd,
                                            gens=[runs[k][3].generator(cid) for k, cid in rows],
                                            algos=[runs[k][0] for k, _ in rows],
                                            lrs=[runs[k][1].train.round_lr(runs[k][3]) for k, _ in rows])
            for k, part in _per_run(group, rows, jobs_of).items():
                a, c, _, r = runs[k]
                with phase("messages"):
                    out[k].update(a.finish_group(c, r, part))
            _sync(ctx)
            self.times.update({(row if len(runs) > 1 else row[1]): (time.perf_counter() - t0) / len(rows)
                               for row in rows})
        return [{cid: out[k][cid] for cid in jobs} for k, (_, _, jobs, _) in enumerate(runs)]

    def _train_group(self, algo, ctx, cids, tasks, datas, rnd) -> dict:
        """``{cid: (trained state, {level: ProtoAccumulator}, metrics)}`` of one group."""
        with phase("setup"):
            group = self._train_stacked(algo, ctx, cids, tasks, datas, rnd)
        return {cid: (group.states[cid], {lv: acc.client(g) for lv, acc in group.sums.items()}, group.metrics[cid])
                for g, cid in enumerate(cids)}

    def _train_stacked(self, algo, ctx, cids, tasks, datas, rnd, gens=None, algos=None, lrs=None) -> TrainedGroup:
        """One group trained in lockstep. ``cids``: the group's rows, client ids or ``(run, cid)`` pairs (the runs
        of :meth:`local_updates_runs`); ``gens``: each row's batch-order generator (default: ``rnd``'s);
        ``algos`` and ``lrs``: each row's run's method and learning rate, where the runs are sweep points (each
        row's loss reads its own run's :attr:`~fedlib.algorithms.batching.Batching.SWEEPABLE` values, each row
        steps with its own rate; default: ``algo``'s and ``ctx``'s for every row)."""
        t = ctx.train
        G, first = len(cids), tasks[cids[0]]
        cid0 = _client(cids[0])
        model = algo.module(ctx, cid0, None)  # a scratch module: functional_call gives it every tensor
        model.train()
        grads_on = {n for n, p in model.named_parameters() if p.requires_grad}

        def stack(names, dicts):
            return {n: torch.stack([d[n] for d in dicts]) for n in names}

        W = stack(list(model.state_dict()), [tasks[c].weights for c in cids])  # every tensor, (G, ...)
        E = stack(list(first.extras), [tasks[c].extras for c in cids])
        teachers, T = {}, {}
        for name in first.teachers:
            teachers[name] = algo.module(ctx, cid0, first.teachers[name], role="teacher." + name)
            teachers[name].eval()
            T[name] = stack(list(first.teachers[name]), [tasks[c].teachers[name] for c in cids])

        # torchvision's stochastic depth (EfficientNet) draws into an unbatched tensor: vmap can only give
        # every client of the group the same draw there
        same = any(type(m).__name__ == "StochasticDepth" for m in model.modules())
        if same:
            self._note_once(f"{member(ctx.model_name, cid0)}: one stochastic-depth draw per step for all its "
                            "clients (torchvision draws it into an unbatched tensor)")
        C = ctx.num_classes
        dims = {lv: C if lv == "logits" else model.feature_dims[lv] for lv in first.collect}
        dev = next(iter(W.values())).device
        swept = [f for f in algo.SWEEPABLE if algos is not None and len({getattr(a, f) for a in algos}) > 1]
        for f in swept:
            E[SWEPT + f] = torch.tensor([float(getattr(a, f)) for a in algos], device=dev)
        X, Y = self._data(cids, datas)
        # per-class sums (client-major rows g * C + c) with a spare last row for inactive clients' steps
        S = {lv: torch.zeros(G * C + 1, d, device=dev) for lv, d in dims.items()}
        K = {lv: torch.zeros(G * C + 1, dtype=torch.int64, device=dev) for lv in dims}
        acc = _Accounts(G, dev)
        sizes = [len(datas[c]) for c in cids]
        gens = [rnd.generator(c) for c in cids] if gens is None else gens
        phases = [ph for ph in first.phases if ph.epochs > 0] or [Phase("all", t.local_epochs)]
        with phase("train.step"):
            for i, ph in enumerate(phases):
                trained = phase_parameters(model, ph.part) & grads_on
                P = {n: v for n, v in W.items() if n in trained}
                held = _Held({n: v for n, v in W.items() if n not in trained})
                B = held.views
                step = _step_function(algo, model, teachers, first, rnd, swept, same,
                                      {"phase": ph.part} if first.phases else {})
                lr = t.round_lr(rnd) if ph.lr is None else ph.lr
                if ph.lr is None and lrs is not None and len(set(lrs)) > 1:  # sweep points of the learning rate
                    lr = torch.tensor(lrs, dtype=next(iter(P.values())).dtype, device=dev)
                opt = _MaskedSGD(P, t, lr)
                acc.next_phase(ph.part if first.phases else "")
                for epoch in range(ph.epochs):
                    plan = _EpochPlan(sizes, t, gens, dev)
                    collect = bool(dims) and i == len(phases) - 1 and (first.collect_all_epochs
                                                                       or epoch == ph.epochs - 1)
                    xs, ys = X[plan.rows], Y[plan.rows]  # (steps, G, batch, ...): the epoch's batches in one gather
                    cells = None
                    if collect:
                        cells = torch.where(plan.active.unsqueeze(2),
                                            torch.arange(G, device=dev).view(1, G, 1) * C + ys, G * C).flatten(1)
                        for lv in dims:
                            K[lv].index_add_(0, cells.flatten(), torch.ones_like(cells.flatten()))
                    D, odd_draws = _draws(plan, [tasks[c] for c in cids]) if first.draws else ({}, {})
                    self._epoch(step, opt, plan, held, P, B, E, T, D, acc, S, xs, ys, cells, epoch, C)
                    for g, idx in plan.odd:  # a batch shorter than the group's (module docstring)
                        self._odd_step(step, opt, P, B, E, T, odd_draws.get(g, {}), acc, S, K, X[idx], Y[idx], g, C,
                                       epoch, collect)
                W = {n: P[n] if n in P else B[n] for n in W}
        return _trained_group(cids, tasks, W, acc, S, K, dims, C, phases, plan)

    def _epoch(self, step, opt, plan, held, P, B, E, T, D, acc, S, xs, ys, cells, epoch, C) -> None:
        """The lockstep steps of one epoch (``D``: the per-step draws (steps, G, ...); ``cells``: where the
        collected features go, or ``None``), as :attr:`mode` says (:func:`step_mode`)."""
        mode = step_mode(xs.device.type, self.mode)
        if mode != "loop" and plan.steps:
            body = _FixedStep(step, opt, plan, held, P, B, E, T, D, acc, S, xs, ys, cells is not None, C, epoch)
            if mode == "graph" and plan.steps > 2:
                run = self._capture(body) or body  # the capture takes the epoch's first step
                for _ in range(plan.steps - 1):
                    run()
            else:
                for _ in range(plan.steps):
                    body()
            return
        factors = opt.epoch_factors(plan.active)
        xs, ys, ons = xs.unbind(0), ys.unbind(0), plan.active.unbind(0)
        ds = [dict(zip(D, vals, strict=True)) for vals in zip(*(v.unbind(0) for v in D.values()), strict=True)] \
            if D else [{}] * plan.steps
        feats = _Sums(S, cells) if cells is not None else None
        for s in range(plan.steps):
            # clients past their last step keep their buffers (BatchNorm statistics); known on the host
            kept = held.hold() if not plan.all_on[s] else None
            with phase("train.fwdbwd"):
                grads, (losses, parts, coll) = step(P, B, xs[s], ys[s], E, T, ds[s], epoch)
            opt.step(grads, factors[s])
            if kept is not None:
                held.keep(kept, ons[s])
            acc.record(losses, parts)
            if feats is not None:
                feats.add(s, coll)
        acc.close_epoch(plan.active)
        if feats is not None:
            feats.flush()

    def _capture(self, body: _FixedStep):
        """Run ``body``'s first step eagerly, then capture the body as a CUDA graph, both on a side stream (the
        warm-up CUDA graphs want: the libraries' per-stream handles and workspaces exist before capture);
        returns the graph's ``replay`` for the remaining steps, or ``None`` where capture fails (one log line
        saying why; a failed capture executed nothing, so the epoch goes on eagerly from its second step)."""
        if self._side is None:
            self._side, self._pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
        graph, main = torch.cuda.CUDAGraph(), torch.cuda.current_stream()
        self._side.wait_stream(main)
        with torch.cuda.stream(self._side):
            body()  # the warm-up, and a step like any other (its errors are the run's)
        try:
            with torch.cuda.stream(self._side):
                graph.capture_begin(pool=self._pool)
                try:
                    body()
                except BaseException:
                    try:
                        graph.capture_end()
                    except Exception:  # noqa: BLE001 - the body's error is the one to report
                        pass
                    raise
                graph.capture_end()
        except Exception as exc:  # noqa: BLE001 - any capture failure falls back to the eager body
            main.wait_stream(self._side)
            self._note_once(f"CUDA graph capture failed, eager fixed-shape steps instead "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
            return None
        main.wait_stream(self._side)
        self.captured += 1
        return graph.replay

    def _data(self, cids: list, datas: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's training samples concatenated in client order (kept while the clients' data is the same)."""
        key = tuple((c, id(datas[c].x), len(datas[c])) for c in cids)
        if key not in self._stacked:
            if len(self._stacked) > 16:  # partial participation: other clients every round
                self._stacked.clear()
            self._stacked[key] = (torch.cat([datas[c].x for c in cids]), torch.cat([datas[c].y for c in cids]))
        return self._stacked[key]

    @staticmethod
    def _odd_step(step, opt, P, B, E, T, d, acc, S, K, x, y, g, C, epoch, collect) -> None:
        """One step of client ``g`` alone, on a batch of another length than its group's (``d``: its draws)."""
        ix = torch.tensor([g], device=x.device)
        p, b, e, m = _pick(P, ix, False), _pick(B, ix, False), _pick(E, ix, False), _pick(opt.M, ix, False)
        tw = {name: _pick(T[name], ix, False) for name in T}
        d = {k: v.unsqueeze(0) for k, v in d.items()}
        grads, (losses, parts, coll) = step(p, b, x.unsqueeze(0), y.unsqueeze(0), e, tw, d, epoch)
        opt.update(p, m, grads, opt.row_factors(g))
        for n in P:
            P[n][ix] = p[n]
        for n in m:
            opt.M[n][ix] = m[n]
        for n in B:
            B[n][ix] = b[n]
        on = torch.arange(len(acc.loss), device=x.device) == g
        acc.add(on, losses.expand(len(on)), {k: v.expand(len(on)) for k, v in parts.items()})
        if collect:
            for lv, z in coll.items():
                S[lv].index_add_(0, g * C + y, z[0])
                K[lv].index_add_(0, g * C + y, torch.ones_like(y))

    # -- evaluation ---------------------------------------------------------------------------
    def evaluate(self, algo: Algorithm, ctx: Context, jobs: dict, tests: dict) -> dict:
        """``{cid: (accuracies, test size)}`` for ``jobs[cid] = (client, msg)`` on ``tests[cid]``: one vmapped
        forward per architecture over the padded test sets, the method's scores and the accuracies of the
        whole group at once (:meth:`~fedlib.algorithms.batching.Batching.scores_group`, else per client), and
        every client's accuracies read in one transfer."""
        return self.evaluate_runs([(algo, ctx, jobs, tests)])[0]

    def evaluate_runs(self, runs: list) -> list:
        """:meth:`evaluate` of several runs of the same shape (``runs`` = ``[(algo, ctx, jobs, tests)]``): one
        vmapped forward per architecture over the clients of all runs, each run's part scored by its method, and
        every run's accuracies read in one transfer. Returns each run's ``{cid: (accuracies, test size)}``."""
        algo, ctx = runs[0][0], runs[0][1]
        C = ctx.num_classes
        done = []  # (run, cids, {key: (G,)})
        if type(algo).predict is not Algorithm.predict or type(algo).predict_model is not Algorithm.predict_model:
            for k, (a, c, jobs, tests) in enumerate(runs):
                per = [client_accuracies(a.predict(c, cid, client, msg, tests[cid].x), tests[cid].y,
                                         tests[cid].classes, C) for cid, (client, msg) in jobs.items()]
                done.append((k, list(jobs), {key: torch.stack([p[key] for p in per]) for key in per[0]}))
            return self._read(runs, done)
        groups: dict = {}
        for k, (_, _, jobs, _) in enumerate(runs):
            for cid in jobs:
                groups.setdefault(member(ctx.model_name, cid), []).append((k, cid))
        for rows in groups.values():
            W = [runs[k][0].predict_weights(runs[k][1], c, *runs[k][2][c]) for k, c in rows]
            model = algo.module(ctx, rows[0][1], None)
            model.eval()
            stacked = {n: torch.stack([w[n] for w in W]) for n in W[0]}
            X, Y, valid, own = self._tests(rows if len(runs) > 1 else [c for _, c in rows],
                                           {row if len(runs) > 1 else row[1]: runs[row[0]][3][row[1]] for row in rows},
                                           C)
            with torch.no_grad():
                logits, feats = vmap(functools.partial(_forward, model))(stacked, X)
            for k, (lo, hi) in _runs_of(rows).items():
                a, c, jobs, tests = runs[k]
                cids = [cid for _, cid in rows[lo:hi]]
                clients, msgs = [jobs[cid][0] for cid in cids], [jobs[cid][1] for cid in cids]
                whole = hi - lo == len(rows)
                lg = logits if whole else logits[lo:hi]
                ft = feats if whole else {n: v[lo:hi] for n, v in feats.items()}
                scores = a.scores_group(c, cids, clients, msgs, lg, ft)
                if scores is not None:
                    sl = slice(None) if whole else slice(lo, hi)
                    done.append((k, cids, group_accuracies(scores, Y[sl], valid[sl], own[sl])))
                    continue
                per = []
                for g, cid in enumerate(cids):
                    n, t = len(tests[cid]), tests[cid]
                    sc = a.scores(c, cid, clients[g], msgs[g], lg[g, :n], {n_: v[g, :n] for n_, v in ft.items()})
                    per.append(client_accuracies(sc, t.y, t.classes, C))
                done.append((k, cids, {key: torch.stack([p[key] for p in per]) for key in per[0]}))
        return self._read(runs, done)

    @staticmethod
    def _read(runs: list, done: list) -> list:
        """``done`` = ``[(run, cids, {key: (G,)})]`` read in one transfer, as each run's
        ``{cid: (accuracies, test size)}``."""
        keys = list(done[0][2])
        vals = torch.cat([torch.stack([accs[k] for k in keys], 1) for _, _, accs in done]).double().tolist()
        rows = [(k, c) for k, cs, _ in done for c in cs]
        per = {row: dict(zip(keys, v, strict=True)) for row, v in zip(rows, vals, strict=True)}
        return [{cid: (per[k, cid], len(tests[cid])) for cid in jobs} for k, (_, _, jobs, tests) in enumerate(runs)]

    def _tests(self, cids: list, tests: dict, C: int) -> tuple:
        """The group's test sets padded to the longest (with each client's first sample), their labels, which
        samples are real and each client's own classes (kept while the test sets are the same)."""
        key = ("test", *((c, id(tests[c].x), len(tests[c])) for c in cids))
        if key not in self._stacked:
            if len(self._stacked) > 16:
                self._stacked.clear()
            n_max = max(len(tests[c]) for c in cids)
            xs, ys, valid = [], [], []
            for c in cids:
                x, y, pad = tests[c].x, tests[c].y, n_max - len(tests[c])
                fill = x[:1].expand(pad, *x.shape[1:]) if len(x) else x.new_zeros(pad, *x.shape[1:])
                xs.append(torch.cat([x, fill]) if pad else x)
                ys.append(torch.cat([y, y.new_full((pad,), -1)]) if pad else y)
                valid.append(torch.arange(n_max, device=y.device) < len(y))
            own = torch.zeros(len(cids), C, dtype=torch.bool, device=ys[0].device)
            for g, c in enumerate(cids):
                own[g, tests[c].classes] = True
            self._stacked[key] = (torch.stack(xs), torch.stack(ys), torch.stack(valid), own)
        return self._stacked[key]


def _step_function(algo, model, teachers: dict, first, rnd, swept: list, same: bool, kw: dict):
    """One lockstep step of :meth:`_train_stacked` for every row at once: the gradient of each row's loss
    (:meth:`~fedlib.algorithms.contract.Algorithm.batch_loss` on its weights, batch, extras, teachers' outputs and
    draws) with its loss, parts and collected features, vmapped over the rows (``same``: one random draw for all)."""
    def one(p, b, x, y, e, tw, d, epoch):
        a = algo
        if swept:  # this row's own run's values of the swept hyperparameters (0-d tensors under vmap)
            a = copy.copy(algo)
            for f in swept:
                object.__setattr__(a, f, e[SWEPT + f])
            e = {k: v for k, v in e.items() if not k.startswith(SWEPT)}
        w = {**p, **b}
        out = functional_call(model, w, (x,))
        with torch.no_grad():
            t_out = {name: functional_call(teachers[name], tw[name], (x,)) for name in teachers}
        e = {**e, **d}
        if first.head_on:
            hw = {n[len("head."):]: v for n, v in w.items() if n.startswith("head.")}
            e.update({f"head({k})": functional_call(model.head, hw, (e[k],)) for k in first.head_on})
        loss, parts = a.batch_loss(out, y, epoch, e, t_out, p, rnd, **kw)
        return loss, (loss.detach(), {k: v.detach() for k, v in parts.items()},
                      {lv: collected(out, lv).detach() for lv in first.collect})

    return vmap(grad(one, has_aux=True), in_dims=(0, 0, 0, 0, 0, 0, 0, None),
                randomness="same" if same else "different")


def _trained_group(cids, tasks, W, acc, S, K, dims, C, phases, plan) -> TrainedGroup:
    """What :meth:`_train_stacked` returns: each row's weights (views), its per-class feature sums and its mean
    losses per step (per phase, and over every epoch)."""
    G = len(cids)
    host = acc.to_host(K, dims, C)
    sizes = {lv: [len(r) for r in rows] for lv, rows in host["seen"].items()}
    sums = {lv: GroupSums(S[lv][:G * C], K[lv][:G * C], _seen_cells(K[lv], sizes[lv], G * C), sizes[lv], C)
            for lv in dims}
    rows = {n: v.unbind(0) for n, v in W.items()}  # each client's weights: views, one op per tensor
    states = {cid: {n: r[g] for n, r in rows.items()} for g, cid in enumerate(cids)}
    epochs = {"train_loss": phases[-1].epochs, **{f"{ph.part}_loss": ph.epochs for ph in phases}}
    total = sum(ph.epochs for ph in phases)
    metrics = {cid: {k: v[g] / (plan.steps_of[g] * epochs.get(k, total)) for k, v in host["sums"].items()}
               for g, cid in enumerate(cids)}
    return TrainedGroup(cids, {}, {c: tasks[c] for c in cids}, states, W, sums, metrics)
