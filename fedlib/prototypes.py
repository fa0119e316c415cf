"""Prototype math: class means, aggregation, tables with K >= 1 prototypes per class, scores.

On the wire, prototypes travel as rows with the class of each row (``protos`` (m, d),
``classes`` (m,), optionally ``counts`` (m,)); a class may appear several times when a
method sends several prototypes per class (MP-FedCL's k-means centroids, GFPL's mixture
components). On either side rows become a :class:`ProtoTable`: ``(C, K, d)`` with a
``(C, K)`` presence mask and weights, never ``None`` sentinels for missing classes.
Single-prototype methods keep a ``(C, d)`` table and a ``(C,)`` mask.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

_TABLES = WeakIdKeyDictionary()  # message rows -> the ProtoTable built from them (see ProtoTable.from_message)
_SINGLE = WeakIdKeyDictionary()  # message rows -> the (C, d) table built from them (see single_table); read only


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
    sums = torch.zeros(num_classes, features.shape[1], dtype=features.dtype, device=features.device)
    sums.index_add_(0, labels, features)
    counts = torch.bincount(labels, minlength=num_classes)
    means = sums / counts.clamp(min=1).unsqueeze(1).to(features.dtype)
    return means, counts


class ProtoAccumulator:
    """Running per-class feature sums, for prototypes collected during training (FedProto)."""

    def __init__(self, num_classes: int, dim: int, device: torch.device | str | None = None):
        self.sums = torch.zeros(num_classes, dim, device=device)
        self.counts = torch.zeros(num_classes, dtype=torch.int64, device=device)
        self.classes: torch.Tensor | None = None  # the classes seen, where known without reading the counts

    @classmethod
    def of(cls, sums: torch.Tensor, counts: torch.Tensor, classes: torch.Tensor | None = None) -> ProtoAccumulator:
        """An accumulator holding ``sums`` (C, d) and ``counts`` (C,) as they are (no copy)."""
        acc = cls.__new__(cls)
        acc.sums, acc.counts, acc.classes = sums, counts, classes
        return acc

    def add(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        self.sums.index_add_(0, labels, features.detach())
        self.counts.index_add_(0, labels, torch.ones_like(labels))

    def message(self, counts: bool = True) -> dict:
        """``{"protos": (k, d), "classes": (k,), "counts": (k,)}`` for the k classes seen
        (without ``counts`` when the method sends none)."""
        classes = torch.nonzero(self.counts).flatten() if self.classes is None else self.classes
        protos = self.sums[classes] / self.counts[classes].unsqueeze(1).to(self.sums.dtype)
        out = {"protos": protos, "classes": classes}
        if counts:
            out["counts"] = self.counts[classes].clone()
        return out


class GroupSums:
    """The per-class sums of G clients trained together (the batched executor), in one piece.

    ``sums`` (G * C, d) and ``counts`` (G * C,): row ``g * C + c`` is client g's class c; ``cells``
    (m,): the rows with a nonzero count, client by client, ``sizes``: how many of them each client
    has (known on the host, so splitting per client reads nothing from the device).
    """

    def __init__(self, sums: torch.Tensor, counts: torch.Tensor, cells: torch.Tensor, sizes: list[int],
                 num_classes: int):
        self.sums, self.counts, self.cells, self.sizes, self.C = sums, counts, cells, sizes, num_classes
        self.classes = cells % num_classes

    def client(self, g: int) -> ProtoAccumulator:
        """Client ``g``'s :class:`ProtoAccumulator` (views of the group's tensors)."""
        C, at = self.C, sum(self.sizes[:g])
        return ProtoAccumulator.of(self.sums[g * C:(g + 1) * C], self.counts[g * C:(g + 1) * C],
                                   self.classes[at:at + self.sizes[g]])

    def part(self, lo: int, hi: int) -> GroupSums:
        """Clients ``lo`` to ``hi - 1`` as a group of their own (views; :mod:`fedlib.stacked` splits the group of
        several runs so)."""
        C, at, to = self.C, sum(self.sizes[:lo]), sum(self.sizes[:hi])
        return GroupSums(self.sums[lo * C:hi * C], self.counts[lo * C:hi * C], self.cells[at:to] - lo * C,
                         self.sizes[lo:hi], C)

    def messages(self, counts: bool = True) -> list[dict]:
        """Every client's :meth:`ProtoAccumulator.message`, computed for the group at once (the same values)."""
        k = self.counts[self.cells]
        protos = self.sums[self.cells] / k.unsqueeze(1).to(self.sums.dtype)
        parts = [protos.split(self.sizes), self.classes.split(self.sizes)] + ([k.split(self.sizes)] if counts else [])
        keys = ("protos", "classes", "counts")[:len(parts)]
        return [dict(zip(keys, row, strict=True)) for row in zip(*parts, strict=True)]


