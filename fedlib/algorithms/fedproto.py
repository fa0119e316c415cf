"""FedProto: Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous
Clients", AAAI 2022.

Each client keeps its own model (never averaged) and minimises
CE + lam * MSE(z, global prototype of y) (paper Eq. 8; the code's ``ld`` weight with
``nn.MSELoss``, i.e. the mean over batch and feature dimensions; samples whose class
has no global prototype yet contribute zero). After training it uploads the class
means of its features; the server averages them per class (paper Eq. 6).

Up: ``protos`` float32 (k, d) for the k classes the client saw, ``classes`` int64 (k,),
``counts`` int64 (k,). Down: ``protos`` (k', d) and ``classes`` (k',) for every class
with a global prototype.
Inference: ``head`` (the client's classifier) and ``proto`` (nearest global prototype).

Choices (notes fedmps.md ambiguities 7-8):
- ``weighted=False``: the server's plain mean over clients, as the FedProto and FedMPS
  code do; the paper's Eq. 6 weights by |D_i,k| (``weighted=True``).
- ``proto_pass="train"``: prototypes are means of the features computed during the
  last local epoch (train mode, before each step), as in the FedProto/FedMPS code;
  ``"eval"`` recomputes them in eval mode after training (FedTGP/HtFLlib style).
- ``gamma=1``: the server sends gamma x the global prototypes (ProtoNorm's Table 5 scaling
  of FedProto); 1 is FedProto itself and keeps earlier run ids.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, sgd_epochs
from fedlib.prototypes import (ProtoAccumulator, aggregate_protos, eval_class_means, message_scores,
                               scatter_protos)
from fedlib.validation import BOOL, Interval, Options


@dataclasses.dataclass
class FedProtoClient:
    model: object


@dataclasses.dataclass
class FedProtoServer:
    protos: torch.Tensor   # (C, d)
    present: torch.Tensor  # (C,) bool


@register
@dataclasses.dataclass(frozen=True)
class FedProto(Algorithm):
    lam: float = 1.0          # weight of the prototype loss; FedProto/FedMPS code `ld` = 1
    level: str = "high"       # which feature level is the prototype space
    weighted: bool = False    # server mean weighted by class counts (paper Eq. 6) or plain (code)
    proto_pass: str = "train"  # "train": features seen during the last epoch; "eval": a pass after
    gamma: float = 1.0        # scale of the sent prototypes (ProtoNorm Table 5; 1 = FedProto)
    name = "fedproto"
    RULES = ("head", "proto")
    CONSTRAINTS = {"lam": Interval(0, None), "level": Options(("high", "low")), "weighted": BOOL,
                   "proto_pass": Options(("train", "eval")), "gamma": Interval(0, None, low_open=True)}
    NEUTRAL = {"gamma": 1.0}

    def init_client(self, ctx, cid):
        return FedProtoClient(ctx.new_model(cid))

    def init_server(self, ctx):
        return FedProtoServer(torch.zeros(ctx.num_classes, 0), torch.zeros(ctx.num_classes, dtype=torch.bool))

    def broadcast(self, ctx, server, cid):
        if not server.present.any():
            return {}
        classes = torch.nonzero(server.present).flatten()
        # ProtoNorm Table 5 applies gamma to FedProto's raw global prototypes on the server
        # (notes protonorm.md §11 item 20); the server keeps the unscaled ones.
        protos = server.protos[classes] if self.gamma == 1.0 else self.gamma * server.protos[classes]
        return {"protos": protos, "classes": classes}

    def local_update(self, ctx, client, msg, data, gen):
        model, C = client.model, ctx.num_classes
        table, has = (scatter_protos(msg["protos"], msg["classes"], C) if "protos" in msg else (None, None))
        dim = model.feature_dims[self.level]
        acc = ProtoAccumulator(C, dim)
        last = ctx.train.local_epochs - 1

        def loss_fn(xb, yb, epoch):
            logits, feats = model(xb)
            z = feats[self.level]
            loss = F.cross_entropy(logits, yb)
            if table is not None and self.lam > 0:
                target = torch.where(has[yb].unsqueeze(1), table[yb], z.detach())
                loss = loss + self.lam * F.mse_loss(z, target)
            if epoch == last and self.proto_pass == "train":
                acc.add(z, yb)
            return loss

        loss = sgd_epochs(ctx, model, data, gen, loss_fn)
        if self.proto_pass == "train":
            up = acc.message()
        else:
            up = eval_class_means(model, data, C, (self.level,))[self.level].message()
        up["train_loss"] = loss
        return client, up

    def aggregate(self, ctx, server, uploads):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server
        protos, present = aggregate_protos(ups, ctx.num_classes, self.weighted)
        return self._merge(server, protos, present)

    @staticmethod
    def _merge(server, protos, present):
        """Classes nobody uploaded this round keep their previous global prototype."""
        if server.protos.numel():
            protos = torch.where(present.unsqueeze(1), protos, server.protos)
            present = present | server.present
        return FedProtoServer(protos, present)

    def predict(self, ctx, client, msg, x):
        client.model.eval()
        logits, feats = client.model(x)
        return {"head": logits, "proto": message_scores(feats[self.level], msg, ctx.num_classes)}
