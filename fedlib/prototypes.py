"""Prototype math: class means, prototype aggregation, nearest-prototype scores.

Prototypes travel as dense rows for the classes a party has, with an int64 vector
naming those classes; on either side they can be scattered into a ``(C, d)`` table
with a boolean ``present`` mask (never ``None`` sentinels for missing classes).
"""

from __future__ import annotations

import torch


def class_means(features: torch.Tensor, labels: torch.Tensor, num_classes: int):
    """Per-class mean of ``features``.

    Parameters
    ----------
    features : Tensor, shape (n, d)
    labels : Tensor, shape (n,), int64
    num_classes : int

    Returns
    -------
    means : Tensor, shape (C, d); zero rows for classes with no sample
    counts : Tensor, shape (C,), int64
    """
    sums = torch.zeros(num_classes, features.shape[1], dtype=features.dtype)
    sums.index_add_(0, labels, features)
    counts = torch.bincount(labels, minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(features.dtype)
    return means, counts


class ProtoAccumulator:
    """Running per-class feature sums, for prototypes collected during training (FedProto)."""

    def __init__(self, num_classes: int, dim: int):
        self.sums = torch.zeros(num_classes, dim)
        self.counts = torch.zeros(num_classes, dtype=torch.int64)

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        self.sums.index_add_(0, labels, features.detach())
        self.counts.index_add_(0, labels, torch.ones_like(labels))

    def message(self) -> dict:
        """``{"protos": (k, d), "classes": (k,), "counts": (k,)}`` for the k classes seen."""
        classes = torch.nonzero(self.counts).flatten()
        protos = self.sums[classes] / self.counts[classes].unsqueeze(1).to(self.sums.dtype)
        return {"protos": protos, "classes": classes, "counts": self.counts[classes].clone()}


def aggregate_protos(uploads: list[dict], num_classes: int, weighted: bool = False):
    """Average uploaded prototypes per class over the clients that hold the class.

    ``weighted=False`` is the plain mean over clients used by the FedProto and FedMPS
    code; ``weighted=True`` weights client i's prototype of class k by its sample count
    |D_i,k| (FedProto paper, Eq. 6).

    Parameters
    ----------
    uploads : list of dict with ``protos`` (k_i, d), ``classes`` (k_i,), ``counts`` (k_i,)

    Returns
    -------
    protos : Tensor, shape (C, d); zero rows where absent
    present : Tensor, shape (C,), bool
    """
    dim = next(u["protos"].shape[1] for u in uploads)
    sums = torch.zeros(num_classes, dim)
    weight = torch.zeros(num_classes)
    for u in uploads:
        w = u["counts"].to(torch.float32) if weighted else torch.ones(len(u["classes"]))
        sums.index_add_(0, u["classes"], u["protos"] * w.unsqueeze(1))
        weight.index_add_(0, u["classes"], w)
    present = weight > 0
    protos = torch.where(present.unsqueeze(1), sums / weight.clamp(min=1e-12).unsqueeze(1), sums)
    return protos, present


def scatter_protos(protos: torch.Tensor, classes: torch.Tensor, num_classes: int):
    """Dense ``(C, d)`` table and ``present`` mask from rows ``protos`` for ``classes``."""
    table = torch.zeros(num_classes, protos.shape[1], dtype=protos.dtype)
    present = torch.zeros(num_classes, dtype=torch.bool)
    table[classes] = protos
    present[classes] = True
    return table, present


def nearest_prototype_scores(features: torch.Tensor, protos: torch.Tensor, present: torch.Tensor):
    """Scores for nearest-prototype inference: minus the squared Euclidean distance.

    Argmax of the scores is the nearest present prototype (equivalently the smallest
    MSE, as FedProto's code measures it); absent classes score ``-inf``.

    Parameters
    ----------
    features : Tensor, shape (n, d)
    protos : Tensor, shape (C, d)
    present : Tensor, shape (C,), bool
    """
    d2 = torch.cdist(features, protos).pow(2)
    return (-d2).masked_fill(~present.unsqueeze(0), float("-inf"))


def thomson_align(protos: torch.Tensor, lr: float = 0.1, momentum: float = 0.9, decay: float = 0.95,
                  decay_every: int = 10, max_iter: int = 500, patience: int = 10, start: int = 10,
                  decimals: int = 4, record: bool = False):
    """ProtoNorm's Prototype Alignment (Lee et al. 2025, Alg. 1, Eqs. 10-14): spread K
    prototypes on the unit sphere by momentum descent on the log Thomson energy.

    Starts from the L2-normalised ``protos`` (rows keep their class), velocity 0. Each
    iteration: F_j = sum_k (c_j - c_k) / ||c_j - c_k||^2 (Eq. 11), v = momentum v + lr F
    (Eq. 12), c = normalise(c + v) (Eqs. 13-14); lr is multiplied by ``decay`` whenever
    ``it % decay_every == 0`` (so right after iteration 0, as in the official code).
    Stopping rule of the official code (the paper's epsilon is not given; notes
    protonorm.md §11 item 6): the mean ||F_j|| rounded to ``decimals`` is unchanged for
    ``patience`` consecutive iterations, counted from iteration ``start``; at most
    ``max_iter`` iterations.

    Returns ``(aligned (K, d), iterations run, history)``; ``history`` (with ``record``)
    holds the (K, K) pairwise distances after every iteration (ProtoNorm Fig. 4).
    """
    x = torch.nn.functional.normalize(protos.detach().double(), dim=1)
    k = len(x)
    eye = torch.eye(k, dtype=x.dtype)
    v = torch.zeros_like(x)
    same, prev, history = 0, None, []
    it = -1
    for it in range(max_iter):
        diff = x.unsqueeze(1) - x.unsqueeze(0)              # (K, K, d): c_j - c_k
        d2 = diff.pow(2).sum(-1) + 1e-6 * eye
        w = (1.0 / (d2 + 1e-10)) * (1 - eye)
        force = (w.unsqueeze(-1) * diff).sum(1)
        v = momentum * v + lr * force
        x = torch.nn.functional.normalize(x + v, dim=1)
        if it % decay_every == 0:
            lr *= decay
        if record:
            history.append(torch.cdist(x, x).float())
        m = round(float(force.norm(dim=1).mean()), decimals)
        if it == start:
            prev = m
        elif it > start:
            if m == prev:
                same += 1
                if same == patience:
                    break
            else:
                same, prev = 0, m
    return x.to(protos.dtype), it + 1, history


def message_scores(features: torch.Tensor, msg: dict, num_classes: int, key: str = "protos") -> torch.Tensor:
    """Nearest-prototype scores against the prototypes a message carries (rows ``msg[key]``
    for ``msg["classes"]``); ``-inf`` everywhere when it carries none (before the first
    aggregation)."""
    if key not in msg:
        return torch.full((len(features), num_classes), float("-inf"))
    table, has = scatter_protos(msg[key], msg["classes"], num_classes)
    return nearest_prototype_scores(features, table, has)


def eval_class_means(model, data, num_classes: int, levels=("high",), chunk: int = 1024) -> dict:
    """``{level: ProtoAccumulator}`` of the class means of ``model``'s features over ``data``
    (anything with ``x``, ``y`` and ``len``) from one eval-mode pass without gradients: the
    local prototypes of methods that compute them after training."""
    accs = {lv: ProtoAccumulator(num_classes, model.feature_dims[lv]) for lv in levels}
    model.eval()
    with torch.no_grad():
        for s in range(0, len(data), chunk):
            feats = model(data.x[s:s + chunk])[1]
            for lv in levels:
                accs[lv].add(feats[lv], data.y[s:s + chunk])
    return accs