def eval_class_means(model, data, num_classes: int, levels=("high",), chunk: int = 1024) -> dict:
    """``{level: ProtoAccumulator}`` of the class means of ``model``'s features over ``data``
    (anything with ``x``, ``y`` and ``len``) from one eval-mode pass without gradients: the
    local prototypes of methods that compute them after training."""
    accs = {lv: ProtoAccumulator(num_classes, model.feature_dims[lv], data.x.device) for lv in levels}
    model.eval()
    with torch.no_grad():
        for s in range(0, len(data), chunk):
            feats = model(data.x[s:s + chunk])[1]
            for lv in levels:
                accs[lv].add(feats[lv], data.y[s:s + chunk])
    return accs


def aggregate_protos(uploads: list[dict], num_classes: int, weighted: bool = False, key: str = "protos"):
    """Average uploaded prototypes per class over the clients that hold the class.

    ``weighted=False`` is the plain mean over clients used by the FedProto and FedMPS
    code; ``weighted=True`` weights client i's prototype of class k by its sample count
    |D_i,k| (FedProto paper, Eq. 6; the uploads then carry ``counts``).

    Parameters
    ----------
    uploads : list of dict with ``key`` (k_i, d), ``classes`` (k_i,) and, if weighted, ``counts`` (k_i,)

    Returns
    -------
    protos : Tensor, shape (C, d); zero rows where absent
    present : Tensor, shape (C,), bool
    """
    first = uploads[0][key]
    # one index_add over the rows of all uploads, in upload order: on a CPU the same additions in the same
    # order as adding upload after upload
    def joined(k):
        return uploads[0][k] if len(uploads) == 1 else torch.cat([u[k] for u in uploads])

    classes, rows = joined("classes"), joined(key)
    sums = torch.zeros(num_classes, first.shape[1], device=first.device)
    weight = torch.zeros(num_classes, device=first.device)
    if weighted:
        w = joined("counts").to(torch.float32)
        rows = rows * w.unsqueeze(1)
    else:
        w = torch.ones(len(classes), device=first.device)
    sums.index_add_(0, classes, rows)
    weight.index_add_(0, classes, w)
    present = weight > 0
    protos = torch.where(present.unsqueeze(1), sums / weight.clamp(min=1e-12).unsqueeze(1), sums)
    return protos, present


def keep_last(new: torch.Tensor, present: torch.Tensor, old: torch.Tensor, old_present: torch.Tensor):
    """Classes absent from this round's aggregate keep their previous row: ``(table, present)``.
    ``old`` may be empty (``(C, 0)``: nothing aggregated before)."""
    if old.numel() == 0:
        return new, present
    return torch.where(present.unsqueeze(1), new, old), present | old_present


def rows_message(table: torch.Tensor, present: torch.Tensor, key: str = "protos", scale: float = 1.0) -> dict:
    """``{key: rows (k, d), "classes": (k,)}`` of the present classes of a ``(C, d)`` table (the
    broadcast of a single-prototype method), each row times ``scale``; ``{}`` when none is present."""
    k = int(present.sum())  # the one host read: how many rows travel
    if not k:
        return {}
    classes = torch.nonzero_static(present, size=k).flatten()
    rows = table[classes] if scale == 1.0 else scale * table[classes]
    return {key: rows, "classes": classes}


