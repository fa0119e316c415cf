"""The shared local training loops: the sequential executor of a :class:`~fedlib.algorithms.contract.LocalTask`
(:func:`train_task`), plain SGD epochs over a client's data (:func:`sgd_epochs`, :func:`joint_sgd_epochs`,
:func:`head_then_body`), the number of local steps they take (:func:`steps`, which the batched executor
shares) and the server-side loop (:func:`server_epochs`).

The contract's types (``Algorithm``, ``Context``, ``Round``, ``LocalTask``, ``TrainSettings``) are passed in,
never imported: :mod:`fedlib.algorithms.contract` imports this module.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.adam import adam

from fedlib.counting import phase
from fedlib.data.federated import ClientData

__all__ = ["collected", "head_then_body", "joint_sgd_epochs", "linear_adam_epochs", "phase_parameters", "server_epochs",
           "sgd_epochs", "steps", "train_task"]


def collected(out: tuple, level: str) -> torch.Tensor:
    """The output a task collects: ``"logits"`` or a feature level."""
    return out[0] if level == "logits" else out[1][level]


def train_task(algo, ctx, cid: int, task, data: ClientData,
               rnd) -> tuple[nn.Module, dict, float, dict]:
    """The sequential executor of one :class:`LocalTask`: :func:`sgd_epochs` on
    ``algo.batch_loss`` (phase after phase where the task has ``phases``); returns the trained
    (scratch) module, the collected per-class sums, the mean batch loss (of the last phase) and
    the mean of each loss part (and ``<part>_loss`` per phase)."""
    from fedlib.prototypes import ProtoAccumulator

    model = algo.module(ctx, cid, task.weights)
    teachers = {}
    for name, w in task.teachers.items():
        t = algo.module(ctx, cid, w, role="teacher." + name)
        t.eval()
        t.requires_grad_(False)
        teachers[name] = t
    params = dict(model.named_parameters())
    dims = {lv: ctx.num_classes if lv == "logits" else model.feature_dims[lv] for lv in task.collect}
    sums = {lv: ProtoAccumulator(ctx.num_classes, d, data.x.device) for lv, d in dims.items()}
    phases = [ph for ph in task.phases if ph.epochs > 0]
    last = (phases[-1].epochs if phases else ctx.train.local_epochs) - 1
    part_sums: dict = {}
    current = {"phase": {}, "last": not phases}  # batch_loss's phase argument; whether this is the last phase

    def loss_fn(xb, yb, epoch):
        extras = task.extras if task.draws is None else {**task.extras, **{k: v[0] for k, v in task.draws(1).items()}}
        out = model(xb)
        if teachers:
            with torch.no_grad():
                t_out = {name: t(xb) for name, t in teachers.items()}
        else:
            t_out = {}
        if task.head_on:
            extras = {**extras, **{f"head({k})": model.head(extras[k]) for k in task.head_on}}
        loss, parts = algo.batch_loss(out, yb, epoch, extras, t_out, params, rnd, **current["phase"])
        for k, v in parts.items():
            part_sums[k] = part_sums.get(k, 0.0) + v.detach()
        if sums and current["last"] and (task.collect_all_epochs or epoch == last):
            for lv, acc in sums.items():
                acc.add(collected(out, lv), yb)
        return loss

    gen, per_epoch = rnd.generator(cid), steps(len(data), ctx.train)
    if not phases:
        loss = sgd_epochs(ctx, model, data, gen, loss_fn, lr=ctx.train.round_lr(rnd))
        count = per_epoch * ctx.train.local_epochs
        return model, sums, loss, {k: float(v) / count for k, v in part_sums.items()}
    losses = {}
    for i, ph in enumerate(phases):
        trained = phase_parameters(model, ph.part)
        for n, p in model.named_parameters():
            p.requires_grad_(n in trained)
        current.update(phase={"phase": ph.part}, last=i == len(phases) - 1)
        part_ctx = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, local_epochs=ph.epochs))
        losses[f"{ph.part}_loss"] = sgd_epochs(part_ctx, model, data, gen, loss_fn,
                                               lr=ctx.train.round_lr(rnd) if ph.lr is None else ph.lr)
    model.requires_grad_(True)
    count = per_epoch * sum(ph.epochs for ph in phases)
    return model, sums, losses[f"{phases[-1].part}_loss"], {**losses, **{k: float(v) / count
                                                                         for k, v in part_sums.items()}}


def phase_parameters(model: nn.Module, part: str) -> set:
    """Names of the parameters a training phase trains: ``"head"`` (``model.head``'s), ``"body"`` (all
    others) or ``"all"``."""
    names = [n for n, _ in model.named_parameters()]
    if part == "all":
        return set(names)
    head = {id(p) for p in model.head.parameters()}
    return {n for n, p in model.named_parameters() if (id(p) in head) == (part == "head")}


def steps(n: int, t) -> int:
    """Local steps per epoch of a client with ``n`` samples under training settings ``t`` (see :func:`sgd_epochs`);
    the batched executor takes the same number."""
    return max(1, n // t.batch_size) if t.drop_last else math.ceil(n / t.batch_size)

def sgd_epochs(ctx, model: nn.Module, data: ClientData, gen: torch.Generator,
               loss_fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor], lr: float | None = None) -> float:
    """Run ``ctx.train.local_epochs`` epochs of SGD on ``data``; return the mean batch loss.

    A new optimiser is made per call, so momentum restarts every round (as in the
    FedProto/FedMPS code). Batches are drawn from a fresh permutation per epoch using
    ``gen`` (in the data's order with ``shuffle: false``); with ``drop_last`` a final partial
    batch is skipped, except that a client with fewer samples than one batch still takes one
    step on all of them.
    ``loss_fn(xb, yb, epoch)`` returns the batch loss; ``lr`` defaults to ``ctx.train.lr`` (pass
    ``ctx.train.round_lr(rnd)`` where the rate decays over rounds).
    """
    return joint_sgd_epochs(ctx, [(model, ctx.train.lr if lr is None else lr)], data, gen, loss_fn)


def head_then_body(ctx, model: nn.Module, data: ClientData, gen: torch.Generator, lr: float,
                   phases: list[tuple[str, int, Callable]]) -> dict[str, float]:
    """FedRep's and FedPAC's local update: for each ``(part, epochs, loss_fn)`` in order, :func:`sgd_epochs`
    for ``epochs`` on ``loss_fn`` with only ``part`` trainable (``"head"``: ``model.head``; ``"body"``:
    everything else); a part with 0 epochs is skipped. Returns ``{part: mean batch loss}``; every
    parameter is trainable again afterwards."""
    head = set(id(p) for p in model.head.parameters())
    losses = {}
    for part, epochs, loss_fn in phases:
        if epochs == 0:
            continue
        for p in model.parameters():
            p.requires_grad_((id(p) in head) == (part == "head"))
        part_ctx = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, local_epochs=epochs))
        losses[part] = sgd_epochs(part_ctx, model, data, gen, loss_fn, lr=lr)
    model.requires_grad_(True)
    return losses


def joint_sgd_epochs(ctx, parts: list[tuple[nn.Module, float]], data: ClientData,
                     gen: torch.Generator, loss_fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor],
                     clip_norm: float | None = None) -> float:
    """:func:`sgd_epochs` for several modules trained on one loss (mutual learning, FML,
    FedKD): one SGD optimiser per ``(module, lr)`` (momentum and weight decay from
    ``ctx.train``), each module's gradient norm clipped at ``clip_norm`` before the step.
    Same batches as :func:`sgd_epochs`."""
    t = ctx.train
    opts = [torch.optim.SGD(m.parameters(), lr=lr, momentum=t.momentum, weight_decay=t.weight_decay)
            for m, lr in parts]
    for m, _ in parts:
        m.train()
    if ctx.dp_sgd is None:
        return _epochs(t, parts, opts, data, gen, loss_fn, clip_norm)
    from fedlib.privacy.dpsgd import noise_generator, private_steps

    with private_steps(parts, opts, *ctx.dp_sgd, noise_generator(gen, data.x.device)) as private:
        return _epochs(t, parts, private, data, gen, loss_fn, clip_norm, per_sample=True)


def _epochs(t, parts, opts, data, gen, loss_fn, clip_norm, per_sample: bool = False) -> float:
    """:func:`joint_sgd_epochs`'s loop; ``per_sample``: ``opts`` are DP-SGD optimisers, told each batch's size."""
    n, bs = len(data), t.batch_size
    per_epoch = steps(n, t)
    total, count = torch.zeros((), device=data.x.device), 0
    for epoch in range(t.local_epochs):
        perm = torch.randperm(n, generator=gen) if t.shuffle else torch.arange(n)
        for b in range(per_epoch):
            idx = perm[b * bs:(b + 1) * bs]
            with phase("train.fwdbwd"):
                loss = loss_fn(data.x[idx], data.y[idx], epoch)
                for o in opts:
                    o.zero_grad(set_to_none=True)
                loss.backward()
            if clip_norm is not None:
                for m, _ in parts:
                    torch.nn.utils.clip_grad_norm_(m.parameters(), clip_norm)
            for o in opts:
                if per_sample:
                    o.expected_batch_size = len(idx)
                o.step()
            total += loss.detach()
            count += 1
    return float(total) / max(count, 1)


def server_epochs(module: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, epochs: int,
                  batch_size: int, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  draws: bool = False) -> torch.Tensor:
    """The server-side training loop (FedMPS's head on prototypes, FedTGP's trainable
    prototypes): ``epochs`` passes over ``(x, y)`` in shuffled minibatches (torch's global
    RNG, which the engine seeds per round for the server); returns the mean loss of each
    epoch.

    No host read inside the loop: each epoch's order is drawn on the host and uploaded once
    (all epochs' at once unless something else draws from the global RNG in between: ``module``
    has dropout, or ``draws`` says that ``loss_fn`` draws), an epoch's (or all epochs') batches are
    one gather, and the losses are summed on the device in float64 after the loop (each batch's
    float32 loss times its size, added in order, exactly as a Python float sum of
    ``loss.item() * len(idx)`` gives). Returns the (epochs,) float64 tensor of mean losses, on the
    device: the engine reads metrics with the round's evaluation.
    """
    module.train()
    n = len(y)
    sizes = [min(batch_size, n - s) for s in range(0, n, batch_size)]
    params = [p for group in opt.param_groups for p in group["params"]]
    upfront = not draws and not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in module.modules())
    if upfront and epochs:
        order = torch.stack([torch.randperm(n) for _ in range(epochs)]).to(y.device).flatten()
        batches = zip(x[order].split(sizes * epochs), y[order].split(sizes * epochs), strict=True)
    losses = []
    for _ in range(epochs):
        if not upfront:
            perm = torch.randperm(n).to(y.device)
            batches = zip(x[perm].split(sizes), y[perm].split(sizes), strict=True)
        for _ in sizes:
            xb, yb = next(batches)
            loss = loss_fn(xb, yb)
            for p in params:  # opt.zero_grad(set_to_none=True), without its profiler marks
                p.grad = None
            loss.backward()
            opt.step()
            losses.append(loss)
    if not losses:  # no rows (NaN) or no epochs
        return torch.zeros(epochs, dtype=torch.float64, device=y.device) / n
    with torch.no_grad():
        weighted = torch.stack(losses).double().view(epochs, len(sizes))
        if sizes[-1] != batch_size:  # the last batch of an epoch is shorter
            weighted = torch.cat([weighted[:, :-1] * batch_size, weighted[:, -1:] * sizes[-1]], 1)
        else:
            weighted = weighted * batch_size
        return weighted.cumsum(1)[:, -1] / n  # cumsum: the additions in order


def linear_adam_epochs(linear: nn.Linear, x: torch.Tensor, y: torch.Tensor, epochs: int, batch_size: int,
                       lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> torch.Tensor:
    """:func:`server_epochs` of a bare ``nn.Linear`` on the mean cross-entropy with a new Adam (torch's
    defaults, learning rate ``lr``), written out for a round whose numbers may move at rounding level
    (``Round.exact`` false: the batched executor). The same batches as :func:`server_epochs` (the same draws of
    torch's global RNG) and the same update, but the gradient is written by hand and the step is torch's fused
    Adam, so weights and losses agree with autograd and ``torch.optim.Adam`` at rounding level, not bit for bit.

    Weight and bias are one ``(d + 1, C)`` matrix ``q = [W^T; b]`` and the inputs carry a column of ones, so a
    batch is one matmul forward (``z = [x, 1] q``), one for the gradient (``[x, 1]^T (softmax(z) - onehot) / B``)
    and one fused Adam step: six ops, where autograd and ``torch.optim`` dispatch 26. The losses are computed
    from the kept logits after the loop. Updates ``linear`` in place; returns the (epochs,) float64 mean loss of
    each epoch, on the device.
    """
    n, dev = len(y), y.device
    sizes = [min(batch_size, n - s) for s in range(0, n, batch_size)]
    if not (n and epochs):  # no batch (server_epochs draws nothing either: randperm(0) draws no number)
        return torch.zeros(epochs, dtype=torch.float64, device=dev) / n
    order = torch.stack([torch.randperm(n) for _ in range(epochs)]).to(dev).flatten()
    every = sizes * epochs  # batch sizes in step order
    with torch.no_grad():
        xs = torch.cat([x, torch.ones(n, 1, dtype=x.dtype, device=dev)], 1)[order]
        ys = y[order]
        # -onehot(y) / B in each batch's rows: the gradient of a batch's mean cross-entropy is softmax(z) / B + these
        scale = torch.full((epochs, n), -1 / batch_size, dtype=x.dtype, device=dev)
        if sizes[-1] != batch_size:  # each epoch's last batch is shorter
            scale[:, n - sizes[-1]:] = -1 / sizes[-1]
        neg = torch.zeros(epochs * n, linear.out_features, dtype=x.dtype, device=dev)
        neg.scatter_(1, ys.unsqueeze(1), scale.view(-1, 1))
        q = torch.cat([linear.weight.t(), linear.bias.unsqueeze(0)])
        m, v, step = torch.zeros_like(q), torch.zeros_like(q), torch.zeros((), device=dev)
        logits = []
        for xb, xbt, nb, b in zip(xs.split(every), xs.t().split(every, 1), neg.split(every), every, strict=True):
            z = xb @ q
            logits.append(z)
            grad = xbt @ torch.add(nb, torch.softmax(z, 1), alpha=1 / b)
            adam([q], [grad], [m], [v], [], [step], fused=True, amsgrad=False, beta1=betas[0], beta2=betas[1], lr=lr,
                 weight_decay=0.0, eps=eps, maximize=False)
        linear.weight.copy_(q[:-1].t())
        linear.bias.copy_(q[-1])
        loss = F.cross_entropy(torch.cat(logits), ys, reduction="none")
        return loss.double().view(epochs, n).sum(1) / n
