"""Fed-CAM: Ma, Zhou, Long, Jiang, Zhang, "Structured Federated Learning through Clustered Additive Modeling",
NeurIPS 2023 (Advances in Neural Information Processing Systems 36, proceedings paper
8668fdc7b2ddf55a0e235824c66f2eee); IFCA-CAM and FeSEM-CAM are baselines of FedIC (Table 1).

Clustered additive model (CAM): a global model g shared by all clients plus one model f_k per cluster; client i
of cluster c(i) predicts with the sum of the two models' logits::

    F_i(x) = g(x; theta_g) + f(x; theta_c(i))
    min over theta_g, theta_1..K, c of  sum_i sum_{(x, y) in D_i} CE(g(x; theta_g) + f(x; theta_c(i)), y)

Fed-CAM alternates between clustering the clients and training the global and the cluster models, each fitting
the residual the other leaves (the frozen part's logits enter the loss as a fixed offset). Two instantiations
differ only in the clustering step, and each is its clustered-FL method with the global part added:

- ``ifca_cam`` (IFCA's loss-based identity estimate, made on the sum): each client picks
  ``c(i) = argmin_k CE(g + f_k)`` over its training set, all K cluster parts being broadcast (:mod:`.ifca`);
- ``fesem_cam`` (FeSEM's distance-based k-means step on the cluster parts): the server assigns each uploaded
  cluster part to the nearest centre (squared L2 over parameters and float buffers) and sets each centre to its
  members' mean; a client receives its centre only (:mod:`.fesem`, whose aggregation is reused as is).

Aggregation: the global part is averaged over all clients that uploaded it, the cluster parts within their
cluster only (a cluster nobody joined keeps its model); ``weighted`` chooses sample-count or plain means for both.

Schedule (``schedule``): ``"alternate"`` (default) trains one part per round: odd rounds are cluster rounds
(clustering, then the cluster parts trained with g frozen), even rounds global rounds (g trained with each client's
f_c(i) frozen, assignments unchanged). ``"joint"``: every round clusters and trains both parts together on the
summed logits (one SGD optimiser per part) and uploads both. Each training phase runs the run's ``local_epochs``
of SGD (batch size, learning rate, momentum from the run's settings).

Messages (alternate schedule; joint: the union of the two rounds' messages):

- cluster round: down ``g.<name>`` (the frozen global part) and, for ``ifca_cam``, all K cluster parts
  ``c<j>.<name>``, for ``fesem_cam`` the client's centre ``w.<name>`` (round 1: the common initial cluster part);
  up the trained cluster part ``w.<name>``, ``num_samples`` and, for ``ifca_cam``, ``cluster`` (c(i));
- global round: down ``g.<name>`` and the client's cluster part ``w.<name>`` (frozen); up the trained ``g.<name>``
  and ``num_samples``.

Inference: the client's additive model g + f_c(i) from the next round's broadcast: ``ifca_cam`` uses the cluster
the client chose in its last cluster round (the one the server recorded), ``fesem_cam`` the centre the server
assigned it; a client never assigned uses cluster 0. Feature levels (plots) are the global part's.

Defaults: ``k: 3`` (as IFCA and FeSEM in this suite, not a value taken from the paper); ``weighted`` as the
underlying method here (``ifca_cam``: true, ``fesem_cam``: false); ``schedule: "alternate"``. Initialisation: g
starts from the server's initial model (FedAvg's); the cluster parts of ``ifca_cam`` from K different random
initialisations (``derive_seed(run seed, 21, j)``), those of ``fesem_cam`` from one common initialisation (j = 0)
with the centres drawn from K uploads of the first round, as FeSEM does.

Simplifications: g and every f_k are the run's whole backbone (the paper's CAM is model-agnostic; no split into
shared and cluster-specific layers); the alternation is one round per part, cluster parts first (so that the first
global round has assignments); the frozen part runs in eval mode (BatchNorm running statistics, no dropout) and is
not updated; the identity loss of ``ifca_cam`` is evaluated in eval mode on the whole local training set before
training (ties to the lowest index); the paper's automatic choice of the effective number of clusters
(sparsification) is not implemented: K is fixed; every client runs one architecture, as FedAvg.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, joint_sgd_epochs, mean_params, model_message, sample_weights, weights
from fedlib.algorithms.fesem import FeSEM
from fedlib.algorithms.ifca import IFCA, argmin_first, cluster_prefix, cluster_weights, eval_logits, seeded_model
from fedlib.validation import BOOL, Interval, Options

CAM_INIT = 21  # derive_seed purpose tag of the cluster parts' initialisations


def part(client: dict, msg: dict, prefix: str) -> dict:
    """The ``state_dict`` under ``prefix`` in ``msg`` (the client's own model supplies the integer buffers)."""
    return {**client["model"], **{k[len(prefix):]: v for k, v in msg.items() if k.startswith(prefix)}}


class Additive(nn.Module):
    """``x -> (g(x) + f(x), g's feature levels)``: a clustered additive model as one module."""

    def __init__(self, g: nn.Module, f: nn.Module):
        super().__init__()
        self.g, self.f = g, f
        self.feature_dims = g.feature_dims

    def forward(self, x):
        logits, feats = self.g(x)
        return logits + self.f(x)[0], feats


@dataclasses.dataclass(frozen=True)
class FedCAM(Algorithm):
    """The round both instantiations share; subclasses give the clustering step (module docstring)."""

    k: int = 3                    # clusters (cluster parts)
    weighted: bool = True         # sample-count means (global part and within clusters); false: plain means
    schedule: str = "alternate"   # "alternate": one part per round (odd: cluster parts, even: global); "joint"
    CONSTRAINTS = {"k": Interval(1, None, integer=True), "weighted": BOOL,
                   "schedule": Options(("alternate", "joint"))}
    UPLOAD = {"g.*": "float[...]", "w.*": "float[...]", "num_samples": "int"}
    BROADCAST = {"g.*": "float[...]", "w.*": "float[...]"}

    def trains(self, rnd) -> tuple[bool, bool]:
        """``(cluster parts, global part)``: which parts round ``rnd`` trains (and clusters, with the first)."""
        if self.schedule == "joint":
            return True, True
        odd = rnd.index % 2 == 1
        return odd, not odd

    # -- server ----------------------------------------------------------------------------
    def init_server(self, ctx):
        return {"g": model_message(ctx.new_model(None), "g."),
                "assign": torch.zeros(ctx.num_clients, dtype=torch.int64, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return {**server["g"], **self.cluster_message(server, cid, rnd)}

    def cluster_message(self, server, cid, rnd) -> dict:
        """The cluster part(s) client ``cid`` receives in round ``rnd``."""
        raise NotImplementedError

    def aggregate(self, ctx, server, uploads, rnd):
        if not uploads:
            return server, {}
        new, metrics = dict(server), {}
        g_msgs = [up for up in uploads.values() if any(k.startswith("g.") for k in up)]
        if g_msgs:  # the global part: over all clients
            new["g"] = mean_params(g_msgs, server["g"], sample_weights(g_msgs, self.weighted))
        f_ups = {c: {k: v for k, v in up.items() if not k.startswith("g.")}
                 for c, up in uploads.items() if any(k.startswith("w.") for k in up)}
        if f_ups:  # the cluster parts: within clusters
            new, metrics = self.aggregate_clusters(ctx, new, f_ups, rnd)
        return new, metrics

    def aggregate_clusters(self, ctx, server, uploads, rnd) -> tuple[dict, dict]:
        """The clustering method's server step on the cluster-part uploads (``w.*``, ``num_samples``, ...)."""
        raise NotImplementedError

    # -- client ----------------------------------------------------------------------------
    def init_client(self, ctx, cid):
        return {"model": weights(self.build(ctx, cid))}

    def choose(self, ctx, cid, client, msg, data, rnd, g: nn.Module) -> tuple[int | None, dict]:
        """``(cluster id or None, cluster part state_dict)`` the client trains or freezes this round.
        Default: the part the server sent (``w.*``); no id on the client."""
        return None, part(client, msg, "w.")

    def cluster_upload(self, j: int | None) -> dict:
        """Extra upload of a round that trains the cluster part (IFCA-CAM: the chosen cluster)."""
        return {}

    def batch_support(self):
        return "two modules (the global part and the chosen cluster part), which of them trains depending on the round"

    def local_update(self, ctx, cid, client, msg, data, rnd):
        train_f, train_g = self.trains(rnd)
        g = self.module(ctx, cid, part(client, msg, "g."), role="global")
        j, f_state = self.choose(ctx, cid, client, msg, data, rnd, g)
        f = self.module(ctx, cid, f_state)
        for m, on in ((g, train_g), (f, train_f)):
            if not on:
                m.eval()  # the frozen part: a fixed offset of the logits

        def logits(m, on, xb):
            if on:
                return m(xb)[0]
            with torch.no_grad():
                return m(xb)[0]

        def loss_fn(xb, yb, epoch):
            return F.cross_entropy(logits(g, train_g, xb) + logits(f, train_f, xb), yb)

        lr = ctx.train.round_lr(rnd)
        parts = [(m, lr) for m, on in ((g, train_g), (f, train_f)) if on]
        loss = joint_sgd_epochs(ctx, parts, data, rnd.generator(cid), loss_fn)
        up = {"num_samples": len(data)}
        if train_g:
            up.update(model_message(g, "g."))
        if train_f:
            up.update(model_message(f))
            up.update(self.cluster_upload(j))
        state = client if j is None else {**client, "cluster": j}
        return state, up, {"train_loss": loss}

    # -- inference -------------------------------------------------------------------------
    def predict_state(self, client, msg) -> dict:
        """The cluster part the client predicts with (from the next round's broadcast)."""
        return part(client, msg, "w.")

    def predict_model(self, ctx, cid, client, msg, fresh=False):
        g = self.module(ctx, cid, part(client, msg, "g."), role="global", fresh=fresh)
        f = self.module(ctx, cid, self.predict_state(client, msg), fresh=fresh)
        model = Additive(g, f)
        model.eval()
        return model


@register
@dataclasses.dataclass(frozen=True)
class IfcaCAM(FedCAM):
    name = "ifca_cam"
    UPLOAD = {**FedCAM.UPLOAD, "cluster?": "int"}
    BROADCAST = {**FedCAM.BROADCAST, "c*": "float[...]"}

    def init_server(self, ctx):
        return {**super().init_server(ctx),
                "clusters": [model_message(seeded_model(ctx, CAM_INIT, j)) for j in range(self.k)]}

    def cluster_message(self, server, cid, rnd):
        if self.trains(rnd)[0]:  # a clustering round: every cluster part, for the identity estimate
            return {cluster_prefix(j) + k[2:]: v for j, w in enumerate(server["clusters"]) for k, v in w.items()}
        return dict(server["clusters"][int(server["assign"][cid])])

    def init_client(self, ctx, cid):
        return {**super().init_client(ctx, cid), "cluster": 0}

    def choose(self, ctx, cid, client, msg, data, rnd, g):
        if not self.trains(rnd)[0]:  # a global round: the cluster part of the client's recorded cluster
            return int(client["cluster"]), part(client, msg, "w.")
        base = eval_logits(g, data.x)
        states = [cluster_weights(client, msg, j) for j in range(self.k)]
        losses = [float(F.cross_entropy(base + eval_logits(self.module(ctx, cid, s), data.x), data.y))
                  for s in states]
        j = argmin_first(losses)  # IFCA's identity estimate on the sum g + f_j
        return j, states[j]

    def cluster_upload(self, j):
        return {"cluster": j}

    def aggregate_clusters(self, ctx, server, uploads, rnd):
        inner, metrics = IFCA(k=self.k, weighted=self.weighted).aggregate(ctx, {"clusters": server["clusters"]},
                                                                          uploads, rnd)
        assign = server["assign"].clone()
        for c, up in uploads.items():
            assign[c] = int(up["cluster"])
        return {**server, "clusters": inner["clusters"], "assign": assign}, metrics

    def predict_state(self, client, msg):
        if any(k.startswith("w.") for k in msg):
            return super().predict_state(client, msg)
        return cluster_weights(client, msg, int(client["cluster"]))


@register
@dataclasses.dataclass(frozen=True)
class FesemCAM(FedCAM):
    weighted: bool = False  # FeSEM's M-step: plain means
    name = "fesem_cam"

    def init_server(self, ctx):
        return {**super().init_server(ctx), "init": model_message(seeded_model(ctx, CAM_INIT, 0)), "centers": []}

    def cluster_message(self, server, cid, rnd):
        return dict(server["centers"][int(server["assign"][cid])] if server["centers"] else server["init"])

    def aggregate_clusters(self, ctx, server, uploads, rnd):
        inner, metrics = FeSEM(k=self.k, weighted=self.weighted).aggregate(
            ctx, {"centers": server["centers"], "assign": server["assign"], "weights": {}}, uploads, rnd)
        return {**server, "centers": inner["centers"], "assign": inner["assign"]}, metrics
