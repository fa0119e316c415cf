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
from fedlib.algorithms.base import (Algorithm, head_message, load_head_message, mean_params, sample_weights,
                                   sgd_epochs, weights)
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

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.module(ctx, cid, client["model"])
        load_head_message(model, msg)
        loss = sgd_epochs(ctx, model, data, rnd.generator(cid), lambda xb, yb, epoch: F.cross_entropy(model(xb)[0], yb),
                          lr=ctx.train.round_lr(rnd))
        return {"model": weights(model)}, {**head_message(model), "num_samples": len(data)}, {"train_loss": loss}

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        keys = [k for k in msgs[0] if k.startswith("head.")]
        return {"head": mean_params(msgs, keys, sample_weights(msgs, self.weighted))}, {}

    def predict_model(self, ctx, cid, client, msg, fresh=False):
        model = self.module(ctx, cid, client["model"], fresh=fresh)
        load_head_message(model, msg)  # the client's own extractor with the global head
        model.eval()
        return model
