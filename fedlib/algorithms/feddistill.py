"""FedDistill (FD): Jeong et al., "Communication-Efficient On-Device Machine Learning:
Federated Distillation and Augmentation under Non-IID Private Data", NeurIPS-W 2018, as run
by HtFLlib's ``FedDistill`` (ProtoNorm Table 1 baseline; docs/protonorm.md).

Clients (any architecture) train CE + gamma * R, where R pulls each sample's logits towards
the global mean logits of its class, and upload the per-class means of the logits they
produced while training (train mode, before each step, over all local epochs, as HtFLlib).
The server averages each class's logits over the clients that uploaded the class (a plain
mean: no class counts leave the clients). Inference: the client's own head.

Up: ``logits`` (k, C) for the k classes the client saw, ``classes`` (k,).
Down: ``logits`` (k', C) and ``classes`` (k',) for every class with global logits; nothing
before the first aggregation. Per round that is sum_i (K_i + K) x K floats (ProtoNorm Supp. D).

Choices:
- ``gamma=1``: ProtoNorm Table 6 ("weight of logit regularizer"), HtFLlib ``-lam 1``.
- ``reg="mse"``: HtFLlib FedDistill, ``nn.MSELoss`` between the logits and the global logits
  of the label (mean over batch and classes; samples whose class has no global logits count
  in the mean with zero error). ``"soft_ce"``: HtFLlib's later FD client, cross-entropy
  against softmax(global logits).
- Classes nobody uploaded in a round keep their previous global logits (as this suite's
  FedProto; HtFLlib rebuilds the table from the round's uploads, identical under full
  participation).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, weights
from fedlib.prototypes import ProtoTable, aggregate_protos, keep_last, proto_regulariser, rows_message
from fedlib.validation import Interval, Options


@register
@dataclasses.dataclass(frozen=True)
class FedDistill(Algorithm):
    gamma: float = 1.0   # ProtoNorm Table 6; HtFLlib -lam 1
    reg: str = "mse"     # "mse": HtFLlib FedDistill; "soft_ce": CE to softmax(global logits)
    name = "feddistill"
    CONSTRAINTS = {"gamma": Interval(0, None), "reg": Options(("mse", "soft_ce"))}
    UPLOAD = {"logits": "float[k, C]", "classes": "int[k]"}
    BROADCAST = {"logits?": "float[k, C]", "classes?": "int[k]"}

    def init_server(self, ctx):
        C = ctx.num_classes
        return {"logits": torch.zeros(C, C, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return rows_message(server["logits"], server["present"], key="logits")

    def task(self, ctx, cid, client, msg, data, rnd):
        received = ProtoTable.from_message(msg, ctx.num_classes, key="logits")
        extras = {}
        if received is not None and self.gamma > 0:
            extras["table"], extras["present"] = received.single()
        # the class means of the logits of every batch of every epoch (HtFLlib)
        return LocalTask(client["model"], extras=extras, collect=("logits",), collect_all_epochs=True)

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        logits = out[0]
        loss = F.cross_entropy(logits, y)
        if extras:
            loss = loss + self.gamma * proto_regulariser(logits, y, extras["table"], extras["present"], self.reg)
        return loss, {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        up = sums["logits"].message(counts=False)
        return {"model": weights(model)}, {"logits": up["protos"], "classes": up["classes"]}, metrics

    def aggregate(self, ctx, server, uploads, rnd):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server, {}
        logits, present = aggregate_protos(ups, ctx.num_classes, weighted=False, key="logits")
        logits, present = keep_last(logits, present, server["logits"], server["present"])
        return {"logits": logits, "present": present}, {}
