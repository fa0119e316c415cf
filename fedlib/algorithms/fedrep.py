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

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Phase, weights
from fedlib.algorithms.fedper import FedPer
from fedlib.validation import Interval


@register
@dataclasses.dataclass(frozen=True)
class FedRep(FedPer):
    head_epochs: int = 10  # Collins et al.: 10 local epochs for the head
    name = "fedrep"
    CONSTRAINTS = {"head_epochs": Interval(0, None, integer=True)}

    def task(self, ctx, cid, client, msg, data, rnd):
        task = super().task(ctx, cid, client, msg, data, rnd)
        task.phases = (Phase("head", self.head_epochs), Phase("body", ctx.train.local_epochs))
        return task

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd, phase="body"):
        return super().batch_loss(out, y, epoch, extras, teachers, params, rnd)  # cross-entropy in both phases

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, self.upload(model, data), {"train_loss": metrics["train_loss"]}
