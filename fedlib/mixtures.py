"""Prototypes as weighted diagonal Gaussians: fitting, distance, fusion, sampling, and the
fixed simplex ETF a method can align features to.

A set of components is flat rows, like the multi-prototype uploads of the toolkit:
``means`` (m, d), ``vars`` (m, d) (diagonal covariances), ``weights`` (m,) (a component's
sample mass: its mixture weight times the class count, so the weights of one class also say
how many samples it summarises) and ``classes`` (m,). A class is represented by every row
of its label; fusion and sampling work class by class.

Used by GFPL (Lu et al., "GFPL: Generative Federated Prototype Learning for
Resource-Constrained and Data-Imbalanced Vision Task", arXiv 2602.21873): Eqs. 4-6 (the
mixture and EM), Eq. 8 (the Bhattacharyya distance), Algorithm 1 (fusion) and Eqs. 9-10
(the ETF).
"""

from __future__ import annotations

import math

import numpy as np
import torch

__all__ = ["bhattacharyya", "fit_class_mixtures", "fuse", "fuse_class", "sample", "simplex_etf"]


def simplex_etf(dim: int, num_classes: int, seed: int) -> torch.Tensor:
    """A (C, d) simplex equiangular tight frame (GFPL Eqs. 9-10): the reduced QR factor Q of a
    uniform [0, 1) random (d, C) matrix, then ``Z = sqrt(C/(C-1)) Q (I - 11^T / C)``. Rows have
    unit norm and every pair has cosine ``-1/(C-1)``. Needs ``d >= C``; seeded (float64 maths)."""
    if num_classes < 2:
        raise ValueError(f"a simplex ETF needs at least 2 classes; got {num_classes}")
    if dim < num_classes:
        raise ValueError(f"a simplex ETF of {num_classes} classes needs a dimension of at least {num_classes}; "
                         f"got {dim}")
    gen = torch.Generator().manual_seed(int(seed))
    a = torch.rand(dim, num_classes, generator=gen, dtype=torch.float64)
    q, _ = torch.linalg.qr(a, mode="reduced")
    c = num_classes
    z = math.sqrt(c / (c - 1)) * q @ (torch.eye(c, dtype=torch.float64) - torch.full((c, c), 1.0 / c,
                                                                                   dtype=torch.float64))
    return z.T.contiguous().float()


def bhattacharyya(mu1: torch.Tensor, var1: torch.Tensor, mu2: torch.Tensor, var2: torch.Tensor) -> torch.Tensor:
    """Pairwise Bhattacharyya distances (GFPL Eq. 8 with diagonal covariances) between the rows of
    ``(mu1, var1)`` (m, d) and ``(mu2, var2)`` (n, d): an (m, n) matrix of

        1/8 sum_k (mu1_k - mu2_k)^2 / s_k + 1/2 sum_k [ln s_k - 1/2 ln var1_k - 1/2 ln var2_k],

    with ``s = (var1 + var2) / 2``. Computed in float64."""
    m1, v1, m2, v2 = (t.double() for t in (mu1, var1, mu2, var2))
    s = (v1.unsqueeze(1) + v2.unsqueeze(0)) / 2                       # (m, n, d)
    maha = ((m1.unsqueeze(1) - m2.unsqueeze(0)) ** 2 / s).sum(-1) / 8
    logdet = (s.log().sum(-1) - 0.5 * v1.log().sum(-1).unsqueeze(1) - 0.5 * v2.log().sum(-1).unsqueeze(0)) / 2
    return maha + logdet


def fit_class_mixtures(features: np.ndarray, labels: np.ndarray, n_components: int, seed: int,
                       reg_covar: float = 1e-3, max_iter: int = 100, tol: float = 1e-3) -> dict:
    """One diagonal Gaussian mixture per class present in ``labels`` (GFPL Eqs. 4-6, EM by
    scikit-learn, k-means initialisation, seeded by ``seed`` + class): rows ``means``, ``vars``,
    ``weights`` (mixture weight x class count) and ``classes``, as float32 / int64 tensors. A
    class with fewer samples than ``n_components`` gets one component per sample."""
    from sklearn.mixture import GaussianMixture

    means, variances, weights, classes = [], [], [], []
    for c in np.unique(labels):
        z = features[labels == c].astype(np.float64)
        k = min(n_components, len(z))
        if k == 1 and len(z) == 1:  # one sample: its point, with the variance floor
            mu, var, pi = z, np.full_like(z, reg_covar), np.ones(1)
        else:
            gm = GaussianMixture(n_components=k, covariance_type="diag", reg_covar=reg_covar, max_iter=max_iter,
                                 tol=tol, init_params="kmeans", random_state=(seed + int(c)) % (2 ** 31))
            gm.fit(z)
            mu, var, pi = gm.means_, gm.covariances_, gm.weights_
        means.append(mu)
        variances.append(var)
        weights.append(pi * len(z))
        classes += [int(c)] * k
    return {"means": torch.from_numpy(np.concatenate(means)).float(),
            "vars": torch.from_numpy(np.concatenate(variances)).float(),
            "weights": torch.from_numpy(np.concatenate(weights)).float(),
            "classes": torch.tensor(classes, dtype=torch.int64)}


