"""LG-FedAvg: Liang et al., "Think Locally, Act Globally: Federated Learning with Local and
Global Representations", arXiv 2001.01523 (2020), as run by HtFLlib (ProtoNorm Table 1 baseline;
docs/protonorm.md).

Clients keep their own feature extractors (of any architecture); only the classifier head
``model.head`` is shared, which every model of a family has in the same shape (Linear(d, C)).
Each round a client loads the global head, trains its whole model with cross-entropy, and
uploads its head; the server averages the heads weighted by the clients' sample counts
(HtFLlib's ``uploaded_weights``; ``weighted: false`` gives the plain mean) and sends the
result back. Inference: the client's own extractor with the global head.

Up: ``head.<j>.<param>`` (the head's parameters: j numbers the head's parametrised layers, so
``Linear`` and ``Sequential(Dropout, Linear)`` heads give the same names), ``num_samples``,
``train_loss``. Down: the averaged ``head.<j>.<param>``; nothing before the first aggregation
(round 1 trains every client's own initial head, as in HtFLlib). LG-FedAvg has no extra
hyperparameters (ProtoNorm Table 6).
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, head_message, head_params, mean_params, sample_weights, weights
from fedlib.models import member
from fedlib.validation import BOOL


@register
@dataclasses.dataclass(frozen=True)
class LGFedAvg(Algorithm):
    weighted: bool = True  # HtFLlib: heads weighted by client sample counts
    name = "lgfedavg"
    CONSTRAINTS = {"weighted": BOOL}
    UPLOAD = {"head.*": "float[...]", "num_samples": "int"}
    BROADCAST = {"head.*": "float[...]"}

    def init_server(self, ctx):
        return {"head": {}}  # empty before the first aggregation

    def broadcast(self, ctx, server, cid, rnd):
        return dict(server["head"])

    def task(self, ctx, cid, client, msg, data, rnd):
        return LocalTask(self.predict_weights(ctx, cid, client, msg))

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        return F.cross_entropy(out[0], y), {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, {**head_message(model), "num_samples": len(data)}, metrics

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        keys = [k for k in msgs[0] if k.startswith("head.")]
        return {"head": mean_params(msgs, keys, sample_weights(msgs, self.weighted))}, {}

    def predict_weights(self, ctx, cid, client, msg):
        """The client's own model with the global head (its starting point and its predicting model)."""
        names = self.head_names(ctx, cid, client["model"])
        return {**client["model"], **{names[k]: v for k, v in msg.items() if k in names}}

    def head_names(self, ctx, cid, state: dict) -> dict:
        """``{head.<j>.<param>: state_dict key}`` of client ``cid``'s architecture (kept per architecture)."""
        key = (self, "head_names", member(ctx.model_name, cid))
        if key not in ctx.pool:
            model = self.module(ctx, cid, state)
            names = {id(p): n for n, p in model.named_parameters()}
            ctx.pool[key] = {k: names[id(p)] for k, p in head_params(model)}
        return ctx.pool[key]
