"""GFPL: Lu, He, Li, Wang, Gong, "GFPL: Generative Federated Prototype Learning for
Resource-Constrained and Data-Imbalanced Vision Task", arXiv 2602.21873 (2026). No official code.

Every client trains its own model and never sends it. The model is the extractor f, a CE head
g (the backbone's ``head``) and a projection l = Linear(d, d) whose L2-normalised output h is
pulled to a fixed simplex ETF Z (Eqs. 9-11) by the dot-regression loss (Eq. 12), so the local
loss is the dual-classifier objective (Eq. 13)

    L_train = lam * 1/2 (h . z_y - 1)^2 + CE(g(f(x)), y)           (batch means; lam = 2).

Every ``every`` rounds from round ``start`` (S_T = t_1 = 10) the prototype interaction runs in
the same round, after local training (``reply`` / ``receive``):

1. each client fits, per class it holds, a diagonal Gaussian mixture of ``n_components`` (n = 4)
   to its training features f(x) (eval mode; scikit-learn EM) and uploads the components;
2. the server fuses each class's components over the clients by Algorithm 1 (complete linkage
   under the Bhattacharyya distance, Eq. 8, threshold ``threshold`` = S_C = 1; moment matching);
3. each client receives the fused components of its classes, samples ``per_class`` (r = 16)
   pseudo-features per class, and retrains g and l on them with f frozen (Eq. 14, the same loss).

Inference: ``head`` (argmax g, the default; the paper does not say, notes A5) and ``etf``
(argmax_k z_k . h).

Up, in an interaction round only: ``means`` (m, d), ``vars`` (m, d), ``weights`` (m,) (mixture
weight x class count: n (2d + 1) floats per class, the paper's P_ij plus the count the fusion
weights need) and ``classes`` (m,). Down: the ETF ``etf`` (C, d) once per client (the paper does
not count it); in an interaction round the fused components of the client's classes (reply).
Nothing in other rounds.

Choices where the paper is silent (docs/gfpl.md):
- fusion weight of a component = its mixture weight x its class count (notes A4); the seed of a
  cluster is the heaviest component; ``add: sequential`` adds the closest qualifying component
  at a time (complete linkage kept), ``batch`` reads Algorithm 1 line 5 literally;
- EM: k-means init, at most 100 iterations, tol 1e-3, variance floor ``reg_covar`` 1e-3 (dead
  ReLU dimensions would give zero variances and infinite distances);
- ``retrain: both`` updates g and l (the text, Eq. 14), ``projection`` only l (Algorithm 2 line
  17); ``retrain_epochs`` 1 pass over the pseudo-features in batches of the run's batch size,
  with the run's lr and momentum;
- ``pseudo_classes: own`` samples the client's own classes (Algorithm 2 line 7), ``all`` every
  class the server holds;
- ``same_init``: every client starts from one initialisation (the "unified global model", §3.1;
  a model family keeps one initialisation per architecture seed);
- ablations: ``dcs: false`` drops l and the ETF (CE only; PFG retrains g), ``pfg: false`` never
  communicates; both false is Local.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib import mixtures
from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, derive_seed, weights
from fedlib.validation import BOOL, ConfigError, Interval, Options


class GFPLNet(nn.Module):
    """A backbone plus the projection l: ``forward`` returns the backbone's ``(logits, features)``
    with ``features["proj"]`` = h = normalize(l(f(x))) added."""

    def __init__(self, backbone: nn.Module, level: str):
        super().__init__()
        self.backbone = backbone
        self.level = level
        d = backbone.feature_dims[level]
        self.proj = nn.Linear(d, d)
        self.feature_dims = {**backbone.feature_dims, "proj": d}

    @property
    def head(self) -> nn.Module:
        """g, the backbone's classifier (not registered twice: the state holds it once)."""
        return self.backbone.head

    def project(self, f: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.proj(f), dim=1, eps=1e-12)

    def forward(self, x):
        logits, feats = self.backbone(x)
        return logits, {**feats, "proj": self.project(feats[self.level])}


