"""Losses the papers define (written by hand only where no library has them): one SupCon,
one KL, each used by every method that needs it."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def supcon(vectors: torch.Tensor, labels: torch.Tensor, tau: float, scale: float = 1.0) -> torch.Tensor:
    """Supervised contrastive loss over a set of labelled vectors (SupContrast's form).

    Every vector is an anchor; its denominator runs over all other vectors, its positives
    are the other vectors with the same label; similarities are dot products over ``tau``;
    the denominator is a log-sum-exp (the same number as SupContrast's, which subtracts the
    row maximum and can underflow to ``log 0``, NaN). The loss is ``-scale`` times the
    mean over anchors (those with at least one positive) of the mean log-probability of
    their positives; 0 when no anchor has a positive.

    Parameters
    ----------
    vectors : Tensor, shape (n, d)
    labels : Tensor, shape (n,), int64
    scale : float, SupContrast's ``temperature / base_temperature`` (1 = none)
    """
    n = len(labels)
    logits = vectors @ vectors.T / tau
    not_self = ~torch.eye(n, dtype=torch.bool, device=vectors.device)
    positive = (labels.unsqueeze(0) == labels.unsqueeze(1)) & not_self
    # log of the denominator as a log-sum-exp over the other vectors only: SupContrast's
    # exp-then-sum (after subtracting the row maximum, which is the anchor's own similarity
    # for normalised vectors) underflows to log(0) when every other vector is far below it
    lowest = torch.finfo(logits.dtype).min  # not -inf: a lone vector would give a NaN gradient
    log_denom = torch.logsumexp(logits.masked_fill(~not_self, lowest), dim=1, keepdim=True)
    log_prob = torch.where(positive, logits - log_denom, torch.zeros_like(logits))
    n_pos = positive.sum(dim=1)
    keep = n_pos > 0
    # masked means rather than boolean indexing: no value-dependent shapes, so vmap can batch it
    mean_log_prob_pos = log_prob.sum(dim=1) / n_pos.clamp(min=1)   # log_prob is 0 off the positives
    return -scale * ((mean_log_prob_pos * keep).sum() / keep.sum().clamp(min=1))


def supcon_with_prototypes(features: torch.Tensor, labels: torch.Tensor, protos: torch.Tensor,
                           tau: float, base_tau: float | None = None) -> torch.Tensor:
    """FedMPS Eq. 3: :func:`supcon` over V = {z_b} U {p_bar_{y_b}} (2B vectors).

    Local features and prototype copies are anchors alike; each sample's own prototype copy
    is always a positive. Prototypes carry no gradient (the FedMPS code uses ``.data``).
    ``base_tau`` reproduces the code's SupContrast scaling ``tau / base_tau`` (0.5 / 0.07 ~
    7.14, not in Eq. 3); ``None`` gives Eq. 3 as printed.

    Parameters
    ----------
    features : Tensor, shape (B, d), L2-normalised local features
    labels : Tensor, shape (B,), int64
    protos : Tensor, shape (B, d): for each sample, the global prototype of its class
    """
    scale = tau / base_tau if base_tau else 1.0
    return supcon(torch.cat([features, protos.detach()]), torch.cat([labels, labels]), tau, scale)


def kl_loss(logits: torch.Tensor, target: torch.Tensor, tau: float = 1.0, reduction: str = "batchmean",
            target_logits: bool = False) -> torch.Tensor:
    """KL(p || softmax(logits / tau)) with p = ``target`` (probabilities) or, with
    ``target_logits``, softmax(target / tau). ``reduction``: ``"batchmean"`` (per-sample KL,
    the mean over the batch) or ``"mean"`` (``nn.KLDivLoss()``'s default: the mean over batch
    *and* classes, as HtFLlib). No tau^2 factor: callers scale.

    Users: FedMPS soft labels (Eqs. 5-6), FedGKD's distillation, FML's and FedKD's mutual KL.
    """
    p = F.softmax(target / tau, dim=1) if target_logits else target
    log_q = F.log_softmax(logits / tau, dim=1)
    if reduction == "mean":  # F.kl_div warns on "mean"; this is the same number
        return F.kl_div(log_q, p, reduction="none").mean()
    return F.kl_div(log_q, p, reduction=reduction)
