"""Local: every client trains its own model on its own data; nothing is communicated.

The lower reference of personalised FL (FedProto Table 1, PFLlib "Local").
Messages: none in either direction. Inference: the client's own head.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, sgd_epochs, weights


@register
@dataclasses.dataclass(frozen=True)
class Local(Algorithm):
    name = "local"

    def init_server(self, ctx):
        return {}

    def broadcast(self, ctx, server, cid, rnd):
        return {}

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.module(ctx, cid, client["model"])
        loss = sgd_epochs(ctx, model, data, rnd.generator(cid), lambda xb, yb, epoch: F.cross_entropy(model(xb)[0], yb))
        return {"model": weights(model)}, {}, {"train_loss": loss}

    def aggregate(self, ctx, server, uploads, rnd):
        return server, {}
