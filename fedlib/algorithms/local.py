"""Local: every client trains its own model on its own data; nothing is communicated.

The lower reference of personalised FL (FedProto Table 1, PFLlib "Local").
Messages: none in either direction. Inference: the client's own head.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, sgd_epochs


@dataclasses.dataclass
class LocalClient:
    model: object


@register
@dataclasses.dataclass(frozen=True)
class Local(Algorithm):
    name = "local"

    def init_client(self, ctx, cid):
        return LocalClient(ctx.new_model(cid))

    def init_server(self, ctx):
        return None

    def broadcast(self, ctx, server, cid):
        return {}

    def local_update(self, ctx, client, msg, data, gen):
        model = client.model

        def loss_fn(xb, yb, epoch):
            return F.cross_entropy(model(xb)[0], yb)

        loss = sgd_epochs(ctx, model, data, gen, loss_fn)
        return client, {"train_loss": loss}

    def aggregate(self, ctx, server, uploads):
        return server

    def predict(self, ctx, client, msg, x):
        client.model.eval()
        return {"head": client.model(x)[0]}
