"""FedProx: Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020
(arXiv 1812.06127).

FedAvg with the proximal term (mu / 2) * ||w - w_global||^2 added to each local
batch loss (paper Eq. 2). Messages and aggregation as in :mod:`fedavg`.
"""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval


@register
@dataclasses.dataclass(frozen=True)
class FedProx(FedAvg):
    mu: float = 0.01  # proximal weight; FedMPS Sec. IV-A grid optimum for Fashion-MNIST and CIFAR-10
    name = "fedprox"
    SWEEPABLE = ("mu",)  # the proximal weight (arithmetic; mu = 0 sends no global weights: another group)
    CONSTRAINTS = {"mu": Interval(0, None)}

    def extras(self, msg):
        return {k: v for k, v in msg.items() if k.startswith("w.")} if self.mu > 0 else {}

    def local_loss(self, out, y, extras, teachers, params):
        loss = F.cross_entropy(out[0], y)
        if extras:  # the global weights, sent where mu > 0 (a test of the value would stop the batched sweep)
            prox = sum(((p - extras["w." + n]) ** 2).sum() for n, p in params.items())
            loss = loss + 0.5 * self.mu * prox
        return loss
