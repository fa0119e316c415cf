"""White-box feature inversion: images whose features match an uploaded feature statistic.

Threat model
------------
- **Attacker**: the honest-but-curious server.
- **It holds** the client's extractor f as weights (white box): uploaded (FedAvg-family methods that
  also send prototypes: FedPAC, FedProc, MP-FedCL, FedIC, ...) or broadcast by the server itself and
  trained from by the client (a shared extractor), and a feature statistic the client uploaded for a
  class: a prototype (class mean), a k-means centroid (MP-FedCL), a mixture component mean (GFPL).
  :func:`fedlib.privacy.holds.what_server_holds` says for which methods both hold.
- **It needs** no auxiliary data: only the image shape and the pixel range.
- **Goal**: an image of the class as the client saw it.
- **Method** (the feature-inversion objective of Mahendran and Vedaldi, CVPR 2015, with the
  total-variation prior, restarts and box constraint that Geiping et al., NeurIPS 2020 use for
  gradients): minimise over images x

      L(x) = dist(f(x), p) + tv * TV(x),   dist = ||.||^2 (``"l2"``) or 1 - cos (``"cosine"``)

  with Adam from ``restarts`` random starts, projecting x onto the valid pixel box after every step,
  and keep per target the start with the lowest final L. The extractor runs in eval mode.

A prototype is the feature *mean*, and f is not linear: the image whose feature equals the mean is
in general not the mean image. :func:`samples_per_prototype` measures how fast that protects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.privacy.metrics import psnr_ssim
from fedlib.validation import ConfigError

FeatureFn = Callable[[torch.Tensor], torch.Tensor]


def total_variation(x: torch.Tensor) -> torch.Tensor:
    """Anisotropic TV of each image (n, C, H, W) -> (n,): mean |horizontal| + mean |vertical| difference."""
    dh = (x[..., :, 1:] - x[..., :, :-1]).abs().flatten(1).mean(1)
    dv = (x[..., 1:, :] - x[..., :-1, :]).abs().flatten(1).mean(1)
    return dh + dv


def feature_fn(model: nn.Module, level: str = "high", normalize: bool = False) -> FeatureFn:
    """Differentiable features of a fedlib model at ``level`` (eval mode; ``normalize``: L2 rows)."""
    model.eval()

    def f(x):
        z = model(x)[1][level]
        return F.normalize(z, dim=1) if normalize else z

    return f


def pixel_box(mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
              channels: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Bounds (1, C, 1, 1) of normalised pixels ``(x - mean) / std`` for x in [0, 1]."""
    m = torch.as_tensor(mean, dtype=torch.float32).flatten().expand(channels).reshape(1, -1, 1, 1)
    s = torch.as_tensor(std, dtype=torch.float32).flatten().expand(channels).reshape(1, -1, 1, 1)
    return (0 - m) / s, (1 - m) / s


def check_positive(name: str, value, integer: bool = True) -> None:
    """Raise :class:`ConfigError` unless ``value`` is a positive int (or number)."""
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or value <= 0:
        raise ConfigError(name, value, "an integer in [1, inf)" if integer else "a number in (0, inf)")


@dataclasses.dataclass
class Reconstruction:
    """images : (k, C, H, W) normalised pixels; loss : (k,) final objective of the kept start."""

    images: torch.Tensor
    loss: torch.Tensor


def _distance(z: torch.Tensor, target: torch.Tensor, loss: str) -> torch.Tensor:
    if loss == "l2":
        return (z - target).pow(2).sum(1)
    return 1 - F.cosine_similarity(z, target, dim=1)


