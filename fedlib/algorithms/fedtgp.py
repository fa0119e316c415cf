"""FedTGP: Zhang et al., "FedTGP: Trainable Global Prototypes with Adaptive-Margin-Enhanced
Contrastive Learning for Data and Model Heterogeneity in Federated Learning", AAAI 2024
(as run by HtFLlib, whose defaults ProtoNorm's Table 6 follows; notes protonorm.md §3.2,
field.md §FedTGP).

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

import copy
import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, derive_seed, sgd_epochs
from fedlib.prototypes import aggregate_protos, eval_class_means, message_scores, scatter_protos
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


@dataclasses.dataclass
class FedTGPClient:
    model: object


@dataclasses.dataclass
class FedTGPServer:
    generator: object | None     # TrainableGlobalPrototypes, created at the first upload (needs d)
    protos: torch.Tensor         # (C, d) current global prototypes
    present: torch.Tensor        # (C,) classes some client has uploaded
    margin: float                # the adaptive margin of the last round
    losses: list                 # mean server loss per epoch of the last round


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
    d = torch.cdist(m, m) + torch.diag(torch.full((len(m),), float("inf")))
    return float(min(float(d.min(dim=1).values.max()), threshold))


@register
@dataclasses.dataclass(frozen=True)
class FedTGP(Algorithm):
    lam: float = 10.0              # HtFLlib -lam 10 (MSE); the paper: 0.1 with the Euclidean distance
    loss: str = "mse"              # "mse": HtFLlib; "distance": the FedTGP paper's Euclidean term
    server_epochs: int = 100       # HtFLlib -se 100
    margin_threshold: float = 100.0  # HtFLlib -mart 100
    server_lr: float | None = None   # None: the client lr (HtFLlib)
    server_batch_size: int | None = None  # None: the client batch size (HtFLlib)
    gamma: float = 1.0             # scale of the sent prototypes (ProtoNorm Table 5)
    level: str = "high"
    name = "fedtgp"
    RULES = ("head", "proto")
    CONSTRAINTS = {"lam": Interval(0, None), "loss": Options(("mse", "distance")),
                   "server_epochs": Interval(0, None, integer=True), "margin_threshold": Interval(0, None),
                   "server_lr": Interval(0, None, low_open=True, allow_none=True),
                   "server_batch_size": Interval(1, None, integer=True, allow_none=True),
                   "gamma": Interval(0, None, low_open=True), "level": Options(("high", "low"))}

    def init_client(self, ctx, cid):
        return FedTGPClient(ctx.new_model(cid))

    def init_server(self, ctx):
        C = ctx.num_classes
        return FedTGPServer(None, torch.zeros(C, 0), torch.zeros(C, dtype=torch.bool), 0.0, [])

    def broadcast(self, ctx, server, cid):
        if not server.present.any():
            return {}
        classes = torch.nonzero(server.present).flatten()
        return {"protos": self.gamma * server.protos[classes], "classes": classes}

    def local_update(self, ctx, client, msg, data, gen):
        model, C = client.model, ctx.num_classes
        table, has = (scatter_protos(msg["protos"], msg["classes"], C) if "protos" in msg else (None, None))

        def loss_fn(xb, yb, epoch):
            logits, feats = model(xb)
            z = feats[self.level]
            loss = F.cross_entropy(logits, yb)
            if table is not None and self.lam > 0:
                target = torch.where(has[yb].unsqueeze(1), table[yb], z.detach())
                reg = F.mse_loss(z, target) if self.loss == "mse" else (z - target).norm(dim=1).mean()
                loss = loss + self.lam * reg
            return loss

        loss = sgd_epochs(ctx, model, data, gen, loss_fn)
        up = eval_class_means(model, data, C, (self.level,))[self.level].message()
        return client, {"protos": up["protos"], "classes": up["classes"], "train_loss": loss}

    def aggregate(self, ctx, server, uploads):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server
        C = ctx.num_classes
        x = torch.cat([u["protos"] for u in ups])
        y = torch.cat([u["classes"] for u in ups])
        mean, present = aggregate_protos([{**u, "counts": torch.ones(len(u["classes"]), dtype=torch.int64)}
                                          for u in ups], C, weighted=False)
        present = present | server.present
        margin = adaptive_margin(mean, present & (torch.bincount(y, minlength=C) > 0), self.margin_threshold)
        gen_model = server.generator
        if gen_model is None:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(ctx.seed, 5))
                gen_model = TrainableGlobalPrototypes(C, x.shape[1])
        else:
            gen_model = copy.deepcopy(gen_model)
        lr = self.server_lr or ctx.train.lr
        bs = self.server_batch_size or ctx.train.batch_size
        opt = torch.optim.SGD(gen_model.parameters(), lr=lr)
        all_classes = torch.arange(C)
        gen_model.train()
        losses = []
        for _ in range(self.server_epochs):
            perm = torch.randperm(len(y))
            total = 0.0
            for s in range(0, len(y), bs):
                idx = perm[s:s + bs]
                loss = margin_loss(x[idx], y[idx], gen_model(all_classes), margin)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            losses.append(total / len(y))
        gen_model.eval()
        with torch.no_grad():
            protos = gen_model(all_classes)
        return FedTGPServer(gen_model, protos, present, margin, losses)

    def server_stats(self, ctx, server):
        return {"margin": float(server.margin), "server_loss": float(server.losses[-1])} if server.losses else {}

    def predict(self, ctx, client, msg, x):
        client.model.eval()
        logits, feats = client.model(x)
        return {"head": logits, "proto": message_scores(feats[self.level], msg, ctx.num_classes)}