def dot_regression(h: torch.Tensor, etf: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Eq. 12, the batch mean of 1/2 (h . z_y - 1)^2 (``h`` unit rows, ``etf`` (C, d))."""
    return 0.5 * ((h * etf[y]).sum(1) - 1).pow(2).mean()


@register
@dataclasses.dataclass(frozen=True)
class GFPL(Algorithm):
    lam: float = 2.0               # DR weight (Eq. 13; Table 3)
    n_components: int = 4          # Gaussian components per class and client (§5.1; Fig. 3b: best 8)
    threshold: float = 1.0         # S_C, Bhattacharyya merge threshold (Table 3)
    per_class: int = 16            # r, pseudo-features per class (§5.1)
    start: int = 10                # t_1, first interaction round (§5.1)
    every: int = 10                # S_T, rounds between interactions (§5.1)
    retrain_epochs: int = 1        # passes over the pseudo-features (not given; notes A6)
    retrain: str = "both"          # "both": g and l (Eq. 14); "projection": l only (Algorithm 2 line 17)
    pseudo_classes: str = "own"    # "own" (Algorithm 2 line 7) or "all" (the text's "each class j in C")
    reg_covar: float = 1e-3        # variance floor of EM (notes A3)
    add: str = "sequential"        # Algorithm 1: "sequential" complete linkage or "batch" (line 5 literally)
    clamp: bool = False            # clamp pseudo-features at 0 like post-ReLU features (notes A21; not in the paper)
    dcs: bool = True               # dual-classifier structure (l + ETF + DR); false: CE only
    pfg: bool = True               # prototype interaction and pseudo-feature retraining; false: no communication
    same_init: bool = True         # one initial model for every client (§3.1)
    level: str = "high"            # the extractor output f(x)
    name = "gfpl"
    RULES = ("head", "etf")
    CONSTRAINTS = {"lam": Interval(0, None), "n_components": Interval(1, None, integer=True),
                   "threshold": Interval(0, None), "per_class": Interval(1, None, integer=True),
                   "start": Interval(1, None, integer=True), "every": Interval(1, None, integer=True),
                   "retrain_epochs": Interval(0, None, integer=True), "retrain": Options(("both", "projection")),
                   "pseudo_classes": Options(("own", "all")), "reg_covar": Interval(0, None, low_open=True),
                   "add": Options(("sequential", "batch")), "clamp": BOOL, "dcs": BOOL, "pfg": BOOL,
                   "same_init": BOOL, "level": Options(("high", "low"))}
    UPLOAD = {"means?": "float[m, d]", "vars?": "float[m, d]", "weights?": "float[m]", "classes?": "int[m]"}
    BROADCAST = {"etf?": "float[C, d]"}
    REPLY = {"means": "float[m, d]", "vars": "float[m, d]", "weights": "float[m]", "classes": "int[m]"}

    def __post_init__(self):
        super().__post_init__()
        if not self.dcs and self.retrain == "projection":
            raise ConfigError("algorithm (gfpl).retrain", self.retrain,
                              "'both' when dcs is false (without the projection only g can be retrained)")

    def interacts(self, rnd) -> bool:
        """Whether round ``rnd`` has the prototype interaction (t >= t_1 and t mod S_T = 0)."""
        return self.pfg and rnd.index >= self.start and rnd.index % self.every == 0

    # -- models ------------------------------------------------------------------------
    def build(self, ctx, cid, role="model"):
        from fedlib.models import build_model, member

        backbone = build_model(member(ctx.model_name, cid), ctx.input_shape, ctx.num_classes, **ctx.model_args)
        return GFPLNet(backbone, self.level)

    def init_client(self, ctx, cid):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(ctx.seed, 3, 0 if self.same_init else cid))
            net = self.build(ctx, cid)
        d = net.feature_dims[self.level]
        return {"model": weights(net.to(ctx.device)), "etf": torch.zeros(ctx.num_classes, d, device=ctx.device)}

    # -- server --------------------------------------------------------------------------
    def init_server(self, ctx):
        d = self.build(ctx, None).feature_dims[self.level]
        empty = torch.zeros(0, d, device=ctx.device)
        return {"etf": mixtures.simplex_etf(d, ctx.num_classes, derive_seed(ctx.seed, 15)).to(ctx.device),
                "has_etf": torch.zeros(ctx.num_clients, dtype=torch.bool, device=ctx.device),
                "held": torch.zeros(ctx.num_clients, ctx.num_classes, dtype=torch.bool, device=ctx.device),
                "means": empty, "vars": empty, "weights": empty[:, 0],
                "classes": torch.zeros(0, dtype=torch.int64, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return {} if bool(server["has_etf"][cid]) or not self.dcs else {"etf": server["etf"]}

    def aggregate(self, ctx, server, uploads, rnd):
        server = dict(server)
        has = server["has_etf"].clone()
        has[list(uploads)] = True
        server["has_etf"] = has
        ups = [(cid, uploads[cid]) for cid in sorted(uploads) if "means" in uploads[cid]]
        if not ups:
            return server, {}
        held = server["held"].clone()
        for cid, u in ups:
            held[cid] = False
            held[cid, u["classes"]] = True
        fused, counts = mixtures.fuse([u for _, u in ups], self.threshold, self.add)
        server.update(held=held, **fused)
        metrics = {"components": counts["components"], "clusters": counts["clusters"],
                   "merge_rate": 1 - counts["clusters"] / counts["components"]}
        return server, metrics

    def reply(self, ctx, server, cid, rnd):
        if not self.interacts(rnd) or not len(server["classes"]):
            return None
        keep = server["held"][cid][server["classes"]] if self.pseudo_classes == "own" else \
            torch.ones_like(server["classes"], dtype=torch.bool)
        return {k: server[k][keep] for k in ("means", "vars", "weights", "classes")}

    # -- client --------------------------------------------------------------------------
    def _loss(self, h: torch.Tensor, logits: torch.Tensor, y: torch.Tensor, etf: torch.Tensor) -> tuple:
        """Eq. 13: ``(CE(g) + lambda DR(h, ETF), parts)``; CE alone without the dual classifier."""
        ce = F.cross_entropy(logits, y)
        if not self.dcs:
            return ce, {"ce": ce.detach()}
        dr = dot_regression(h, etf, y)
        return ce + self.lam * dr, {"ce": ce.detach(), "dr": dr.detach()}

    def task(self, ctx, cid, client, msg, data, rnd):
        client = {**client, "etf": msg["etf"]} if "etf" in msg else client
        return LocalTask(weights=client["model"], extras={"etf": client["etf"]}, memo={"client": client})

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        logits, feats = out
        return self._loss(feats["proj"], logits, y, extras["etf"])

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        up = {}
        if self.interacts(rnd):  # Eqs. 4-6: the class mixtures of the trained extractor's features
            model.eval()
            with torch.no_grad():
                z = torch.cat([model.backbone(data.x[s:s + 1024])[1][self.level] for s in range(0, len(data), 1024)])
            comps = mixtures.fit_class_mixtures(z.cpu().numpy(), data.y.cpu().numpy(), self.n_components,
                                                derive_seed(rnd.seed, 13, rnd.index, cid) % (2 ** 31),
                                                self.reg_covar)
            up = {k: v.to(z.device) for k, v in comps.items()}
        return {**task.memo["client"], "model": weights(model)}, up, metrics

    def receive(self, ctx, cid, client, msg, data, rnd):
        """Pseudo-feature generation and retraining with the extractor frozen (Eq. 14)."""
        if self.retrain_epochs == 0:
            return client, {}
        gen = torch.Generator().manual_seed(derive_seed(rnd.seed, 14, rnd.index, cid))
        feats, labels = mixtures.sample(msg["means"], msg["vars"], msg["weights"], msg["classes"],
                                        self.per_class, gen)
        if self.clamp:
            feats = feats.clamp(min=0)
        net = self.module(ctx, cid, client["model"])
        net.train()
        modules = [net.proj] if self.retrain == "projection" else [net.head] + ([net.proj] if self.dcs else [])
        params = [p for m in modules for p in m.parameters()]
        t = ctx.train
        opt = torch.optim.SGD(params, lr=t.round_lr(rnd), momentum=t.momentum, weight_decay=t.weight_decay)
        total, steps = 0.0, 0
        for _ in range(self.retrain_epochs):
            perm = torch.randperm(len(labels), generator=gen).to(labels.device)
            for s in range(0, len(labels), t.batch_size):
                idx = perm[s:s + t.batch_size]
                f = feats[idx]
                h = net.project(f) if self.dcs else f
                loss, _ = self._loss(h, net.head(f), labels[idx], client["etf"])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach())
                steps += 1
        metrics = {"retrain_loss": total / max(steps, 1), "pseudo_features": len(labels)}
        return {**client, "model": weights(net)}, metrics

    # -- inference -----------------------------------------------------------------------
    def scores(self, ctx, cid, client, msg, logits, feats):
        etf = msg.get("etf", client["etf"])
        if not self.dcs:
            return {"head": logits, "etf": torch.full_like(logits, float("-inf"))}
        return {"head": logits, "etf": feats["proj"] @ etf.T}
