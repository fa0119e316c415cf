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
  on the stacked tensors. Heterogeneous families form one group per architecture. Evaluation
  is batched the same way (test sets padded; eval mode has no batch statistics).

Two differences from the sequential executor, both documented in the equivalence tests:
gradients come from batched kernels (they agree to ~1e-7 relative, not bit for bit), and
dropout (only in some Ht0 members) draws per-client masks from one seeded stream per group
instead of one per client. A method that cannot be batched (several trained modules, a loss
with value-dependent shapes) runs sequentially, with one log line saying why.
"""

from __future__ import annotations

import functools
import logging
import time

import torch
from torch.func import functional_call, grad, vmap

from fedlib.algorithms.base import Algorithm, Context, Round, _steps, collected, derive_seed
from fedlib.counting import phase
from fedlib.models import member
from fedlib.prototypes import ProtoAccumulator

log = logging.getLogger(__name__)
EXECUTORS = ("sequential", "batched")


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


class Batched:
    """The batched executor (module docstring); keeps which methods it already noted as sequential."""

    def __init__(self):
        self._noted: set = set()
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
        why = algo.batch_support()
        self.times = {}
        if why:
            self._note(algo, why)
            return sequential(algo, ctx, jobs, rnd, self.times)
        with phase("setup"):
            tasks = {cid: algo.task(ctx, cid, client, msg, data, rnd) for cid, (client, msg, data) in jobs.items()}
        groups: dict = {}
        for cid, task in tasks.items():
            key = (member(ctx.model_name, cid), tuple(sorted((k, tuple(v.shape)) for k, v in task.extras.items())),
                   tuple(task.teachers), task.collect, task.collect_all_epochs)
            groups.setdefault(key, []).append(cid)
        out = {}
        for n, cids in enumerate(groups.values()):
            t0 = time.perf_counter()
            torch.manual_seed(derive_seed(rnd.seed, 8, rnd.index, n))  # dropout masks of this group
            trained = self._train_group(algo, ctx, cids, tasks, {c: jobs[c][2] for c in cids}, rnd)
            for cid in cids:
                client, msg, data = jobs[cid]
                state, sums, metrics = trained[cid]
                with phase("setup"):
                    model = algo.module(ctx, cid, state)
                with phase("messages"):
                    out[cid] = algo.finish(ctx, cid, client, msg, data, rnd, tasks[cid], model, sums, metrics)
            _sync(ctx)
            self.times.update({cid: (time.perf_counter() - t0) / len(cids) for cid in cids})
        return {cid: out[cid] for cid in jobs}

    def _train_group(self, algo, ctx, cids, tasks, datas, rnd) -> dict:
        with phase("setup"):
            return self._train_stacked(algo, ctx, cids, tasks, datas, rnd)

    def _train_stacked(self, algo, ctx, cids, tasks, datas, rnd) -> dict:
        t = ctx.train
        G, first = len(cids), tasks[cids[0]]
        model = algo.module(ctx, cids[0], first.weights)
        model.train()
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        fixed = [n for n, p in model.named_parameters() if not p.requires_grad] + [n for n, _ in model.named_buffers()]

        def stack(names, dicts):
            return {n: torch.stack([d[n] for d in dicts]) for n in names}

        P = stack(trainable, [tasks[c].weights for c in cids])
        B = stack(fixed, [tasks[c].weights for c in cids])
        E = stack(list(first.extras), [tasks[c].extras for c in cids])
        teachers, T = {}, {}
        for name in first.teachers:
            teachers[name] = algo.module(ctx, cids[0], first.teachers[name], role="teacher." + name)
            teachers[name].eval()
            T[name] = stack(list(first.teachers[name]), [tasks[c].teachers[name] for c in cids])
        M: dict = {n: None for n in trainable}

        def one(p, b, x, y, e, tw, epoch):
            out = functional_call(model, {**p, **b}, (x,))
            with torch.no_grad():
                t_out = {name: functional_call(teachers[name], tw[name], (x,)) for name in teachers}
            loss, parts = algo.batch_loss(out, y, epoch, e, t_out, p)
            return loss, (loss.detach(), {k: v.detach() for k, v in parts.items()},
                          {lv: collected(out, lv).detach() for lv in first.collect})

        # torchvision's stochastic depth (EfficientNet) draws into an unbatched tensor: vmap can only give
        # every client of the group the same draw there
        same = any(type(m).__name__ == "StochasticDepth" for m in model.modules())
        if same:
            self._note_once(f"{member(ctx.model_name, cids[0])}: one stochastic-depth draw per step for all its "
                            "clients (torchvision draws it into an unbatched tensor)")
        step = vmap(grad(one, has_aux=True), in_dims=(0, 0, 0, 0, 0, 0, None),
                    randomness="same" if same else "different")
        C = ctx.num_classes
        dims = {lv: C if lv == "logits" else model.feature_dims[lv] for lv in first.collect}
        dev = next(iter(P.values())).device
        S = {lv: torch.zeros(G, C, d, device=dev) for lv, d in dims.items()}
        K = {lv: torch.zeros(G, C, dtype=torch.int64, device=dev) for lv in dims}
        loss_sum = torch.zeros(G, device=dev)
        part_sum: dict = {}
        n_i = [len(datas[c]) for c in cids]
        steps_i = [_steps(n, t) for n in n_i]
        gens = [rnd.generator(c) for c in cids]
        last = t.local_epochs - 1
        lr = t.round_lr(rnd)
        with phase("train.step"):
            for epoch in range(t.local_epochs):
                perms = [torch.randperm(n_i[g], generator=gens[g]) if t.shuffle else torch.arange(n_i[g])
                         for g in range(G)]  # as sgd_epochs draws them
                for s in range(max(steps_i)):
                    batches: dict = {}
                    for g in range(G):
                        if s < steps_i[g]:
                            idx = perms[g][s * t.batch_size:(s + 1) * t.batch_size]
                            batches.setdefault(len(idx), []).append((g, idx))
                    for members in batches.values():
                        sel = [g for g, _ in members]
                        full = len(sel) == G
                        ix = torch.tensor(sel, device=dev)
                        p, b, e = _pick(P, ix, full), _pick(B, ix, full), _pick(E, ix, full)
                        tw = {name: _pick(T[name], ix, full) for name in T}
                        x = torch.stack([datas[cids[g]].x[idx] for g, idx in members])
                        y = torch.stack([datas[cids[g]].y[idx] for g, idx in members])
                        with phase("train.fwdbwd"):
                            grads, (losses, parts, coll) = step(p, b, x, y, e, tw, epoch)
                        self._sgd(t, lr, p, grads, M, None if full else ix, G)
                        if not full:
                            for n in P:
                                P[n][ix] = p[n]
                            for n in B:
                                B[n][ix] = b[n]
                        loss_sum[ix] += losses
                        for k, v in parts.items():
                            part_sum.setdefault(k, torch.zeros(G, device=dev))[ix] += v
                        if coll and (first.collect_all_epochs or epoch == last):
                            for lv, z in coll.items():
                                rows = (ix.unsqueeze(1) * C + y).flatten()
                                S[lv].view(G * C, -1).index_add_(0, rows, z.flatten(0, 1))
                                K[lv].view(-1).index_add_(0, rows, torch.ones_like(rows))
        out = {}
        for g, cid in enumerate(cids):
            state = {**{n: v[g].clone() for n, v in P.items()}, **{n: v[g].clone() for n, v in B.items()}}
            sums = {}
            for lv, d in dims.items():
                acc = ProtoAccumulator(C, d, dev)
                acc.sums, acc.counts = S[lv][g], K[lv][g]
                sums[lv] = acc
            count = steps_i[g] * t.local_epochs
            metrics = {"train_loss": float(loss_sum[g]) / count,
                       **{k: float(v[g]) / count for k, v in part_sum.items()}}
            out[cid] = (state, sums, metrics)
        return out

    @staticmethod
    def _sgd(t, lr: float, params: dict, grads: dict, M: dict, ix, G: int) -> None:
        """torch.optim.SGD's step (weight decay, momentum without dampening, first step's buffer
        = the gradient) on the stacked parameters of the clients ``ix`` (``None``: all)."""
        with torch.no_grad():
            for n, p in params.items():
                d = grads[n]
                if t.weight_decay:
                    d = d.add(p, alpha=t.weight_decay)
                if t.momentum:
                    if M[n] is None:  # every client's first step is step 0 of epoch 0, taken by all
                        M[n] = d.clone() if ix is None else torch.zeros((G, *d.shape[1:]), device=d.device)
                        if ix is not None:
                            M[n][ix] = d
                        d = M[n] if ix is None else M[n][ix]
                    elif ix is None:
                        M[n].mul_(t.momentum).add_(d)
                        d = M[n]
                    else:
                        m = M[n][ix].mul_(t.momentum).add_(d)
                        M[n][ix] = m
                        d = m
                p.add_(d, alpha=-lr)

    # -- evaluation ---------------------------------------------------------------------------
    def predict_all(self, algo: Algorithm, ctx: Context, jobs: dict) -> dict:
        """``{cid: scores}`` for ``jobs[cid] = (client, msg, x)``: one vmapped forward per
        architecture over the padded test sets, then the method's :meth:`scores` per client."""
        if type(algo).predict is not Algorithm.predict or type(algo).predict_model is not Algorithm.predict_model:
            return {cid: algo.predict(ctx, cid, client, msg, x) for cid, (client, msg, x) in jobs.items()}
        groups: dict = {}
        for cid in jobs:
            groups.setdefault(member(ctx.model_name, cid), []).append(cid)
        out = {}
        for cids in groups.values():
            W = [algo.predict_weights(ctx, c, jobs[c][0], jobs[c][1]) for c in cids]
            model = algo.module(ctx, cids[0], W[0])
            model.eval()
            names = list(W[0])
            stacked = {n: torch.stack([w[n] for w in W]) for n in names}
            sizes = [len(jobs[c][2]) for c in cids]
            n_max = max(sizes)
            X = torch.stack([torch.cat([jobs[c][2], jobs[c][2][:1].expand(n_max - len(jobs[c][2]),
                                                                           *jobs[c][2].shape[1:])])
                             if len(jobs[c][2]) < n_max else jobs[c][2] for c in cids])
            with torch.no_grad():
                logits, feats = vmap(functools.partial(_forward, model))(stacked, X)
            for g, cid in enumerate(cids):
                n = sizes[g]
                out[cid] = algo.scores(ctx, cid, jobs[cid][0], jobs[cid][1], logits[g, :n],
                                       {k: v[g, :n] for k, v in feats.items()})
        return {cid: out[cid] for cid in jobs}
