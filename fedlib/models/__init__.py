"""Backbones that return logits plus named feature levels.

Every model's ``forward(x)`` returns ``(logits, features)`` where ``features`` maps a
level name (``"low"``, ``"high"``) to a tensor of shape (n, d). ``model.feature_dims``
gives each level's d, ``model.head`` maps the ``"high"`` features to logits, so a
server can run a copy of a client's output layer on uploaded prototypes.
"""

from __future__ import annotations

import torch.nn as nn

from fedlib.models import hetero
from fedlib.models.cnn import CNNCifar, CNNFashion, CNNMnist, FedAvgCNN
from fedlib.models.mlp import MLPHead, MLPMnist, SpiralMLP
from fedlib.validation import ConfigError

MODELS: dict[str, type[nn.Module]] = {
    "cnn_fmnist": CNNFashion,
    "cnn_cifar": CNNCifar,
    "cnn_mnist": CNNMnist,
    "fedavg_cnn": FedAvgCNN,
    "mlp_head": MLPHead,
    "mlp_mnist": MLPMnist,
    "mlp_spiral": SpiralMLP,
    **hetero.MODELS,
}
# Model families for heterogeneous clients: client i gets member i % len(family).
FAMILIES: dict[str, tuple[str, ...]] = dict(hetero.FAMILIES)


def member(name: str, cid: int | None) -> str:
    """The architecture client ``cid`` runs under model ``name`` (a model or a family).

    The server (``cid=None``) of a family gets its first member."""
    if name in FAMILIES:
        fam = FAMILIES[name]
        return fam[0] if cid is None else fam[cid % len(fam)]
    return name


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **kwargs) -> nn.Module:
    """Instantiate model ``name`` for inputs of ``input_shape`` (without the batch axis)."""
    if name not in MODELS:
        raise ConfigError("model.name", name, "one of " + ", ".join(sorted(MODELS) + sorted(FAMILIES)))
    return MODELS[name](input_shape=tuple(input_shape), num_classes=num_classes, **kwargs)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
