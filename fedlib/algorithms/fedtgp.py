"""FedTGP: Zhang et al., "FedTGP: Trainable Global Prototypes with Adaptive-Margin-Enhanced
Contrastive Learning for Data and Model Heterogeneity in Federated Learning", AAAI 2024
(as run by HtFLlib, whose defaults ProtoNorm's Table 6 follows; docs/protonorm.md).

Clients (any architecture) train CE + lam * MSE(f(x), P_y) towards the global prototypes P
and upload the class means of their features from an eval-mode pass after training. The
server keeps trainable global prototypes P = fc(ReLU(mid(Embedding(C, d)))) and, every round,
trains them for ``server_epochs`` epochs with SGD on all uploaded (prototype, class) pairs,
minimising CE over minus the Euclidean distances with an adaptive margin added to the true
class: margin = min(max over classes of the smallest distance between the averaged client
prototypes of two classes, ``margin_threshold``). Inference: nearest global prototype.

Up: ``protos`` (k, d), ``classes`` (k,). Down: ``protos`` (C', d), ``classes``.
Defaults are HtFLlib's (``-lam 10 -se 100 -mart 100``; server lr = client lr 0.01, server
batch = the client batch). The FedTGP paper writes the client term as lam * Euclidean
distance with lam = 0.1: ``loss: distance`` with ``lam: 0.1`` (the maintainers say the two
are different losses). ``gamma`` multiplies the prototypes the server sends (ProtoNorm
Table 5's scaling of FedTGP; 1 = off).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed, server_epochs, weights
from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.prototypes import aggregate_protos, proto_regulariser
from fedlib.validation import Interval, Options


class TrainableGlobalPrototypes(nn.Module):
    """HtFLlib ``Trainable_Global_Prototypes``: Embedding(C, d) -> Linear + ReLU -> Linear."""

    def __init__(self, num_classes: int, dim: int):
        super().__init__()
        self.embedding = nn.Embedding(num_classes, dim)
        self.middle = nn.Sequential(nn.Linear(dim, dim), nn.ReLU())
        self.fc = nn.Linear(dim, dim)

    def forward(self, classes: torch.Tensor) -> torch.Tensor:
        return self.fc(self.middle(self.embedding(classes)))


def margin_loss(protos: torch.Tensor, labels: torch.Tensor, centers: torch.Tensor, margin: float) -> torch.Tensor:
    """CE over minus the Euclidean distances to the trainable prototypes, the true class's
    distance increased by ``margin`` (FedTGP's adaptive-margin contrastive loss)."""
    dist = torch.cdist(protos, centers)
    dist = dist + margin * F.one_hot(labels, len(centers)).to(dist.dtype)
    return F.cross_entropy(-dist, labels)


def adaptive_margin(mean: torch.Tensor, present: torch.Tensor, threshold: float) -> float:
    """min(max_k min_{j != k} ||mean_k - mean_j||, threshold) over classes with uploads."""
    m = mean[present]
    if len(m) < 2:
        return 0.0
    d = torch.cdist(m, m) + torch.diag(torch.full((len(m),), float("inf"), device=m.device))
    return float(min(float(d.min(dim=1).values.max()), threshold))


@register
@dataclasses.dataclass(frozen=True)
class FedTGP(PrototypeMethod):
    lam: float = 10.0              # HtFLlib -lam 10 (MSE); the paper: 0.1 with the Euclidean distance
    loss: str = "mse"              # "mse": HtFLlib; "distance": the FedTGP paper's Euclidean term
    server_epochs: int = 100       # HtFLlib -se 100
    margin_threshold: float = 100.0  # HtFLlib -mart 100
    server_lr: float | None = None   # None: the client lr (HtFLlib)
    server_batch_size: int | None = None  # None: the client batch size (HtFLlib)
    gamma: float = 1.0             # scale of the sent prototypes (ProtoNorm Table 5)
    level: str = "high"
    name = "fedtgp"
    SWEEPABLE = ("lam", "gamma")  # the loss weight (arithmetic); the sent scale (server side)
    CONSTRAINTS = {"lam": Interval(0, None), "loss": Options(("mse", "distance")),
                   "server_epochs": Interval(0, None, integer=True), "margin_threshold": Interval(0, None),
                   "server_lr": Interval(0, None, low_open=True, allow_none=True),
                   "server_batch_size": Interval(1, None, integer=True, allow_none=True),
                   "gamma": Interval(0, None, low_open=True), "level": Options(("high", "low"))}
    UPLOAD = {"protos": "float[k, d]", "classes": "int[k]"}
    send_counts = False  # HtFLlib: class counts do not leave the clients

    def regulariser(self, z, y, table, present):
        return self.lam * proto_regulariser(z, y, table, present, self.loss)

    def sent_scale(self):
        return self.gamma

    def init_server(self, ctx):
        return {**super().init_server(ctx), "generator": None}  # created at the first upload (needs d)

    def aggregate(self, ctx, server, uploads, rnd):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server, {}
        C = ctx.num_classes
        x = torch.cat([u["protos"] for u in ups])
        y = torch.cat([u["classes"] for u in ups])
        mean, present = aggregate_protos(ups, C, weighted=False)
        present = present | server["present"]
        margin = adaptive_margin(mean, present & (torch.bincount(y, minlength=C) > 0), self.margin_threshold)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, 5))  # the generator's initial weights (first round)
            gen_model = TrainableGlobalPrototypes(C, x.shape[1]).to(x.device)
        if server["generator"] is not None:
            gen_model.load_state_dict(server["generator"])
        opt = torch.optim.SGD(gen_model.parameters(), lr=self.server_lr or ctx.train.lr)
        all_classes = torch.arange(C, device=x.device)
        losses = server_epochs(gen_model, opt, x, y, self.server_epochs, self.server_batch_size or ctx.train.batch_size,
                               lambda xb, yb: margin_loss(xb, yb, gen_model(all_classes), margin))
        gen_model.eval()
        with torch.no_grad():
            protos = gen_model(all_classes)
        metrics = ({"margin": float(margin), "server_loss": float(losses[-1]),
                    "server_loss_first_epoch": float(losses[0])} if len(losses) else {})
        return {"generator": weights(gen_model), "protos": protos, "present": present}, metrics
