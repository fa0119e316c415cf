"""Local: every client trains its own model on its own data; nothing is communicated.

The lower reference of personalised FL (FedProto Table 1, PFLlib "Local").
Messages: none in either direction. Inference: the client's own head.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, weights


@register
@dataclasses.dataclass(frozen=True)
class Local(Algorithm):
    name = "local"

    def init_server(self, ctx):
        return {}

    def broadcast(self, ctx, server, cid, rnd):
        return {}

    def task(self, ctx, cid, client, msg, data, rnd):
        return LocalTask(client["model"])

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        return F.cross_entropy(out[0], y), {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, {}, metrics

    def aggregate(self, ctx, server, uploads, rnd):
        return server, {}
