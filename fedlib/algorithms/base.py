"""The algorithm contract (version 2): hyperparameters, round record, explicit state, messages.

An algorithm is a frozen dataclass of hyperparameters. It keeps nothing on ``self``
between calls; every method takes state and returns new state::

    init_client(ctx, cid)                          -> client state
    init_server(ctx)                               -> server state
    broadcast(ctx, server, cid, rnd)               -> Message to client cid
    local_update(ctx, cid, client, msg, data, rnd) -> (client state, upload Message, metrics)
    aggregate(ctx, server, uploads, rnd)           -> (server state, metrics)
    reply(ctx, server, cid, rnd)                   -> Message or None  (optional second half
    receive(ctx, cid, client, msg, data, rnd)      -> (client state, metrics)   of a round)
    predict(ctx, cid, client, msg, x)              -> {rule: scores (n, C)}   (pure)

- ``rnd`` (:class:`Round`) carries the round index, the total rounds and the run seed, so no
  method smuggles a schedule through messages or state.
- State is plain data: dicts, lists, tensors (model ``state_dict``s), numbers and strings.
  It checkpoints with ``torch.load(weights_only=True)``, can travel to another process and
  stacks across clients. Models are rebuilt from the context (:meth:`Algorithm.module`).
- A :data:`Message` is a flat ``{name: Tensor | int | float}``. Only messages cross between
  client and server; the engine copies and counts them. Each module declares what it sends
  (``UPLOAD``, ``BROADCAST``; see :func:`check_message`).
- Metrics (losses, iteration counts) go to the round log and are never sent or counted.
- ``predict`` never changes client or server state.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn as nn

from fedlib.counting import phase
from fedlib.data.federated import ClientData
from fedlib.validation import check_fields

Message = dict  # {name: torch.Tensor | int | float}
Metrics = dict  # {name: float | int}

__all__ = ["Algorithm", "ClientData", "Context", "LocalTask", "Message", "Metrics", "Round", "TrainSettings",
           "check_message", "derive_seed", "frozen_copy", "head_then_body", "joint_sgd_epochs", "load_model_message",
           "mean_params", "model_message", "server_epochs", "sgd_epochs", "train_task", "weights"]


def derive_seed(*parts: int) -> int:
    """A 63-bit seed derived from integers (run seed, round, client id, purpose tag)."""
    state = np.random.SeedSequence([int(p) for p in parts]).generate_state(2, dtype=np.uint32)
    return int(state[0]) << 31 | int(state[1]) >> 1


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Local optimisation settings shared by every algorithm of a run."""

    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    batch_size: int = 8
    local_epochs: int = 1
    drop_last: bool = True
    lr_decay: float = 1.0  # per round: round r trains with lr * lr_decay ** (r - 1) (MP-FedCL Table IV)
    shuffle: bool = True   # a fresh batch order every epoch; false: the data's own order (HtFLlib's train loader)

    def round_lr(self, rnd: Round) -> float:
        """The learning rate of round ``rnd``."""
        return self.lr if self.lr_decay == 1.0 else self.lr * self.lr_decay ** (rnd.index - 1)


@dataclasses.dataclass(frozen=True)
class Round:
    """What every party knows about the current round: its 1-based ``index``, the run's
    ``total`` rounds and the run ``seed``."""

    index: int
    total: int
    seed: int

    def generator(self, cid: int) -> torch.Generator:
        """Client ``cid``'s batch-order generator for this round (seeded from run seed, round, cid)."""
        return torch.Generator().manual_seed(derive_seed(self.seed, 1, self.index, cid))


@dataclasses.dataclass(frozen=True)
class Context:
    """What both sides know about a run: shapes, the model recipe, training settings."""

    num_classes: int
    input_shape: tuple
    num_clients: int
    model_name: str
    model_args: dict
    train: TrainSettings
    seed: int
    device: str = "cpu"  # every model, data tensor and state tensor of the run lives here
    # scratch modules that states are loaded into (rebuilt on demand, never part of state)
    pool: dict = dataclasses.field(default_factory=dict, compare=False, repr=False, hash=False)

    def new_model(self, cid: int | None) -> nn.Module:
        """A freshly initialised model; client ``cid``'s init (``None``: the server's) is seeded."""
        from fedlib.models import build_model, member

        tag = (3, cid) if cid is not None else (4,)
        with torch.random.fork_rng(devices=[]):  # initialised on the CPU: the same weights on every device
            torch.manual_seed(derive_seed(self.seed, *tag))
            model = build_model(member(self.model_name, cid), self.input_shape, self.num_classes, **self.model_args)
        return model.to(self.device)