def invert_features(f: FeatureFn, targets: torch.Tensor, shape: Sequence[int], *, steps: int = 300,
                    restarts: int = 4, lr: float = 0.05, tv: float = 1e-3, loss: str = "l2",
                    mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                    seed: int = 0) -> Reconstruction:
    """Invert feature statistics ``targets`` (k, d) through the white-box extractor ``f``.

    Parameters
    ----------
    f : callable, images (n, C, H, W) -> features (n, d), differentiable (see :func:`feature_fn`)
    targets : Tensor, shape (k, d), the uploaded prototypes / centroids / component means
    shape : (C, H, W) of the client's images
    steps, restarts : Adam steps per start, random starts per target
    lr : Adam learning rate, cosine-decayed to 0
    tv : weight of the total-variation prior
    loss : ``"l2"`` (squared distance) or ``"cosine"`` (scale-free, for L2-normalised features)
    mean, std : the dataset normalisation: pixels are kept in the box of [0, 1] images
    seed : random starts (uniform in the box) are drawn from it

    Returns
    -------
    Reconstruction, one image per target row
    """
    check_positive("steps", steps)
    check_positive("restarts", restarts)
    if loss not in ("l2", "cosine"):
        raise ConfigError("loss", loss, "'l2' or 'cosine'")
    targets = torch.as_tensor(targets, dtype=torch.float32).detach()
    if targets.dim() != 2:
        raise ConfigError("targets", tuple(targets.shape), "a tensor of shape (k, d)")
    k, shape = len(targets), tuple(shape)
    lo, hi = pixel_box(mean, std, shape[0])
    gen = torch.Generator().manual_seed(seed)
    # All restarts of all targets are optimised as one batch: row r * k + j is start r of target j.
    x = (lo + (hi - lo) * torch.rand(restarts * k, *shape, generator=gen)).requires_grad_(True)
    target = targets.repeat(restarts, 1)
    opt = torch.optim.Adam([x], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    for _ in range(steps):
        objective = _distance(f(x), target, loss) + tv * total_variation(x)
        opt.zero_grad(set_to_none=True)
        objective.sum().backward()
        opt.step()
        sched.step()
        with torch.no_grad():
            x.copy_(torch.maximum(torch.minimum(x, hi), lo))
    with torch.no_grad():
        final = (_distance(f(x), target, loss) + tv * total_variation(x)).view(restarts, k)
        best = final.argmin(0)
        images = x.detach().view(restarts, k, *shape)[best, torch.arange(k)]
    return Reconstruction(images, final[best, torch.arange(k)])


def _group_statistics(z: torch.Tensor, kind: str, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Statistics (m, d) of one group's features and each member's statistic index."""
    if kind == "mean" or len(z) < 2:
        return z.mean(0, keepdim=True), np.zeros(len(z), dtype=int)
    zn = z.detach().double().numpy()
    if kind == "kmeans":
        from sklearn.cluster import KMeans

        km = KMeans(2, n_init=4, random_state=seed).fit(zn)
        return torch.as_tensor(km.cluster_centers_, dtype=z.dtype), km.labels_
    from sklearn.mixture import GaussianMixture

    gm = GaussianMixture(2, covariance_type="diag", random_state=seed, reg_covar=1e-4).fit(zn)
    return torch.as_tensor(gm.means_, dtype=z.dtype), gm.predict(zn)


def samples_per_prototype(attack: Callable[[torch.Tensor], torch.Tensor], f: FeatureFn, x: torch.Tensor,
                          y: torch.Tensor, sizes: Sequence[int] = (1, 2, 4, 8, 16), groups: int = 8,
                          kind: str = "mean", mean: float | Sequence[float] = 0.0,
                          std: float | Sequence[float] = 1.0, seed: int = 0) -> pd.DataFrame:
    """The attack on statistics averaged over ``n`` images, for each ``n`` in ``sizes``.

    For each size n, ``groups`` groups of n images of one class are drawn without replacement
    (classes in turn), as a client with n samples of a class holds them. Their features
    ``f(x)`` give the uploaded statistic of ``kind``: ``"mean"`` (a prototype), ``"kmeans"`` (two
    k-means centroids, MP-FedCL) or ``"gmm"`` (two diagonal-Gaussian component means, GFPL); a
    group of one gives the feature itself. ``attack`` maps statistics (m, d) to images; each
    member is scored against the reconstruction from its own statistic.

    Returns
    -------
    DataFrame, one row per size: ``n``, ``kind``, ``psnr`` / ``ssim`` (mean over all members),
    ``psnr_best`` / ``ssim_best`` (mean over groups of the best-revealed member)
    """
    if kind not in ("mean", "kmeans", "gmm"):
        raise ConfigError("kind", kind, "'mean', 'kmeans' or 'gmm'")
    y = torch.as_tensor(y)
    rng = np.random.default_rng(seed)
    classes = sorted(set(y.tolist()))
    rows = []
    for n in sizes:
        check_positive("sizes", n)
        members, best = [], []
        for g in range(groups):
            pool = torch.nonzero(y == classes[g % len(classes)]).flatten().numpy()
            if len(pool) < n:
                raise ConfigError("sizes", n, f"at most {len(pool)} (images of class {classes[g % len(classes)]})")
            idx = torch.from_numpy(rng.choice(pool, n, replace=False))
            with torch.no_grad():
                stats, assign = _group_statistics(f(x[idx]), kind, seed)
            recon = attack(stats)[torch.from_numpy(assign)]
            s = psnr_ssim(recon, x[idx], mean, std)
            members.append(s)
            best.append(s.loc[s.ssim.idxmax()])
        m, b = pd.concat(members), pd.DataFrame(best)
        rows.append({"n": n, "kind": kind, "psnr": m.psnr.mean(), "ssim": m.ssim.mean(),
                     "psnr_best": b.psnr.mean(), "ssim_best": b.ssim.mean()})
    return pd.DataFrame(rows)
