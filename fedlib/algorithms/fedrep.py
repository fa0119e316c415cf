"""FedRep: Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for
Personalized Federated Learning", ICML 2021, arXiv 2102.07078; a GFPL Table 1 baseline.

Clients share the representation (everything outside ``model.head``) and keep their heads. Each
round a client loads the global representation, trains its head for ``head_epochs`` epochs with
the representation frozen, then the representation for the run's ``local_epochs`` with the head
frozen (Algorithm 1), and uploads the representation; the server averages the representations
(sample-count weights, ``weighted: false``: plain mean). Inference: the client's head on the
global representation.

Up: the representation ``w.*`` and ``num_samples``. Down: the global representation. Both phases
use the run's SGD settings and one batch-order generator; the paper's default of 10 head epochs.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import head_then_body, weights
from fedlib.algorithms.fedper import FedPer
from fedlib.validation import Interval


@register
@dataclasses.dataclass(frozen=True)
class FedRep(FedPer):
    head_epochs: int = 10  # Collins et al.: 10 local epochs for the head
    name = "fedrep"
    CONSTRAINTS = {"head_epochs": Interval(0, None, integer=True)}

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.module(ctx, cid, self.task(ctx, cid, client, msg, data, rnd).weights)
        gen, lr = rnd.generator(cid), ctx.train.round_lr(rnd)

        def loss_fn(xb, yb, epoch):
            return F.cross_entropy(model(xb)[0], yb)

        losses = head_then_body(ctx, model, data, gen, lr, [("head", self.head_epochs, loss_fn),
                                                            ("body", ctx.train.local_epochs, loss_fn)])
        return {"model": weights(model)}, self.upload(model, data), {"train_loss": losses["body"]}
