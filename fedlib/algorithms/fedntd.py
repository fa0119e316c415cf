"""FedNTD: Lee et al., "Preservation of the Global Knowledge by Not-True Distillation
in Federated Learning", NeurIPS 2022.

FedAvg whose local loss is CE + beta * L_NTD, where L_NTD is the KL
divergence between the not-true softmaxes (the true class removed, temperature tau) of
the frozen global model and of the local model, times tau^2 (FedNTD/FedMPS code). The
server takes the plain, unweighted parameter mean (FedMPS code, docs/fedmps.md).
Messages as in :mod:`fedavg`. Inference: the global model's head.

Defaults are the FedMPS code's (``--ntd_tau 1 --ntd_beta 1``; the paper is silent). FedMPS
trains FedNTD for 5 local epochs on RealWaste, CIFAR-10 and Fashion-MNIST (Sec. IV-A):
that is ``train.local_epochs`` of the experiment config, not a field here.

The frozen global model runs in eval mode (the FedMPS code copies the client model after
its evaluation pass has put it in eval mode; only its round 0 copy is in train mode).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.fedavg import FedAvg
from fedlib.losses import kl_loss
from fedlib.validation import Interval


def not_true_logits(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The (B, C-1) logits of every class except each sample's true class, in class order."""
    others = torch.arange(logits.shape[1] - 1, device=logits.device).expand(len(targets), -1)
    return logits.gather(1, others + (others >= targets.unsqueeze(1)))


def ntd_loss(logits: torch.Tensor, global_logits: torch.Tensor, targets: torch.Tensor, tau: float) -> torch.Tensor:
    """FedNTD's not-true distillation loss: tau^2 * KL(q~_global || q~_local) over the not-true classes, batch mean.

    q~ = softmax(not-true logits / tau); the global side carries no gradient.
    """
    with torch.no_grad():
        q_glob = F.softmax(not_true_logits(global_logits, targets) / tau, dim=1)
    return tau ** 2 * kl_loss(not_true_logits(logits, targets), q_glob, tau)


@register
@dataclasses.dataclass(frozen=True)
class FedNTD(FedAvg):
    tau: float = 1.0         # not-true distillation temperature (FedMPS code --ntd_tau 1)
    beta: float = 1.0        # weight of L_NTD (FedMPS code --ntd_beta 1)
    weighted: bool = False   # FedMPS code: unweighted parameter mean
    name = "fedntd"
    CONSTRAINTS = {"tau": Interval(0, None, low_open=True), "beta": Interval(0, None)}

    def teachers(self, start, msg):
        return {"global": start} if self.beta > 0 else {}  # the received global model

    def local_loss(self, out, y, extras, teachers, params):
        logits = out[0]
        loss = F.cross_entropy(logits, y)
        if "global" in teachers:
            loss = loss + self.beta * ntd_loss(logits, teachers["global"][0], y, self.tau)
        return loss
