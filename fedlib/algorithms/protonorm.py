"""ProtoNorm: Lee, Shin, Choi, "Heterogeneous Federated Learning with Prototype Alignment
and Upscaling", arXiv 2507.04310 (2025).

Clients keep their own models (of any architecture) and share only prototypes. The
server averages each class's local prototypes (plain mean, Eq. 7: no class counts
leave the clients) and runs Prototype Alignment (Alg. 1, :func:`fedlib.prototypes.thomson_align`),
sending unit-norm prototypes c_hat. Clients apply Prototype Upscaling: they regress
their features onto gamma * c_hat (Eq. 15) next to cross-entropy (Eq. 4), then upload
the class means of their features from a pass after training (Eq. 2).

Up: ``protos`` (k, d), ``classes`` (k,). Down: ``protos`` (k', d) unit-norm, ``classes``.
The PA iterations of the round (ProtoNorm Fig. 3a) are a server metric in the round log.
Inference rules: ``proto`` = nearest unit-norm global prototype (the official code;
equivalent to argmax <f(x), c_hat_j>), ``proto_local`` = nearest of the client's own
local prototypes (Eq. 6 as printed), ``head`` = the client's classifier.

Choices (docs/protonorm.md; paper vs code, defaults named):
- ``lam=1.0``: the paper ("as in FedProto"); the official code's default is 10 (item 3).
- ``loss="mse"``: per-sample ``MSELoss(f(x), gamma c_hat_y)`` (mean over batch and
  dimensions) as the code; ``"distance"``: Eq. 5/15 as printed, the sum over the batch's
  classes of the Euclidean distance between the batch class mean and gamma c_hat_j (item 2).
- ``gamma=100.0``: the paper's CIFAR-10 value (code default 80; item 4); gamma = 1 turns
  upscaling off.
- ``align=True``: PA; ``False`` sends the L2-normalised means (ProtoNorm without PA).
- PA settings: lr 0.1, momentum 0.9, x0.95 every 10 iterations, at most 500 iterations,
  the code's stopping rule (item 6); velocity restarts at 0 each round (item 7).
- Round 1 trains on CE only: nothing is initialised before the first upload (item 5).
- Local prototypes: an eval-mode pass over all the client's training samples after
  training (the code skips a last partial batch of 32; we keep every sample).
Training settings of the paper (plain SGD lr 0.01, batch 32, 1 epoch) belong to the
experiment config.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import weights
from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.prototypes import (ProtoTable, message_scores, nearest_prototype_scores, proto_regulariser,
                               thomson_align)
from fedlib.validation import BOOL, Interval, Options


def batch_distance_loss(z: torch.Tensor, y: torch.Tensor, targets: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
    """Eqs. 5/15 as printed: sum over the batch's classes j (with a global prototype) of
    ||mean of z over class j - target_j||."""
    loss = z.new_zeros(())
    for c in torch.unique(y):
        if has[c]:
            loss = loss + (z[y == c].mean(0) - targets[c]).norm()
    return loss


@register
@dataclasses.dataclass(frozen=True)
class ProtoNorm(PrototypeMethod):
    lam: float = 1.0          # weight of the prototype regulariser (paper; code default 10)
    gamma: float = 100.0      # Prototype Upscaling factor (paper: CIFAR-10 100, CIFAR-100 200)
    align: bool = True        # Prototype Alignment on the server
    loss: str = "mse"         # "mse": the code's per-sample MSE; "distance": Eq. 5/15 as printed
    level: str = "high"
    pa_lr: float = 0.1
    pa_momentum: float = 0.9
    pa_decay: float = 0.95
    pa_max_iter: int = 500
    pa_patience: int = 10
    record_pa: bool = False   # keep every PA iteration's pairwise distances (Fig. 4)
    name = "protonorm"
    SWEEPABLE = ("lam", "gamma")  # the loss weight (arithmetic); the upscaling (each run's task)
    RULES = ("head", "proto_local", "proto")
    CONSTRAINTS = {"lam": Interval(0, None), "gamma": Interval(0, None, low_open=True), "align": BOOL,
                   "loss": Options(("mse", "distance")), "level": Options(("high", "low")),
                   "pa_lr": Interval(0, None, low_open=True), "pa_momentum": Interval(0, 1, high_open=True),
                   "pa_decay": Interval(0, 1, low_open=True), "pa_max_iter": Interval(1, None, integer=True),
                   "pa_patience": Interval(1, None, integer=True), "record_pa": BOOL}
    UPLOAD = {"protos": "float[k, d]", "classes": "int[k]"}
    send_counts = False  # Eq. 7 is a plain mean: no class counts leave the clients

    def regulariser(self, z, y, table, present):
        if self.loss == "mse":
            return self.lam * proto_regulariser(z, y, table, present)
        return self.lam * batch_distance_loss(z, y, table, present)

    def target_table(self, table):
        return self.gamma * table  # Prototype Upscaling (Eq. 15)

    def client_state(self, model, upload, ctx):
        local = ProtoTable.from_rows(upload["protos"], upload["classes"], ctx.num_classes)  # Eq. 2, after training
        return {"model": weights(model), "local_protos": local.protos, "local_present": local.present}

    def init_server(self, ctx):
        return {**super().init_server(ctx), "history": []}

    def refine(self, ctx, server, uploads, rnd):
        mean, present = server["protos"], server["present"]
        classes = torch.nonzero(present).flatten()
        iterations, history = 0, []
        if self.align:
            aligned, iterations, history = thomson_align(
                mean[classes], lr=self.pa_lr, momentum=self.pa_momentum, decay=self.pa_decay,
                max_iter=self.pa_max_iter, patience=self.pa_patience, record=self.record_pa)
            if self.record_pa:  # entry 0: the normalised means before the first PA step
                start = F.normalize(mean[classes].double(), dim=1)
                history = [torch.cdist(start, start).float(), *history]
        else:
            aligned = F.normalize(mean[classes], dim=1)
        protos = torch.zeros_like(mean)
        protos[classes] = aligned
        return {"protos": protos, "present": present, "history": history}, {"pa_iterations": int(iterations)}

    def batch_support(self):
        return "the 'distance' loss loops over the batch's classes" if self.loss == "distance" else None

    def scores(self, ctx, cid, client, msg, logits, feats):
        z = feats[self.level]
        out = {"head": logits, "proto": message_scores(z, msg, ctx.num_classes)}
        if "local_protos" in client:
            out["proto_local"] = nearest_prototype_scores(z, client["local_protos"], client["local_present"])
        else:  # before the first local update
            out["proto_local"] = torch.full_like(logits, float("-inf"))
        return out
