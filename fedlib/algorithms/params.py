"""Model parameters in state and in messages: copies of ``state_dict``s, weights under a key prefix,
classifier-head parameters by layer index, parameter averages and sample-count weights, frozen teacher copies."""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["frozen_copy", "head_message", "head_params", "load_head_message", "load_model_message", "mean_params",
           "model_message", "sample_weights", "weights"]


def weights(module: nn.Module) -> dict:
    """A detached copy of ``module``'s ``state_dict``: how models live in state."""
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def model_message(model: nn.Module | dict, prefix: str = "w.", buffers: bool = True) -> dict:
    """A model's parameters (and, with ``buffers``, its floating-point buffers such as
    BatchNorm statistics) under ``prefix``; ``model`` may be a module or a ``state_dict``."""
    if isinstance(model, nn.Module):
        items = model.state_dict().items() if buffers else model.named_parameters()
    else:
        items = model.items()
    return {prefix + k: v.detach().clone() for k, v in items if v.is_floating_point()}


def load_model_message(model: nn.Module, msg: dict, prefix: str = "w.", buffers: bool = True) -> None:
    """Copy the ``prefix``-ed tensors of ``msg`` into ``model`` (missing keys untouched)."""
    items = model.state_dict().items() if buffers else model.named_parameters()
    with torch.no_grad():
        for k, v in items:
            if prefix + k in msg:
                v.copy_(msg[prefix + k])


def mean_params(msgs: list[dict], keys, weights: torch.Tensor | None = None) -> dict:
    """``{key: mean over msgs}``: the arithmetic mean (``sum / n``) when ``weights`` is
    ``None``, else ``sum_i w_i msgs[i][key]`` with ``w`` normalised to sum 1 (FedAvg's
    sample-count weights). The parameter average of every method that averages models."""
    if weights is None:
        return {k: sum(m[k] for m in msgs) / len(msgs) for k in keys}
    w = weights / weights.sum()
    return {k: sum(wi * m[k] for wi, m in zip(w, msgs, strict=True)) for k in keys}


def sample_weights(msgs: list[dict], weighted: bool) -> torch.Tensor:
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


def head_message(model: nn.Module) -> dict:
    """The classifier head's parameters as ``head.<j>.<param>`` (see :func:`head_params`)."""
    return {k: p.detach().clone() for k, p in head_params(model)}


def load_head_message(model: nn.Module, msg: dict) -> None:
    """Copy the ``head.*`` tensors of ``msg`` into ``model.head`` (missing keys untouched)."""
    with torch.no_grad():
        for k, p in head_params(model):
            if k in msg:
                p.copy_(msg[k])
