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
import re
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn as nn

from fedlib.algorithms.batching import Batching, TrainedGroup, contract_default
from fedlib.algorithms.loops import train_task
from fedlib.algorithms.params import weights
from fedlib.counting import phase
from fedlib.data.federated import ClientData
from fedlib.validation import check_fields

Message = dict  # {name: torch.Tensor | int | float}
Metrics = dict  # {name: float | int}

__all__ = ["Algorithm", "ClientData", "Context", "LocalTask", "Message", "Metrics", "Phase", "Round", "TrainSettings",
           "TrainedGroup", "check_message", "derive_seed"]


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
    ``total`` rounds and the run ``seed``. ``exact`` is ``False`` where the run's numbers may move at
    rounding level (the batched executor, which trains the clients with batched kernels): a server-side
    loop may then take fused steps too (FedMPS's head); ``True`` (the default, the sequential reference):
    every number as the plain loops give it, bit for bit."""

    index: int
    total: int
    seed: int
    exact: bool = True

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
    # (clip, noise multiplier) of sample-level DP-SGD in local training (fedlib.privacy.dpsgd); None: plain SGD
    dp_sgd: tuple | None = None
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

    ``phases``: training in phases (FedRep, FedPAC: the head, then the body), each a
    :class:`Phase` run as :func:`~fedlib.algorithms.loops.sgd_epochs` (a fresh optimiser, the
    batch orders continuing from the client's one generator); ``batch_loss`` then gets the
    phase's ``part`` as ``phase=``, the metrics ``train_loss`` (the last phase's mean batch
    loss) and ``<part>_loss`` per phase that ran, and sums are collected in the last phase.
    Empty: one phase of every parameter for ``local_epochs`` (``batch_loss`` gets no ``phase``).

    ``draws``: per-step inputs that do not depend on the model (FedPA's generated features):
    ``draws(k)`` returns the tensors of the client's next k local steps (leading dimension k, the
    same keys and shapes every call), drawn in step order; each step's slice joins ``extras``.
    ``head_on``: keys of ``extras`` (per-step or not) that the trained model's ``head`` also
    scores, with gradient: ``extras["head(<key>)"]`` = ``model.head(extras[key])``.
    """

    weights: dict
    extras: dict = dataclasses.field(default_factory=dict)
    teachers: dict = dataclasses.field(default_factory=dict)
    collect: tuple = ()
    collect_all_epochs: bool = False
    memo: dict = dataclasses.field(default_factory=dict)
    phases: tuple = ()
    draws: Callable[[int], dict] | None = None
    head_on: tuple = ()


@dataclasses.dataclass(frozen=True)
class Phase:
    """One phase of a :class:`LocalTask`: ``epochs`` epochs (0: skipped) training only ``part``
    (``"head"``: the parameters of ``model.head``; ``"body"``: all others; ``"all"``) at learning
    rate ``lr`` (``None``: the round's, :meth:`TrainSettings.round_lr`)."""

    part: str
    epochs: int
    lr: float | None = None


class Algorithm(Batching):
    """Base of every method: hyperparameters as dataclass fields, validated on creation.

    Subclasses set ``name``, ``RULES`` (the inference rules ``predict`` returns; the last is the rule the method
    reports: the progress bar shows it, and the benchmark scores by the nearest prototype where it is ``proto``),
    ``CONSTRAINTS`` ({field: Interval | Options}; merged with the parents'), ``UPLOAD`` and
    ``BROADCAST`` (the message declarations, see :func:`check_message`) and implement the hooks that define a
    method: ``init_server``, ``broadcast``, ``local_update`` (or its parts ``task``, ``batch_loss``, ``finish``),
    ``aggregate``, and where the defaults do not fit ``init_client``, ``reply`` / ``receive``, ``scores``. What the
    batched executor asks beyond these (``SWEEPABLE``, ``batch_support``, ``finish_group``, ``scores_group``) is
    :class:`~fedlib.algorithms.batching.Batching`, inherited with defaults that serve every method.
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

    @contract_default
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

    @contract_default
    def scores(self, ctx: Context, cid: int, client: Any, msg: Message, logits: torch.Tensor,
               feats: dict) -> dict[str, torch.Tensor]:
        """``{rule: (n, C) scores}`` from the predicting model's outputs. Default: the head."""
        return {"head": logits}

    # -- models from state ---------------------------------------------------------------
    def build(self, ctx: Context, cid: int | None, role: str = "model") -> nn.Module:
        """An (unseeded) module of the architecture ``role`` has for client ``cid``; override
        for methods with other modules (a meme model, a server head, a replaced classifier)."""
        return ctx.new_model(cid)

    def module(self, ctx: Context, cid: int | None, state: dict | None, role: str = "model",
               fresh: bool = False) -> nn.Module:
        """A module of ``role``'s architecture holding ``state`` (a ``state_dict``).

        By default a scratch module reused across clients of the same architecture (state
        is loaded into it, so it must not be kept after the call); ``fresh`` builds one
        that the caller owns. ``state=None`` loads nothing (a module whose tensors the caller
        supplies, as ``torch.func.functional_call`` does).
        """
        from fedlib.models import member

        key = (self, role, member(ctx.model_name, cid))
        mod = None if fresh else ctx.pool.get(key)
        if mod is None:
            with torch.random.fork_rng(devices=[]):  # building draws random inits: keep the run's RNG untouched
                mod = self.build(ctx, cid, role).to(ctx.device)
            if not fresh:
                ctx.pool[key] = mod
        if state is not None:
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
