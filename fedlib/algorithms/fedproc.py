"""FedProc: Mu et al., "FedProc: Prototypical Contrastive Federated Learning on
Non-IID Data", Future Gener. Comput. Syst. 143, 2023.

Clients train the global model with the hybrid loss

    a_r * CE + (1 - a_r) * L_con(local features, all global prototypes),

a_r = r / ``ramp_rounds`` for the 0-based round index r < ramp_rounds, else 1, and CE
alone in round 0 (FedMPS code: ``alpha = round / 100``, so the contrastive term dominates
early and fades out). They upload the model and the class means of their features; the
server averages the models weighted by data size and the prototypes per class (plain
mean over the clients holding the class), as the FedMPS code does (docs/fedmps.md).

Down: ``w.*`` (the global model) and, once they exist, ``protos`` (k', d) and ``classes``
(k',) for every class with a global prototype. The schedule's r is the code's
``global_round`` (aggregations done so far), i.e. the 0-based round index of the round
record. Up: ``w.*``, ``protos`` (k, d), ``classes`` (k,),
``counts`` (k,), ``num_samples``: model + prototypes, FedMPS Table V's 1,247,200 on
CIFAR-10 (N = 20). Inference: ``head`` = the global model's classifier (the FedMPS
evaluation of FedProc, "w/o protos"); ``proto`` = nearest global prototype to the global
model's features, a diagnostic.

Choices:
- ``contrast="supcon"``: the FedMPS code's loss, SupContrast (:func:`fedlib.losses.supcon`)
  over the union of the batch's features and all global prototypes (every vector an
  anchor, positives = the others of the same label, anchors without positives skipped),
  scaled by ``temperature / base_temperature`` = 0.5 / 0.07 as the code's ``MySupConLoss``.
  ``"prototypes"``: the loss as the FedMPS paper describes FedProc (Sec. III-B: positives
  come "solely" from the global prototypes): for each local feature,
  -log(e^{z.p_y/t} / sum_k e^{z.p_k/t}) over all global prototypes, no extra scale.
- ``temperature=0.5`` (FedMPS Sec. IV-A); feature level ``"high"`` (the code's third
  model output, the L2-normalised high-level features).
- ``normalize=False``: the contrast takes the model's features as they are, which is the
  method on a model that L2-normalises them itself (the FedMPS models, ``cnn_fmnist``).
  ``True`` L2-normalises the local features and the global prototypes inside the contrast
  only (cosine similarities over the temperature), for a model whose features are raw:
  on PFLlib's 4-layer CNN (512-d ReLU outputs) the dot products over 0.5 run into the
  thousands, and so does the contrast (SupContrast's exp-then-sum even underflowed to NaN in
  the first contrastive round; :func:`fedlib.losses.supcon` now takes a log-sum-exp). The uploads
  stay the class means of the raw features (the cross-paper benchmark sets it on its
  ``pat`` and ``dir`` settings).
- Prototypes are the means of the training-time features of the last local epoch (the
  code collects them during training, as FedProto does). Classes nobody uploaded in a
  round keep their previous global prototype (with full participation, as in FedMPS,
  every class is uploaded every round).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.losses import supcon
from fedlib.prototypes import aggregate_protos, keep_last, message_scores, rows_message
from fedlib.validation import BOOL, Interval, Options


def ce_weight(round_idx: int, ramp_rounds: int) -> float:
    """a_r of the hybrid loss: 1 in round 0, then r / ramp_rounds, capped at 1 (FedMPS code)."""
    if round_idx == 0:
        return 1.0
    return min(round_idx / ramp_rounds, 1.0)


def proto_infonce(features: torch.Tensor, labels: torch.Tensor, protos: torch.Tensor, classes: torch.Tensor,
                  temperature: float) -> torch.Tensor:
    """Mean over samples of -log(e^{z.p_y/t} / sum_k e^{z.p_k/t}), k over the given prototypes.

    Samples whose class has no prototype are skipped.
    """
    has = (labels.unsqueeze(1) == classes.unsqueeze(0))  # (B, k)
    keep = has.any(dim=1)
    if not keep.any():
        return features.sum() * 0.0
    logits = features[keep] @ protos.T / temperature
    return F.cross_entropy(logits, has[keep].to(torch.int64).argmax(dim=1))


@register
@dataclasses.dataclass(frozen=True)
class FedProc(FedAvg):
    temperature: float = 0.5       # FedMPS Sec. IV-A: "temperature used in ... FedProc ... is set to 0.5"
    base_temperature: float = 0.07  # FedMPS code MySupConLoss: scale temperature / 0.07 ("supcon" only)
    ramp_rounds: int = 100         # FedMPS code: a_r = round / 100
    contrast: str = "supcon"       # "supcon": FedMPS code; "prototypes": as the FedMPS paper describes FedProc
    level: str = "high"            # FedMPS code: the high-level features
    weighted: bool = True          # FedMPS code: model mean weighted by data size
    normalize: bool = False        # True: cosine contrast for a model whose features are not L2-normalised
    name = "fedproc"
    RULES = ("proto", "head")      # head last: the rule FedMPS reports (and the progress bar shows)
    CONSTRAINTS = {"temperature": Interval(0, None, low_open=True),
                   "base_temperature": Interval(0, None, low_open=True),
                   "ramp_rounds": Interval(1, None, integer=True), "contrast": Options(("supcon", "prototypes")),
                   "level": Options(("high", "low")), "normalize": BOOL}
    NEUTRAL = {"normalize": False}  # added after runs existed: they contrasted the model's own features
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "protos": "float[k, d]", "classes": "int[k]",
              "counts": "int[k]"}
    BROADCAST = {"w.*": "float[...]", "protos?": "float[k, d]", "classes?": "int[k]"}

    def init_server(self, ctx):
        C = ctx.num_classes
        return {**super().init_server(ctx), "protos": torch.zeros(C, 0, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return {**server["weights"], **rows_message(server["protos"], server["present"])}

    def contrastive(self, z, yb, protos, classes):
        if self.normalize:
            z, protos = F.normalize(z, dim=1), F.normalize(protos, dim=1)
        if self.contrast == "supcon":
            return supcon(torch.cat([z, protos]), torch.cat([yb, classes]), self.temperature,
                          self.temperature / self.base_temperature)
        return proto_infonce(z, yb, protos, classes, self.temperature)

    def task(self, ctx, cid, client, msg, data, rnd):
        task = super().task(ctx, cid, client, msg, data, rnd)  # from the global model
        task.collect = (self.level,)  # the class means of the last local epoch's features
        return task

    def extras(self, msg):
        return {"protos": msg["protos"], "classes": msg["classes"]} if "protos" in msg else {}

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        round_idx = rnd.index - 1  # the code's global_round: aggregations done before this round
        if round_idx > 0:
            a = ce_weight(round_idx, self.ramp_rounds)
            con = self.contrastive(feats[self.level], y, extras["protos"], extras["classes"]) if extras else 0.0
            loss = a * loss + (1 - a) * con
        return loss, {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        return {"model": weights(model)}, {**self.upload(model, data), **sums[self.level].message()}, metrics

    def batch_support(self):
        if self.contrast == "prototypes":
            return "its 'prototypes' contrast keeps the samples whose class has a prototype (a value-dependent shape)"
        return super().batch_support()

    def aggregate(self, ctx, server, uploads, rnd):
        if not uploads:
            return server, {}
        new = super().aggregate(ctx, server, uploads, rnd)[0]
        ups = [u for u in uploads.values() if len(u["classes"])]
        if ups:
            protos, present = aggregate_protos(ups, ctx.num_classes, weighted=False)
            new["protos"], new["present"] = keep_last(protos, present, server["protos"], server["present"])
        return new, {}

    def scores(self, ctx, cid, client, msg, logits, feats):
        return {"proto": message_scores(feats[self.level], msg, ctx.num_classes), "head": logits}