def proto_targets(z: torch.Tensor, y: torch.Tensor, table: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """Each sample's target: the prototype of its class in ``table`` (C, d), or its own detached
    feature where the class has none yet (zero loss and no gradient for that sample)."""
    return torch.where(present[y].unsqueeze(1), table[y], z.detach())


def proto_regulariser(z: torch.Tensor, y: torch.Tensor, table: torch.Tensor, present: torch.Tensor,
                      kind: str = "mse") -> torch.Tensor:
    """The pull of each sample's representation towards its class's global prototype.

    ``"mse"``: ``nn.MSELoss`` (mean over batch and dimensions; FedProto, FedTGP in HtFLlib,
    ProtoNorm's code); ``"distance"``: mean Euclidean distance (the FedTGP paper);
    ``"soft_ce"``: cross-entropy against softmax(target) (a logit table, FedDistill's variant).
    Samples whose class has no prototype contribute zero (see :func:`proto_targets`).
    """
    target = proto_targets(z, y, table, present)
    if kind == "mse":
        return F.mse_loss(z, target)
    if kind == "distance":
        return (z - target).norm(dim=1).mean()
    return F.cross_entropy(z, target.softmax(dim=1))


def nearest_prototype_scores(features: torch.Tensor, protos: torch.Tensor, present: torch.Tensor):
    """Scores for nearest-prototype inference: minus the squared Euclidean distance to the
    nearest prototype of each class.

    Argmax of the scores is the class of the nearest present prototype (equivalently the
    smallest MSE, as FedProto's code measures it); absent classes score ``-inf``.

    Parameters
    ----------
    features : Tensor, shape (n, d)
    protos : Tensor, shape (C, d) or (C, K, d)
    present : Tensor, shape (C,) or (C, K), bool
    """
    C = protos.shape[0]
    d2 = torch.cdist(features, protos.reshape(-1, protos.shape[-1])).pow(2)
    scores = (-d2).view(len(features), C, -1).masked_fill(~present.view(1, C, -1), float("-inf"))
    return scores.amax(dim=2)


@dataclasses.dataclass
class ProtoTable:
    """K >= 1 prototypes per class (several per class for multi-prototype methods).

    Attributes
    ----------
    protos : Tensor, shape (C, K, d); zero where absent (padding)
    present : Tensor, shape (C, K), bool
    weights : Tensor, shape (C, K), float: sample counts or mixture weights, 0 where absent
    """

    protos: torch.Tensor
    present: torch.Tensor
    weights: torch.Tensor

    @classmethod
    def from_rows(cls, protos: torch.Tensor, classes: torch.Tensor, num_classes: int,
                  weights: torch.Tensor | None = None) -> ProtoTable:
        """A table from message rows; rows of the same class fill its slots in order, and K is
        the largest number of rows of one class (at least 1)."""
        m = len(classes)
        if m:
            onehot = (classes.unsqueeze(1) == torch.arange(num_classes, device=classes.device)).long()
            slot = (onehot.cumsum(0) - 1)[torch.arange(m, device=classes.device), classes]
            k = int(onehot.sum(0).max())
        else:
            slot, k = classes, 1
        table = torch.zeros(num_classes, k, protos.shape[-1], dtype=protos.dtype, device=protos.device)
        present = torch.zeros(num_classes, k, dtype=torch.bool, device=protos.device)
        w = torch.zeros(num_classes, k, device=protos.device)
        table[classes, slot] = protos
        present[classes, slot] = True
        w[classes, slot] = torch.ones(m, device=protos.device) if weights is None else weights.to(w.dtype)
        return cls(table, present, w)

    @classmethod
    def from_message(cls, msg: dict, num_classes: int, key: str = "protos",
                     weight_key: str | None = None) -> ProtoTable | None:
        """The table a message carries under ``key`` (rows for ``msg["classes"]``); ``None``
        when it carries none (before the first aggregation)."""
        if key not in msg:
            return None
        rows, classes, w = msg[key], msg["classes"], msg.get(weight_key) if weight_key else None
        held = _TABLES.get(rows)  # a message shared by many clients (a shared broadcast) is read once
        if held is not None and held[0] is classes and held[1] is w and held[2] == num_classes:
            return held[3]
        table = cls.from_rows(rows, classes, num_classes, w)
        _TABLES[rows] = (classes, w, num_classes, table)
        return table

    @property
    def class_present(self) -> torch.Tensor:
        """(C,) bool: classes with at least one prototype."""
        return self.present.any(dim=1)

    def single(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(table (C, d), present (C,))`` of a one-prototype-per-class table."""
        if self.protos.shape[1] != 1:
            raise ValueError(f"expected one prototype per class; this table holds up to {self.protos.shape[1]}")
        return self.protos[:, 0], self.present[:, 0]

    def rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(protos (m, d), classes (m,), weights (m,))`` of the present slots, class by class."""
        c, s = torch.nonzero(self.present, as_tuple=True)
        return self.protos[c, s], c, self.weights[c, s]

    def scores(self, features: torch.Tensor) -> torch.Tensor:
        """(n, C) nearest-prototype scores over the whole pool: the class of the nearest wins."""
        return nearest_prototype_scores(features, self.protos, self.present)


def single_table(msg: dict, num_classes: int, key: str = "protos"):
    """``(table (C, d), present (C,))`` of a message whose rows ``msg[key]`` belong to distinct
    classes ``msg["classes"]`` (a single-prototype broadcast, :func:`rows_message`), without a
    host read; ``None`` when it carries none. The same as ``ProtoTable.from_message(...).single()``. The table
    is built once per message (every client of a shared broadcast reads the same one): callers must not
    change it in place."""
    if key not in msg:
        return None
    rows, classes = msg[key], msg["classes"]
    held = _SINGLE.get(rows)  # a message shared by many clients (a shared broadcast) is read once
    if held is not None and held[0] is classes and held[1] == num_classes:
        return held[2]
    table = torch.zeros(num_classes, rows.shape[-1], dtype=rows.dtype, device=rows.device)
    present = torch.zeros(num_classes, dtype=torch.bool, device=rows.device)
    table[classes] = rows
    present[classes] = True
    _SINGLE[rows] = (classes, num_classes, (table, present))
    return table, present


def message_scores(features: torch.Tensor, msg: dict, num_classes: int, key: str = "protos",
                   single: bool = False) -> torch.Tensor:
    """Nearest-prototype scores against the prototypes a message carries (rows ``msg[key]``
    for ``msg["classes"]``, several per class allowed; ``single``: distinct classes, see
    :func:`single_table`); ``-inf`` everywhere when it carries none (before the first aggregation)."""
    if single:
        held = single_table(msg, num_classes, key)
        return nearest_prototype_scores(features, *held) if held is not None else \
            torch.full((len(features), num_classes), float("-inf"), device=features.device)
    table = ProtoTable.from_message(msg, num_classes, key)
    if table is None:
        return torch.full((len(features), num_classes), float("-inf"), device=features.device)
    return table.scores(features)


def thomson_align(protos: torch.Tensor, lr: float = 0.1, momentum: float = 0.9, decay: float = 0.95,
                  decay_every: int = 10, max_iter: int = 500, patience: int = 10, start: int = 10,
                  decimals: int = 4, record: bool = False):
    """ProtoNorm's Prototype Alignment (Lee et al. 2025, Alg. 1, Eqs. 10-14): spread K
    prototypes on the unit sphere by momentum descent on the log Thomson energy.

    Starts from the L2-normalised ``protos`` (rows keep their class), velocity 0. Each
    iteration: F_j = sum_k (c_j - c_k) / ||c_j - c_k||^2 (Eq. 11), v = momentum v + lr F
    (Eq. 12), c = normalise(c + v) (Eqs. 13-14); lr is multiplied by ``decay`` whenever
    ``it % decay_every == 0`` (so right after iteration 0, as in the official code).
    Stopping rule of the official code (the paper's epsilon is not given): the mean
    ||F_j|| rounded to ``decimals`` is unchanged for ``patience`` consecutive iterations,
    counted from iteration ``start``; at most ``max_iter`` iterations.

    Returns ``(aligned (K, d), iterations run, history)``; ``history`` (with ``record``)
    holds the (K, K) pairwise distances after every iteration (ProtoNorm Fig. 4).
    """
    x = torch.nn.functional.normalize(protos.detach().double(), dim=1)
    k = len(x)
    eye = torch.eye(k, dtype=x.dtype, device=x.device)
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
