"""FedProto: Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous
Clients", AAAI 2022 (arXiv 2105.00243).

Each client keeps its own model (never averaged) and minimises
CE + lam * MSE(z, global prototype of y) (paper Eq. 8; the code's ``ld`` weight with
``nn.MSELoss``, i.e. the mean over batch and feature dimensions; samples whose class
has no global prototype yet contribute zero). After training it uploads the class
means of its features; the server averages them per class (paper Eq. 6). The round
itself is :class:`~fedlib.algorithms.prototype_method.PrototypeMethod`'s.

Up: ``protos`` float32 (k, d) for the k classes the client saw, ``classes`` int64 (k,),
``counts`` int64 (k,). Down: ``protos`` (k', d) and ``classes`` (k',) for every class
with a global prototype.
Inference: ``head`` (the client's classifier) and ``proto`` (nearest global prototype).

Choices (the FedProto paper vs its code, which the FedMPS code follows):
- ``weighted=False``: the server's plain mean over clients, as the FedProto and FedMPS
  code do; the paper's Eq. 6 weights by |D_i,k| (``weighted=True``).
- ``proto_pass="train"``: prototypes are means of the features computed during the
  last local epoch (train mode, before each step), as in the FedProto/FedMPS code;
  ``"eval"`` recomputes them in eval mode after training (FedTGP/HtFLlib style).
- ``gamma=1``: the server sends gamma x the global prototypes (ProtoNorm's Table 5 scaling
  of FedProto, applied on the server as ProtoNorm's code does); 1 is FedProto itself and
  keeps earlier run ids.
"""

from __future__ import annotations

import dataclasses

from fedlib.algorithms.registry import register
from fedlib.algorithms.prototype_method import PrototypeMethod
from fedlib.prototypes import proto_regulariser
from fedlib.validation import BOOL, Interval, Options


@register
@dataclasses.dataclass(frozen=True)
class FedProto(PrototypeMethod):
    lam: float = 1.0           # weight of the prototype loss; FedProto/FedMPS code `ld` = 1
    level: str = "high"        # which feature level is the prototype space
    weighted: bool = False     # server mean weighted by class counts (paper Eq. 6) or plain (code)
    proto_pass: str = "train"  # "train": features seen during the last epoch; "eval": a pass after
    gamma: float = 1.0         # scale of the sent prototypes (ProtoNorm Table 5; 1 = FedProto)
    name = "fedproto"
    SWEEPABLE = ("lam", "gamma")  # the loss weight (arithmetic); the sent scale (server side)
    CONSTRAINTS = {"lam": Interval(0, None), "level": Options(("high", "low")), "weighted": BOOL,
                   "proto_pass": Options(("train", "eval")), "gamma": Interval(0, None, low_open=True)}
    NEUTRAL = {"gamma": 1.0}

    def regulariser(self, z, y, table, present):
        return self.lam * proto_regulariser(z, y, table, present)

    def sent_scale(self):
        return self.gamma
