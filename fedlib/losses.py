"""Losses the papers define (written by hand only where no library has them).

Helpers appended by other algorithm modules live below the FedMPS ones.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supcon_with_prototypes(features: torch.Tensor, labels: torch.Tensor, protos: torch.Tensor,
                           tau: float, base_tau: float | None = None) -> torch.Tensor:
    """FedMPS Eq. 3: supervised contrastive loss over V = {z_b} U {p_bar_{y_b}} (2B vectors).

    Every one of the 2B vectors is an anchor; A(i) = all others, R(i) = the others with
    the same label (local features and prototype copies alike); similarities are dot
    products over ``tau``; the loss is the mean over anchors of minus the mean
    log-probability of the positives. Prototypes carry no gradient (the FedMPS code
    uses ``.data``). ``base_tau`` reproduces the code's SupContrast scaling
    ``tau / base_tau`` (0.5 / 0.07 ~ 7.14, not in Eq. 3; notes fedmps.md ambiguity 3);
    ``None`` gives Eq. 3 as printed.

    Parameters
    ----------
    features : Tensor, shape (B, d), L2-normalised local features
    labels : Tensor, shape (B,), int64
    protos : Tensor, shape (B, d): for each sample, the global prototype of its class
    """
    v = torch.cat([features, protos.detach()])
    lab = torch.cat([labels, labels])
    n = len(lab)
    logits = v @ v.T / tau
    logits = logits - logits.max(dim=1, keepdim=True).values.detach()  # stability, as SupContrast
    not_self = ~torch.eye(n, dtype=torch.bool)
    positive = (lab.unsqueeze(0) == lab.unsqueeze(1)) & not_self
    denom = (torch.exp(logits) * not_self).sum(dim=1, keepdim=True)
    log_prob = logits - torch.log(denom)
    n_pos = positive.sum(dim=1)
    keep = n_pos > 0  # never empty here: each sample's own prototype copy is a positive
    mean_log_prob_pos = (log_prob * positive).sum(dim=1)[keep] / n_pos[keep]
    scale = tau / base_tau if base_tau else 1.0
    return -scale * mean_log_prob_pos.mean()


def soft_label_kl(logits: torch.Tensor, target_probs: torch.Tensor, tau: float) -> torch.Tensor:
    """FedMPS Eqs. 5-6: KL(q_bar || softmax(logits / tau)), mean over the batch.

    ``target_probs`` (B, C) is the global soft label of each sample's class. As in the
    FedMPS code (``KLDivLoss(reduction="batchmean")``) there is no tau^2 factor.
    """
    return F.kl_div(F.log_softmax(logits / tau, dim=1), target_probs, reduction="batchmean")
