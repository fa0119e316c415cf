"""FedUV: Son, Kim, Chung, Huang, Liu, "FedUV: Uniformity and Variance for Heterogeneous
Federated Learning", CVPR 2024 (arXiv 2402.18372; ProtoNorm Table 3 homogeneous baseline,
docs/protonorm.md).

FedAvg (messages and aggregation of :mod:`fedavg`, sample-count weights as the FedUV code's
``fed_avg_freqs``) with two local regularisers added to cross-entropy on every batch:

    L = CE + mu * L_V(softmax(logits)) + lam * L_U(z)

- Classifier variance (weight ``mu``): with q = softmax(logits) of the batch (n, C) and
  sigma_j the unbiased standard deviation of column j over the batch,
      L_V = (1/C) sum_j max(0, gamma - sigma_j),  gamma = mean_j std_j(I_C) = 1/sqrt(C),
  i.e. the per-class spread of the predictions is pushed up to that of one-hot outputs of a
  class-balanced (IID) batch. :func:`variance_loss`.
- Hyperspherical uniformity (weight ``lam``): with D_ij = ||z_i - z_j||^2 over the batch's
  pairs i < j and t = median of the nonzero D_ij,
      L_U = mean_{i<j} exp(-D_ij / t)
  (a Gaussian-potential uniformity loss with a median bandwidth). :func:`uniformity_loss`.

Sources and choices:
- The paper body (its printed equations) was not available here; the two terms follow the
  authors' released code (github.com/sonhamin/FedUV, ``algs/feduv.py``, class ``UVReg``), whose
  role matches the abstract ("variance in the dimension-wise probability distribution of the
  classifier" and "hyperspherical uniformity of representations of the encoder"). Where the
  paper's printed form differs (e.g. an epsilon inside the standard deviation, a log, or a
  fixed kernel temperature as in Wang & Isola's uniformity loss), this module follows the code.
- ``mu=2.5``, ``lam=0.5``: ProtoNorm Table 6 (FedUV code defaults ``--std_coeff 2.5``,
  ``--unif_coeff 0.5``).
- z is the ``high`` feature level, the representation the head consumes (the code's
  penultimate output ``x`` fed to ``fc3``), used as the model returns it: the code does not
  L2-normalise it before L_U.
- The median's gradient is kept (the code does not detach it); torch.median takes the lower
  of the two middle values for an even count (the code uses torch.median too).
- Degenerate batches (our guards; the code would fail or return nan): fewer than 2 samples
  give L_V = L_U = 0; when every pair coincides t = 1, so L_U = 1 with zero gradient.
- A term whose weight is 0 is not computed, so ``mu = lam = 0`` reproduces FedAvg exactly.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.fedavg import FedAvg
from fedlib.validation import Interval


def variance_loss(logits: torch.Tensor) -> torch.Tensor:
    """L_V = (1/C) sum_j relu(gamma - std_j(softmax(logits))), gamma = C^(-1/2) (see module docstring)."""
    n, C = logits.shape
    if n < 2:
        return logits.new_zeros(())
    gamma = C ** -0.5  # = torch.eye(C).std(0).mean(): one 1 and C-1 zeros per column, unbiased
    return F.relu(gamma - F.softmax(logits, dim=1).std(dim=0)).mean()


def uniformity_loss(z: torch.Tensor) -> torch.Tensor:
    """L_U = mean over pairs i<j of exp(-||z_i - z_j||^2 / t), t = median of the nonzero squared distances."""
    n = z.shape[0]
    if n < 2:
        return z.new_zeros(())
    i, j = torch.triu_indices(n, n, offset=1)
    d2 = (z[i] - z[j]).pow(2).sum(1)  # squared distances without a sqrt: finite gradient at 0
    nonzero = d2[d2 > 0]
    t = nonzero.median() if nonzero.numel() else d2.new_ones(())
    return torch.exp(-d2 / t).mean()


@register
@dataclasses.dataclass(frozen=True)
class FedUV(FedAvg):
    mu: float = 2.5   # classifier-variance weight (ProtoNorm Table 6; FedUV code std_coeff)
    lam: float = 0.5  # hyperspherical-uniformity weight (ProtoNorm Table 6; FedUV code unif_coeff)
    name = "feduv"
    CONSTRAINTS = {"mu": Interval(0, None), "lam": Interval(0, None)}

    def local_loss(self, out, y, extras, teachers, params):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        if self.mu > 0:
            loss = loss + self.mu * variance_loss(logits)
        if self.lam > 0:
            loss = loss + self.lam * uniformity_loss(feats["high"])
        return loss

    def batch_support(self):
        return "its uniformity loss keeps the nonzero pair distances by value (a shape that vmap cannot batch)"
