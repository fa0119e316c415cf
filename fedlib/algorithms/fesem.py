"""FeSEM: Long, Xie, Zhou, Jiang, Zhang, Zhu, "Multi-Center Federated Learning: Clients Clustering for Better
Personalization", World Wide Web 26 (2023), arXiv 2005.01026; a baseline of GFPL (Table 1) and FedIC.

Clients are clustered by their models: the server keeps ``k`` centre models and runs one step of k-means per
round on the uploaded models (stochastic EM): the E-step assigns each client to the nearest centre (squared L2
distance over all parameters and float buffers), the M-step sets each centre to the mean of its clients' models
(plain, or sample-count weighted with ``weighted: true``; a centre nobody joins is kept). A client trains from the
centre of its cluster with cross-entropy and uploads its model. Inference: the client's centre (its personalised
model), as FedAvg predicts with the global model.

Round 1 has no centres yet: every client trains from the server's initial model (one initialisation for all, as
FedAvg; averaging models from different initialisations destroys them), and the centres start as the uploads of
``k`` clients drawn with the run seed (k-means' random initialisation), then the first E/M step runs. The paper
gives no cluster count for these benchmarks: ``k: 3``.

Up: the model ``w.*`` and ``num_samples``. Down: the client's centre ``w.*`` (round 1: the initial model).
"""

from __future__ import annotations

import dataclasses

import torch

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed, mean_params, sample_weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval


@register
@dataclasses.dataclass(frozen=True)
class FeSEM(FedAvg):
    k: int = 3                 # clusters (centre models)
    weighted: bool = False     # M-step: plain mean of the cluster's models
    name = "fesem"
    CONSTRAINTS = {"k": Interval(1, None, integer=True)}

    def init_server(self, ctx):
        return {**super().init_server(ctx), "centers": [],
                "assign": torch.zeros(ctx.num_clients, dtype=torch.int64, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return dict(server["centers"][int(server["assign"][cid])] if server["centers"] else server["weights"])

    def aggregate(self, ctx, server, uploads, rnd):
        ids = sorted(uploads)
        if not ids:
            return server, {}
        keys = [k for k in uploads[ids[0]] if k.startswith("w.")]
        centers = [dict(c) for c in server["centers"]]
        if not centers:  # k-means' random initialisation: k of the uploaded models
            gen = torch.Generator().manual_seed(derive_seed(rnd.seed, 16))
            centers = [{k: uploads[ids[i]][k].clone() for k in keys}
                       for i in torch.randperm(len(ids), generator=gen)[:self.k].tolist()]
        dist = torch.stack([torch.stack([sum(((uploads[c][k] - ctr[k]) ** 2).sum() for k in keys) for ctr in centers])
                            for c in ids])                                       # E-step: (clients, centres)
        near = dist.argmin(1)
        for j in range(len(centers)):                                            # M-step
            members = [uploads[c] for c, a in zip(ids, near.tolist(), strict=True) if a == j]
            if members:
                centers[j] = mean_params(members, keys, sample_weights(members, True) if self.weighted else None)
        assign = server["assign"].clone()
        assign[ids] = near.to(assign.device)
        return {**server, "centers": centers, "assign": assign}, {"clusters_used": int(near.unique().numel())}
