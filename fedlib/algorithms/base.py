"""The algorithm contract, the run context and the shared local-training loop.

An algorithm is a frozen dataclass of hyperparameters with six methods; it keeps no
state on ``self``. Client and server state are separate objects it creates and
returns. Only :data:`Message` objects (flat ``{name: Tensor | int | float}``) cross
between client and server; the engine copies them and counts them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar
from collections.abc import Callable

import numpy as np
import torch
import torch.nn as nn

from fedlib.validation import check_fields

Message = dict  # dict[str, torch.Tensor | int | float]


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

    def new_model(self, cid: int | None) -> nn.Module:
        """A freshly initialised model; client ``cid``'s init (``None``: the server's) is seeded."""
        from fedlib.models import build_model, member

        tag = (3, cid) if cid is not None else (4,)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.seed, *tag))
            return build_model(member(self.model_name, cid), self.input_shape, self.num_classes, **self.model_args)


@dataclasses.dataclass
class ClientData:
    """One client's local training data (never visible to the server)."""

    cid: int
    x: torch.Tensor
    y: torch.Tensor
    classes: torch.Tensor  # int64, the classes the client holds

    def __len__(self) -> int:
        return len(self.y)


class Algorithm:
    """Base of every method: hyperparameters as dataclass fields, validated on creation.

    Subclasses set ``name``, ``RULES`` (the inference rules ``predict`` returns) and
    ``CONSTRAINTS`` ({field: Interval | Options}), and implement the six methods.
    """

    name: ClassVar[str] = ""
    RULES: ClassVar[tuple[str, ...]] = ("head",)
    CONSTRAINTS: ClassVar[dict] = {}
    # Fields added after runs existed, with the value that reproduces the method without them:
    # left out of run ids at that value (see fedlib.experiments.run_id).
    NEUTRAL: ClassVar[dict] = {}

    def __post_init__(self):
        check_fields(self, self.CONSTRAINTS, prefix=f"algorithm ({self.name})")

    def init_client(self, ctx: Context, cid: int) -> Any:
        raise NotImplementedError

    def init_server(self, ctx: Context) -> Any:
        raise NotImplementedError

    def broadcast(self, ctx: Context, server: Any, cid: int) -> Message:
        raise NotImplementedError

    def local_update(self, ctx: Context, client: Any, msg: Message, data: ClientData,
                     gen: torch.Generator) -> tuple[Any, Message]:
        raise NotImplementedError

    def aggregate(self, ctx: Context, server: Any, uploads: dict[int, Message]) -> Any:
        raise NotImplementedError

    def predict(self, ctx: Context, client: Any, msg: Message, x: torch.Tensor) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def server_stats(self, ctx: Context, server: Any) -> dict[str, float]:
        """Numbers about the server's last aggregation for the round log (e.g. ProtoNorm's
        alignment iterations); plain floats/ints. Default: none."""
        return {}

    def features(self, ctx: Context, client: Any, msg: Message, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Feature levels of ``x`` under the model this client predicts with (for plots and attacks).

        Default: the client's ``model`` after loading any ``w.`` weights in ``msg`` (the
        global model of parameter-sharing methods; a personal model is left as is).
        """
        model = client.model
        load_model_message(model, msg)
        model.eval()
        return model(x)[1]

    def hyperparameters(self) -> dict:
        return dataclasses.asdict(self)


def sgd_epochs(ctx: Context, model: nn.Module, data: ClientData, gen: torch.Generator,
               loss_fn: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]) -> float:
    """Run ``ctx.train.local_epochs`` epochs of SGD on ``data``; return the mean batch loss.

    A new optimiser is made per call, so momentum restarts every round (as in the
    FedProto/FedMPS code). Batches are drawn from a fresh permutation per epoch using
    ``gen``; with ``drop_last`` a final partial batch is skipped, except that a client
    with fewer samples than one batch still takes one step on all of them.
    ``loss_fn(xb, yb, epoch)`` returns the batch loss.
    """
    return joint_sgd_epochs(ctx, [(model, ctx.train.lr)], data, gen, loss_fn)


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
    steps = max(1, n // bs) if t.drop_last else math.ceil(n / bs)
    total, count = torch.zeros(()), 0
    for epoch in range(t.local_epochs):
        perm = torch.randperm(n, generator=gen)
        for b in range(steps):
            idx = perm[b * bs:(b + 1) * bs]
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


def weighted_mean(msgs: list[Message], keys, weighted: bool) -> dict:
    """``{key: sum_i w_i msgs[i][key]}`` with ``w_i`` proportional to ``num_samples`` (or
    equal): the parameter averaging of FedAvg and every method built on it."""
    w = torch.tensor([float(m["num_samples"]) if weighted else 1.0 for m in msgs])
    w = w / w.sum()
    return {k: sum(wi * m[k] for wi, m in zip(w, msgs, strict=True)) for k in keys}


def model_message(model: nn.Module, prefix: str = "w.") -> Message:
    """The model's parameters and floating-point buffers (e.g. BatchNorm statistics)."""
    return {prefix + k: v.detach().clone() for k, v in model.state_dict().items() if v.is_floating_point()}


def load_model_message(model: nn.Module, msg: Message, prefix: str = "w.") -> None:
    """Copy the ``prefix``-ed tensors of ``msg`` into ``model`` (missing keys untouched)."""
    state = model.state_dict()
    with torch.no_grad():
        for k, v in state.items():
            if prefix + k in msg:
                v.copy_(msg[prefix + k])