def fuse_class(means: torch.Tensor, variances: torch.Tensor, weights: torch.Tensor, threshold: float,
               add: str = "sequential") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """GFPL Algorithm 1 on the components of one class: complete-linkage clusters (a component
    joins only if its Bhattacharyya distance to every member is below ``threshold``), each merged
    by moment matching (weight sum, weighted mean, weighted variance plus the spread of the
    means). The seed of each cluster is the heaviest remaining component (ties: lowest index).
    ``add="sequential"`` adds the closest qualifying component (smallest largest distance to the
    members) one at a time; ``"batch"`` adds every qualifying component at once (line 5 read
    literally: candidates are not checked against each other).
    Returns ``(means, vars, weights, clusters)`` with ``clusters`` the member indices."""
    if add not in ("sequential", "batch"):
        raise ValueError(f"add must be 'sequential' or 'batch'; got {add!r}")
    dist = bhattacharyya(means, variances, means, variances).cpu().numpy()
    w = weights.double().cpu().numpy()
    remaining = list(range(len(w)))
    clusters: list[list[int]] = []
    while remaining:
        seed = max(remaining, key=lambda i: (w[i], -i))
        members = [seed]
        remaining.remove(seed)
        while True:
            cand = [p for p in remaining if all(dist[p, q] < threshold for q in members)]
            if not cand:
                break
            if add == "batch":
                members += cand
                remaining = [p for p in remaining if p not in cand]
            else:
                p = min(cand, key=lambda p: (max(dist[p, q] for q in members), p))
                members.append(p)
                remaining.remove(p)
        clusters.append(members)
    mu, var, wt = means.double(), variances.double(), weights.double()
    out_m, out_v, out_w = [], [], []
    for members in clusters:
        idx = torch.tensor(members, device=means.device)
        wj = wt[idx]
        total = wj.sum()
        m = (wj.unsqueeze(1) * mu[idx]).sum(0) / total
        v = (wj.unsqueeze(1) * (var[idx] + (mu[idx] - m) ** 2)).sum(0) / total
        out_m.append(m)
        out_v.append(v)
        out_w.append(total)
    return (torch.stack(out_m).to(means.dtype), torch.stack(out_v).to(means.dtype),
            torch.stack(out_w).to(weights.dtype), clusters)


def fuse(components: list[dict], threshold: float, add: str = "sequential") -> tuple[dict, dict]:
    """Algorithm 1 class by class over the components of several uploads (in the given order):
    the global components (rows, classes ascending) and ``{"components", "clusters"}`` counts."""
    cat = {k: torch.cat([c[k] for c in components]) for k in ("means", "vars", "weights", "classes")}
    out = {"means": [], "vars": [], "weights": [], "classes": []}
    for c in torch.unique(cat["classes"]).tolist():
        sel = cat["classes"] == c
        m, v, w, _ = fuse_class(cat["means"][sel], cat["vars"][sel], cat["weights"][sel], threshold, add)
        out["means"].append(m)
        out["vars"].append(v)
        out["weights"].append(w)
        out["classes"].append(torch.full((len(w),), c, dtype=torch.int64, device=w.device))
    fused = {k: torch.cat(v) for k, v in out.items()}
    return fused, {"components": len(cat["classes"]), "clusters": len(fused["classes"])}


def sample(means: torch.Tensor, variances: torch.Tensor, weights: torch.Tensor, classes: torch.Tensor,
           per_class: int, gen: torch.Generator,
           which: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``per_class`` draws from every class's mixture (or the classes in ``which``): a component
    with probability weight / class weight, then ``mean + sqrt(var) * N(0, I)``. Returns
    ``(features (n, d), labels (n,))``, class by class (shuffle before training). Drawn on the CPU
    with ``gen`` and moved to the components' device."""
    feats, labels = [], []
    todo = torch.unique(classes) if which is None else torch.unique(which)
    m, v, w, cl = (t.detach().cpu() for t in (means, variances, weights, classes))
    for c in todo.tolist():
        sel = torch.nonzero(cl == c).flatten()
        if not len(sel):
            continue
        pick = sel[torch.multinomial(w[sel].double() / w[sel].double().sum(), per_class, replacement=True,
                                     generator=gen)]
        eps = torch.randn(per_class, m.shape[1], generator=gen)
        feats.append(m[pick] + v[pick].sqrt() * eps)
        labels.append(torch.full((per_class,), c, dtype=torch.int64))
    if not feats:
        return means[:0], classes[:0]
    return torch.cat(feats).to(means.device), torch.cat(labels).to(means.device)
