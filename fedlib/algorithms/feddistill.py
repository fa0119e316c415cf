"""FedDistill (FD): Jeong et al., "Communication-Efficient On-Device Machine Learning:
Federated Distillation and Augmentation under Non-IID Private Data", NeurIPS-W 2018, as run
by HtFLlib's ``FedDistill`` (ProtoNorm Table 1 baseline; notes protonorm.md §3.2, §5).

Clients (any architecture) train CE + gamma * R, where R pulls each sample's logits towards
the global mean logits of its class, and upload the per-class means of the logits they
produced while training (train mode, before each step, over all local epochs, as HtFLlib).
The server averages each class's logits over the clients that uploaded the class (a plain
mean: no class counts leave the clients). Inference: the client's own head.

Up: ``logits`` (k, C) for the k classes the client saw, ``classes`` (k,), ``train_loss``.
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

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, sgd_epochs
from fedlib.prototypes import ProtoAccumulator, aggregate_protos, scatter_protos
from fedlib.validation import Interval, Options


def logit_regulariser(logits: torch.Tensor, y: torch.Tensor, table: torch.Tensor, has: torch.Tensor,
                      kind: str = "mse") -> torch.Tensor:
    """R of FD: each sample's logits against the global logits ``table[y]`` (rows with
    ``has[y]`` false target the sample's own detached logits, i.e. contribute no gradient)."""
    target = torch.where(has[y].unsqueeze(1), table[y], logits.detach())
    if kind == "mse":
        return F.mse_loss(logits, target)
    return F.cross_entropy(logits, target.softmax(dim=1))


@dataclasses.dataclass
class FedDistillClient:
    model: object


@dataclasses.dataclass
class FedDistillServer:
    logits: torch.Tensor   # (C, C) global mean logits per class
    present: torch.Tensor  # (C,) bool


@register
@dataclasses.dataclass(frozen=True)
class FedDistill(Algorithm):
    gamma: float = 1.0   # ProtoNorm Table 6; HtFLlib -lam 1
    reg: str = "mse"     # "mse": HtFLlib FedDistill; "soft_ce": CE to softmax(global logits)
    name = "feddistill"
    CONSTRAINTS = {"gamma": Interval(0, None), "reg": Options(("mse", "soft_ce"))}

    def init_client(self, ctx, cid):
        return FedDistillClient(ctx.new_model(cid))

    def init_server(self, ctx):
        C = ctx.num_classes
        return FedDistillServer(torch.zeros(C, C), torch.zeros(C, dtype=torch.bool))

    def broadcast(self, ctx, server, cid):
        if not server.present.any():
            return {}
        classes = torch.nonzero(server.present).flatten()
        return {"logits": server.logits[classes], "classes": classes}

    def local_update(self, ctx, client, msg, data, gen):
        model, C = client.model, ctx.num_classes
        table, has = scatter_protos(msg["logits"], msg["classes"], C) if "logits" in msg else (None, None)
        acc = ProtoAccumulator(C, C)

        def loss_fn(xb, yb, epoch):
            logits = model(xb)[0]
            loss = F.cross_entropy(logits, yb)
            if table is not None and self.gamma > 0:
                loss = loss + self.gamma * logit_regulariser(logits, yb, table, has, self.reg)
            acc.add(logits, yb)
            return loss

        loss = sgd_epochs(ctx, model, data, gen, loss_fn)
        up = acc.message()
        return client, {"logits": up["protos"], "classes": up["classes"], "train_loss": loss}

    def aggregate(self, ctx, server, uploads):
        ups = [{"protos": u["logits"], "classes": u["classes"],
                "counts": torch.ones(len(u["classes"]), dtype=torch.int64)}
               for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server
        logits, present = aggregate_protos(ups, ctx.num_classes, weighted=False)
        logits = torch.where(present.unsqueeze(1), logits, server.logits)
        return FedDistillServer(logits, present | server.present)

    def predict(self, ctx, client, msg, x):
        client.model.eval()
        return {"head": client.model(x)[0]}
