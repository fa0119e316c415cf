"""FedIC: Zheng, Song, Hu, Zheng, Yang, Xu, Zhao, Pu, Fang, Wang, "Intra-Class Unbiased Prototype
Aggregation and Classifier Collaboration for Personalized Federated Learning", AAAI 2026.

FedPAC's round (:mod:`fedlib.algorithms.fedpac`: shared extractor, personal heads, two-stage local
update, head combination by a quadratic program) with two changes on the server:

- intra-class prototype clusters (Eqs. 6-8): for every class c, the prototypes P_i^c of the clients
  holding c are clustered into K_c = min(K, holders) groups by cosine similarity (Eq. 6); each
  group's prototype is its count-weighted mean (Eq. 7); client i's anchor for class c is the
  prototype of its own group when it holds c, else the count-weighted global prototype (Eqs. 3, 8).
  The client then trains CE + ``lam`` x MSE(z, A_i^y) (Eqs. 9-10).
- in-cluster classifier collaboration (Eqs. 11-12): client i's head is a convex combination of the
  heads of the clients that share a cluster with it, weights from FedPAC's quadratic program.

Decisions where the paper is silent (docs/fedic.md):

- ``cluster: agglomerative`` (default): average-linkage agglomerative clustering on cosine distance,
  deterministic and suited to the 2-14 prototypes of a class; ``kmeans``: spherical k-means
  (k-means on L2-normalised prototypes, 10 seeded restarts). Re-clustered every round.
- ``collab: cluster`` (default): one set per client, {i} and every client in one of i's clusters
  of any class, one QP over it, whole heads combined (Eq. 11's single beta_i); ``class``: for each
  class c the row c of the head (weights and bias) is combined over i's cluster of class c with a QP
  on class-c statistics only (rows of classes i does not hold stay its own); ``all``: every client
  (FedPAC); ``none``: own head (the ablation without collaboration).
- Eq. 12's solver: FedPAC's QP on the server (the paper says the extra work is server-side only).
  ``stats: trained`` (default): V_i is computed in the prototype pass after training and h_i^c =
  p_i(c) P_i^c is derived on the server from the prototypes and counts, so only the scalar V_i is
  uploaded besides FedPAC-free payloads (which matches the paper's lower traffic than FedPAC);
  ``received`` computes both before training with the received model and uploads h (FedPAC code).
- ``lam`` 1 with ``nn.MSELoss`` (the mean over batch and feature dimensions: Eq. 9 summed over the
  d features is lam / d of that); the paper gives no value.
- K = 1 makes every anchor the global prototype (FedPAC's alignment).

Up: as FedPAC (``w.*``, ``num_samples``, ``protos``, ``classes``, ``counts``, ``v``; ``h`` only
with ``stats: received``). Down: the global extractor and the client's combined head (``w.*``), its
anchors ``protos`` (k, d) and ``classes`` (k,). Inference: the client's combined head on the global
extractor.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed
from fedlib.algorithms.fedpac import HEAD, FedPAC, simplex_qp
from fedlib.validation import Interval, Options


def cosine_clusters(protos: torch.Tensor, k: int, method: str = "agglomerative", seed: int = 0) -> np.ndarray:
    """Labels (m,) of ``m`` prototypes in ``min(k, m)`` groups by cosine similarity, numbered by
    first appearance (the group of row 0 is 0).

    ``agglomerative``: average linkage on the cosine distance 1 - cos (a zero vector is at distance 1
    from everything); ``kmeans``: k-means on the L2-normalised rows (10 restarts seeded by ``seed``)."""
    m = len(protos)
    k = min(k, m)
    if k <= 1:
        return np.zeros(m, dtype=np.int64)
    x = protos.double().cpu().numpy()
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    if method == "kmeans":
        from sklearn.cluster import KMeans

        raw = KMeans(n_clusters=k, n_init=10, random_state=seed % 2**32).fit_predict(unit)
    else:
        from scipy.cluster.hierarchy import fcluster, linkage

        dist = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
        cond = dist[np.triu_indices(m, 1)]
        raw = fcluster(linkage(cond, method="average"), t=k, criterion="maxclust")
    order = {}
    return np.array([order.setdefault(r, len(order)) for r in raw], dtype=np.int64)


@register
@dataclasses.dataclass(frozen=True)
class FedIC(FedPAC):
    K: int = 3                      # clusters per class (paper Fig. 2: 3 for 10-class data, 5 for CIFAR-100)
    cluster: str = "agglomerative"  # "agglomerative" (average linkage, cosine) | "kmeans" (spherical)
    collab: str = "cluster"         # "cluster" | "class" | "all" (FedPAC) | "none"
    stats: str = "trained"          # V_i after training, h from prototypes (nothing extra uploaded but V_i)
    name = "fedic"
    CONSTRAINTS = {"K": Interval(1, None, integer=True), "cluster": Options(("agglomerative", "kmeans")),
                   "collab": Options(("cluster", "class", "all", "none"))}

    def cluster_labels(self, ctx, protos, holders, rnd):
        C, N = holders.shape
        labels = torch.full((C, N), -1, dtype=torch.int64, device=holders.device)
        for c in range(C):
            idx = torch.nonzero(holders[c]).flatten()
            if len(idx):
                lab = cosine_clusters(protos[idx, c], self.K, self.cluster, derive_seed(rnd.seed, 31, rnd.index, c))
                labels[c, idx] = torch.as_tensor(lab, device=holders.device)
        return labels

    def supports(self, labels, ids):
        if self.collab != "cluster":
            return super().supports(labels, ids)
        out = {}
        for i in ids:
            mates = {i}
            for c in torch.nonzero(labels[:, i] >= 0).flatten().tolist():
                mates |= set(torch.nonzero(labels[c] == labels[c, i]).flatten().tolist())
            out[i] = sorted(j for j in mates if j in ids)
        return out

    def combine_heads(self, ctx, server, uploads, ids, labels, P, n):
        if self.collab != "class":
            return super().combine_heads(ctx, server, uploads, ids, labels, P, n)
        N, C = ctx.num_clients, ctx.num_classes
        v, h = self.stat_tables(uploads, ids, N, C, P, n)
        heads = list(server["heads"])
        beta = torch.zeros(N, N, device=P.device)        # mean over i's classes of the class-wise weights
        own = {i: {k: x for k, x in uploads[i].items() if k.startswith(HEAD)} for i in ids}
        for i in ids:
            new = {k: x.clone() for k, x in own[i].items()}
            held = torch.nonzero(labels[:, i] >= 0).flatten().tolist()
            for c in held:
                group = [j for j in torch.nonzero(labels[c] == labels[c, i]).flatten().tolist() if j in ids]
                diff = h[i, c][None] - h[group, c]
                b = simplex_qp(np.diag(v[group]) + diff @ diff.T, self.cutoff) if len(group) > 1 else None
                if b is None:
                    group, b = [i], np.ones(1)
                for k in new:
                    new[k][c] = sum(float(bj) * own[j][k][c] for j, bj in zip(group, b, strict=True) if bj > 0)
                beta[i, group] += torch.tensor(b, dtype=beta.dtype, device=beta.device) / max(len(held), 1)
            heads[i] = new
        return heads, beta