def weights(module: nn.Module) -> dict:
    """A detached copy of ``module``'s ``state_dict``: how models live in state."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@dataclasses.dataclass
class LocalTask:
    """One client's local training as data, so that an executor can run it alone
    (:func:`train_task`) or stacked with other clients of the same architecture
    (:mod:`fedlib.executors`).

    ``weights``: the ``state_dict`` the trained model starts from; ``extras``: per-client
    tensors the loss reads (a prototype table, soft labels, the global weights of a proximal
    term), with the same keys and shapes for every client of a round; ``teachers``: frozen
    models of the client's architecture (``{name: state_dict}``, run in eval mode on every
    batch); ``collect``: the outputs (feature levels, or ``"logits"``) whose per-class sums
    are collected, during the last local epoch or, with ``collect_all_epochs``, every epoch;
    ``memo``: anything else :meth:`Algorithm.finish` needs (never stacked).
    """

    weights: dict
    extras: dict = dataclasses.field(default_factory=dict)
    teachers: dict = dataclasses.field(default_factory=dict)
    collect: tuple = ()
    collect_all_epochs: bool = False
    memo: dict = dataclasses.field(default_factory=dict)


class Algorithm:
    """Base of every method: hyperparameters as dataclass fields, validated on creation.

    Subclasses set ``name``, ``RULES`` (the inference rules ``predict`` returns),
    ``CONSTRAINTS`` ({field: Interval | Options}; merged with the parents'), ``UPLOAD`` and
    ``BROADCAST`` (the message declarations, see :func:`check_message`) and implement the
    six contract methods.
    """

    name: ClassVar[str] = ""
    RULES: ClassVar[tuple[str, ...]] = ("head",)
    CONSTRAINTS: ClassVar[dict] = {}
    UPLOAD: ClassVar[dict] = {}
    BROADCAST: ClassVar[dict] = {}
    REPLY: ClassVar[dict] = {}
    # True where :meth:`broadcast` is the same for every client (it ignores ``cid``, which the
    # engine then passes as ``None``): the engine builds it once per round and gives all
    # clients the same copy, which they only read.
    SHARED_BROADCAST: ClassVar[bool] = False
    # Fields added after runs existed, with the value that reproduces the method without them:
    # left out of run ids at that value (see fedlib.config.run_id).
    NEUTRAL: ClassVar[dict] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for attr in ("CONSTRAINTS", "NEUTRAL"):  # a subclass adds to (or overrides) its parents'
            merged: dict = {}
            for base in reversed(cls.__mro__):
                merged.update(base.__dict__.get(attr, {}))
            setattr(cls, attr, merged)

    def __post_init__(self):
        check_fields(self, self.CONSTRAINTS, prefix=f"algorithm ({self.name})")

    # -- the contract --------------------------------------------------------------------
    def init_client(self, ctx: Context, cid: int) -> dict:
        """Default: the client's own seeded model (:meth:`build`)."""
        return {"model": weights(self.build(ctx, cid))}

    def init_server(self, ctx: Context) -> Any:
        raise NotImplementedError

    def broadcast(self, ctx: Context, server: Any, cid: int, rnd: Round) -> Message:
        raise NotImplementedError

    def local_update(self, ctx: Context, cid: int, client: Any, msg: Message, data: ClientData,
                     rnd: Round) -> tuple[Any, Message, Metrics]:
        """Default: :meth:`task`, the SGD loop on :meth:`batch_loss` (:func:`train_task`), :meth:`finish`.
        A method that trains otherwise (several modules, its own loop) overrides this."""
        with phase("setup"):
            task = self.task(ctx, cid, client, msg, data, rnd)
        model, sums, loss, parts = train_task(self, ctx, cid, task, data, rnd)
        with phase("messages"):
            return self.finish(ctx, cid, client, msg, data, rnd, task, model, sums, {"train_loss": loss, **parts})

    def task(self, ctx: Context, cid: int, client: Any, msg: Message, data: ClientData, rnd: Round) -> LocalTask:
        """What client ``cid``'s local training needs (see :class:`LocalTask`)."""
        raise NotImplementedError

    def batch_loss(self, out: tuple, y: torch.Tensor, epoch: int, extras: dict, teachers: dict,
                   params: dict, rnd: Round) -> tuple[torch.Tensor, dict]:
        """``(loss, parts)`` of one batch: ``out`` = the model's ``(logits, features)``, ``teachers``
        = ``{name: (logits, features)}`` of the frozen models, ``params`` = the trained
        parameters, ``rnd`` = the round (the same for every client of a batched group: a loss may
        branch on it); ``parts`` = named loss terms (detached scalars) averaged into the metrics.
        Written with tensor operations only (no branch on tensor values), so that the batched
        executor can vmap it over clients."""
        raise NotImplementedError

    def finish(self, ctx: Context, cid: int, client: Any, msg: Message, data: ClientData, rnd: Round,
               task: LocalTask, model: nn.Module, sums: dict, metrics: dict) -> tuple[Any, Message, Metrics]:
        """``(client state, upload, metrics)`` from the trained ``model`` and the collected
        per-class ``sums`` (``{level: ProtoAccumulator}``)."""
        raise NotImplementedError

    def batch_support(self) -> str | None:
        """``None`` when :mod:`fedlib.executors`' batched executor can train this method, else why not."""
        if type(self).local_update is not Algorithm.local_update:
            return "it trains with its own loop (several modules or a round-dependent loss)"
        return None

    def aggregate(self, ctx: Context, server: Any, uploads: dict[int, Message], rnd: Round) -> tuple[Any, Metrics]:
        raise NotImplementedError

    def reply(self, ctx: Context, server: Any, cid: int, rnd: Round) -> Message | None:
        """The server's answer to client ``cid`` after :meth:`aggregate` in the same round, or
        ``None`` (default: none). A method whose clients act on the aggregate within the round
        (GFPL retrains on pseudo-features drawn from the fused prototypes) returns a message
        here (declared in ``REPLY``, counted as downlink of the round) and implements
        :meth:`receive`."""
        return None

    def receive(self, ctx: Context, cid: int, client: Any, msg: Message, data: ClientData,
                rnd: Round) -> tuple[Any, Metrics]:
        """``(client state, metrics)`` after client ``cid`` acts on the :meth:`reply` ``msg``."""
        raise NotImplementedError

    def predict(self, ctx: Context, cid: int, client: Any, msg: Message, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Scores of every inference rule: :meth:`scores` on the outputs of the predicting model."""
        logits, feats = self.predict_model(ctx, cid, client, msg)(x)
        return self.scores(ctx, cid, client, msg, logits, feats)

    def scores(self, ctx: Context, cid: int, client: Any, msg: Message, logits: torch.Tensor,
               feats: dict) -> dict[str, torch.Tensor]:
        """``{rule: (n, C) scores}`` from the predicting model's outputs. Default: the head."""
        return {"head": logits}

    # -- models from state ---------------------------------------------------------------
    def build(self, ctx: Context, cid: int | None, role: str = "model") -> nn.Module:
        """An (unseeded) module of the architecture ``role`` has for client ``cid``; override
        for methods with other modules (a meme model, a server head, a replaced classifier)."""
        return ctx.new_model(cid)

    def module(self, ctx: Context, cid: int | None, state: dict, role: str = "model",
               fresh: bool = False) -> nn.Module:
        """A module of ``role``'s architecture holding ``state`` (a ``state_dict``).

        By default a scratch module reused across clients of the same architecture (state
        is loaded into it, so it must not be kept after the call); ``fresh`` builds one
        that the caller owns.
        """
        from fedlib.models import member

        key = (self, role, member(ctx.model_name, cid))
        mod = None if fresh else ctx.pool.get(key)
        if mod is None:
            with torch.random.fork_rng(devices=[]):  # building draws random inits: keep the run's RNG untouched
                mod = self.build(ctx, cid, role).to(ctx.device)
            if not fresh:
                ctx.pool[key] = mod
        mod.load_state_dict(state)
        return mod

    def predict_weights(self, ctx: Context, cid: int, client: Any, msg: Message) -> dict:
        """The ``state_dict`` client ``cid`` predicts with. Default: its own ``model``."""
        return client["model"]

    def predict_model(self, ctx: Context, cid: int, client: Any, msg: Message, fresh: bool = False) -> nn.Module:
        """The model client ``cid`` predicts with (:meth:`predict_weights`), in eval mode."""
        model = self.module(ctx, cid, self.predict_weights(ctx, cid, client, msg), fresh=fresh)
        model.eval()
        return model

    def features(self, ctx: Context, cid: int, client: Any, msg: Message, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Feature levels of ``x`` under the model client ``cid`` predicts with (plots, attacks)."""
        return self.predict_model(ctx, cid, client, msg)(x)[1]

    def hyperparameters(self) -> dict:
        return dataclasses.asdict(self)


# -- message declarations --------------------------------------------------------------------
_SPEC = re.compile(r"^(float|int)(?:\[(.*)\])?$")


def check_message(msg: Message, spec: dict, num_classes: int, where: str = "message") -> None:
    """Check ``msg`` against a declaration ``{key: spec}``; raise ``ValueError`` naming the key.

    A spec is ``"float[k, d]"`` (a floating tensor of that shape), ``"int[k]"`` (an integer
    tensor), ``"int"`` / ``"float"`` (a plain number) or ``"float[...]"`` (any shape). A key
    ending in ``?`` is optional, one ending in ``*`` is a prefix (``"w.*"``: model weights).
    Dimension names bind once per message (``k`` is the same in every key that uses it);
    ``C`` is the number of classes.
    """
    dims: dict[str, int] = {"C": num_classes}
    matched = set()
    for key, rule in spec.items():
        optional = key.endswith("?")
        name = key.rstrip("?")
        keys = [k for k in msg if k.startswith(name[:-1])] if name.endswith("*") else [name] * (name in msg)
        if not keys and not optional and not name.endswith("*"):
            raise ValueError(f"{where}: declared key {name!r} is missing")
        m = _SPEC.match(rule.replace(" ", ""))
        if m is None:
            raise ValueError(f"{where}: bad declaration {key!r}: {rule!r}")
        kind, shape = m.group(1), m.group(2)
        for k in keys:
            matched.add(k)
            v = msg[k]
            if shape is None:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and (kind == "float" or isinstance(v, int))
                if not ok:
                    raise ValueError(f"{where}: {k!r} must be a plain {kind}; got {type(v).__name__}")
                continue
            if not isinstance(v, torch.Tensor) or v.is_floating_point() != (kind == "float"):
                raise ValueError(f"{where}: {k!r} must be a {kind} tensor; got {type(v).__name__}"
                                 + (f" {v.dtype}" if isinstance(v, torch.Tensor) else ""))
            if shape == "...":
                continue
            names = [s for s in shape.split(",") if s]
            if len(names) != v.dim():
                raise ValueError(f"{where}: {k!r} has shape {tuple(v.shape)}; declared [{shape}]")
            for n, size in zip(names, v.shape, strict=True):
                want = int(n) if n.isdigit() else dims.setdefault(n, size)
                if want != size:
                    raise ValueError(f"{where}: {k!r} has shape {tuple(v.shape)}; declared [{shape}] with {n} = {want}")
    extra = sorted(set(msg) - matched)
    if extra:
        raise ValueError(f"{where}: undeclared keys {extra}")


# -- shared local training ---------------------------------------------------------------------
def collected(out: tuple, level: str) -> torch.Tensor:
    """The output a task collects: ``"logits"`` or a feature level."""
    return out[0] if level == "logits" else out[1][level]


def train_task(algo: Algorithm, ctx: Context, cid: int, task: LocalTask, data: ClientData,
               rnd: Round) -> tuple[nn.Module, dict, float, dict]:
    """The sequential executor of one :class:`LocalTask`: :func:`sgd_epochs` on
    ``algo.batch_loss``; returns the trained (scratch) module, the collected per-class sums,
    the mean batch loss and the mean of each loss part."""
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
    last = ctx.train.local_epochs - 1
    part_sums: dict = {}

    def loss_fn(xb, yb, epoch):
        out = model(xb)
        if teachers:
            with torch.no_grad():
                t_out = {name: t(xb) for name, t in teachers.items()}
        else:
            t_out = {}
        loss, parts = algo.batch_loss(out, yb, epoch, task.extras, t_out, params, rnd)
        for k, v in parts.items():
            part_sums[k] = part_sums.get(k, 0.0) + v.detach()
        if sums and (task.collect_all_epochs or epoch == last):
            for lv, acc in sums.items():
                acc.add(collected(out, lv), yb)
        return loss

    loss = sgd_epochs(ctx, model, data, rnd.generator(cid), loss_fn, lr=ctx.train.round_lr(rnd))
    steps = _steps(len(data), ctx.train) * ctx.train.local_epochs
    return model, sums, loss, {k: float(v) / steps for k, v in part_sums.items()}


def _steps(n: int, t: TrainSettings) -> int:
    """Local steps per epoch of a client with ``n`` samples (see :func:`sgd_epochs`)."""
    return max(1, n // t.batch_size) if t.drop_last else math.ceil(n / t.batch_size)

def sgd_epochs(ctx: Context, model: nn.Module, data: ClientData, gen: torch.Generator,
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


def head_then_body(ctx: Context, model: nn.Module, data: ClientData, gen: torch.Generator, lr: float,
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


def joint_sgd_epochs(ctx: Context, parts: list[tuple[nn.Module, float]], data: ClientData,
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
    n, bs = len(data), t.batch_size
    steps = _steps(n, t)
    total, count = torch.zeros((), device=data.x.device), 0
    for epoch in range(t.local_epochs):
        perm = torch.randperm(n, generator=gen) if t.shuffle else torch.arange(n)
        for b in range(steps):
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
    has dropout, or ``draws`` says that ``loss_fn`` draws), and the losses are
    summed on the device in float64 (each batch's float32 loss times its size, exactly as a
    Python float sum of ``loss.item() * len(idx)`` gives). Returns the (epochs,) float64 tensor
    of mean losses, on the device: the engine reads metrics with the round's evaluation.
    """
    module.train()
    n = len(y)
    totals = torch.zeros(epochs, dtype=torch.float64, device=y.device)
    upfront = not draws and not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in module.modules())
    orders = torch.stack([torch.randperm(n) for _ in range(epochs)]).to(y.device) if upfront and epochs else None
    for e in range(epochs):
        perm = orders[e] if upfront else torch.randperm(n).to(y.device)
        for s in range(0, n, batch_size):
            idx = perm[s:s + batch_size]
            loss = loss_fn(x[idx], y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            totals[e] += loss.detach().double() * len(idx)
    return totals / n


# -- model parameters as messages ---------------------------------------------------------------
def model_message(model: nn.Module | dict, prefix: str = "w.", buffers: bool = True) -> Message:
    """A model's parameters (and, with ``buffers``, its floating-point buffers such as
    BatchNorm statistics) under ``prefix``; ``model`` may be a module or a ``state_dict``."""
    if isinstance(model, nn.Module):
        items = model.state_dict().items() if buffers else model.named_parameters()
    else:
        items = model.items()
    return {prefix + k: v.detach().clone() for k, v in items if v.is_floating_point()}


def load_model_message(model: nn.Module, msg: Message, prefix: str = "w.", buffers: bool = True) -> None:
    """Copy the ``prefix``-ed tensors of ``msg`` into ``model`` (missing keys untouched)."""
    items = model.state_dict().items() if buffers else model.named_parameters()
    with torch.no_grad():
        for k, v in items:
            if prefix + k in msg:
                v.copy_(msg[prefix + k])


def mean_params(msgs: list[Message], keys, weights: torch.Tensor | None = None) -> dict:
    """``{key: mean over msgs}``: the arithmetic mean (``sum / n``) when ``weights`` is
    ``None``, else ``sum_i w_i msgs[i][key]`` with ``w`` normalised to sum 1 (FedAvg's
    sample-count weights). The parameter average of every method that averages models."""
    if weights is None:
        return {k: sum(m[k] for m in msgs) / len(msgs) for k in keys}
    w = weights / weights.sum()
    return {k: sum(wi * m[k] for wi, m in zip(w, msgs, strict=True)) for k in keys}


def sample_weights(msgs: list[Message], weighted: bool) -> torch.Tensor:
    """Per-message weights: ``num_samples`` (weighted) or ones (FedAvg's two options)."""
    device = next((v.device for v in msgs[0].values() if isinstance(v, torch.Tensor)), None)
    return torch.tensor([float(m["num_samples"]) if weighted else 1.0 for m in msgs], device=device)


def frozen_copy(model: nn.Module, msg: dict | None = None, prefix: str = "w.") -> nn.Module:
    """An eval-mode, gradient-free copy of ``model``, optionally loaded with ``msg``'s weights
    (a teacher: MOON's global and previous models, FedNTD's and FedGKD's global model)."""
    import copy

    twin = copy.deepcopy(model)
    if msg is not None:
        load_model_message(twin, msg, prefix)
    twin.eval()
    for p in twin.parameters():
        p.requires_grad_(False)
        p.grad = None
    return twin


def head_params(model: nn.Module):
    """``(name, parameter)`` of ``model.head`` named by parametrised-layer index, not module path
    (so ``Linear`` and ``Sequential(Dropout, Linear)`` heads give the same names)."""
    j = 0
    for mod in model.head.modules():
        own = list(mod.named_parameters(recurse=False))
        if own:
            for n, p in own:
                yield f"head.{j}.{n}", p
            j += 1


def head_message(model: nn.Module) -> Message:
    """The classifier head's parameters as ``head.<j>.<param>`` (see :func:`head_params`)."""
    return {k: p.detach().clone() for k, p in head_params(model)}


def load_head_message(model: nn.Module, msg: Message) -> None:
    """Copy the ``head.*`` tensors of ``msg`` into ``model.head`` (missing keys untouched)."""
    with torch.no_grad():
        for k, p in head_params(model):
            if k in msg:
                p.copy_(msg[k])
