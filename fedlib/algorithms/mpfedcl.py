"""MP-FedCL: Qiao, Munir, Adhikary, Le, Raha, Zhang, Hong, "MP-FedCL: Multiprototype
Federated Contrastive Learning for Edge Intelligence", arXiv 2304.01950 (IEEE Internet of
Things Journal); SP-FedCL and DP-FedCL are its variants.

Every round each client starts from the global model, trains CE + L_R for E epochs (Eq. 12,
weights 1 : 1), embeds its training data with the updated model and runs k-means per class
(K clusters, Eq. 7): the K centroids are its prototypes of that class. It uploads the model
and the prototypes. The server averages the models (FedAvg, |D_i| / |D|) and builds the
global prototype pool: every client's prototypes grouped by class (Eq. 8), a (client, class)
with fewer than K prototypes filled with the class average Ū_j of the genuine ones (Eqs.
9-10), so the pool is a dense (N, C, K, d) tensor. L_R (Eq. 11) pulls a sample's embedding v
to the pool prototypes of its class and pushes it from the others:

    L_R = -1/(N K) sum_n sum_k log( exp(v . u_{n,y}^k / tau) / sum_a exp(v . u_{n,a}^k / tau) ).

Inference (Eq. 13): no classifier; the class of the nearest pool prototype (l2) to the
client's embedding. Each client predicts with its own model after its last local update and
the pool built from those models (``eval_model: local``; docs/mpfedcl.md, decision 14);
``eval_model: global`` scores the aggregated model against the same pool. ``head`` is also
reported.

Up: the model ``w.*``, ``num_samples``, ``protos`` (m, d) and ``classes`` (m,) (K rows per class
held, a class repeated K times). Down: the global model ``w.*`` and, from round 2 on, ``pool``
(N, C, K, d) and ``pool_classes`` (the classes some client holds). Per round that is the model
plus K x C_i x d floats up (MP-FedCL Table II: 5,120 = 2 x 10 x 256 for a client of all ten
MNIST classes) and the model plus N x C x K x d floats down.

Choices (docs/mpfedcl.md; the paper gives no code):
- The embedding is the model's ``high`` level (the 256-d input of the decision layer, Table II),
  L2-normalised (``normalize: true``) for L_R, the prototypes and inference (FedPCL's head;
  decision 7); ``false`` uses the raw embedding.
- ``loss_form: literal``: Eq. 11 as written, a softmax over the classes of each (client, slot)
  (decision 5); ``pool``: one SupCon over the whole pool (every class-y prototype a positive).
- k-means: scikit-learn, random initial centroids, 10 restarts, seeded by (run, round, client,
  class) (decision 11); a class with fewer than K samples uploads nothing and is padded.
- Padding: Eq. 10 as printed, every slot of an under-filled (client, class) becomes Ū_j;
  DP-FedCL (a variable number of DBSCAN clusters) keeps its real clusters and pads only the
  missing slots up to the round's largest count (decision 23). A class no client holds is
  masked out of L_R and inference.
- Round 1 has no pool: cross-entropy only (decision 9). The pool is rebuilt every round.
- ``clustering: mean`` is SP-FedCL (K = 1, the class mean); ``dbscan`` is DP-FedCL (scikit-learn
  DBSCAN with ``dbscan_eps`` / ``dbscan_min_samples`` on the normalised embeddings; noise
  dropped; no cluster: the class mean).
- The learning-rate decay 0.95 per round is the experiment's ``train.lr_decay`` (decision 16).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import derive_seed, weights
from fedlib.algorithms.fedavg import FedAvg
from fedlib.prototypes import nearest_prototype_scores
from fedlib.validation import BOOL, Interval, Options


def pool_contrastive(v: torch.Tensor, y: torch.Tensor, pool: torch.Tensor, present: torch.Tensor, tau: float,
                     form: str = "literal") -> torch.Tensor:
    """Eq. 11 (mean over the batch): ``v`` (B, d) embeddings, ``pool`` (N, C, K, d), ``present`` (C,)
    classes in the pool; ``form="pool"``: SupCon with every class-y prototype of the pool as a positive.
    A sample whose class is in nobody's pool contributes zero."""
    logits = torch.einsum("bd,nckd->bnkc", v, pool) / tau
    logits = logits.masked_fill(~present.view(1, 1, 1, -1), float("-inf"))
    B, N, K, C = logits.shape
    known = present[y]
    if form == "literal":
        logp_y = logits.log_softmax(dim=-1).gather(-1, y.view(B, 1, 1, 1).expand(B, N, K, 1))
        return -torch.where(known.view(B, 1, 1, 1), logp_y, torch.zeros_like(logp_y)).mean()
    flat = logits.reshape(B, -1)                               # (B, N K C), class index c fastest
    logp = flat - torch.logsumexp(flat, dim=1, keepdim=True)
    pos = (torch.arange(C, device=v.device).repeat(N * K).unsqueeze(0) == y.unsqueeze(1)).to(logp.dtype)
    per = (torch.where(pos > 0, logp, torch.zeros_like(logp)) * pos).sum(1) / pos.sum(1)
    return -torch.where(known, per, torch.zeros_like(per)).mean()


def cluster(z: np.ndarray, k: int, method: str, seed: int, eps: float, min_samples: int, n_init: int,
            init: str) -> np.ndarray:
    """The prototypes of one class's embeddings ``z`` (n, d): k-means centroids, the mean, or
    DBSCAN cluster means (empty when k-means has fewer than ``k`` samples)."""
    if method == "mean":
        return z.mean(0, keepdims=True)
    if method == "kmeans":
        if len(z) < k:
            return z[:0]
        from sklearn.cluster import KMeans

        km = KMeans(n_clusters=k, init=init, n_init=n_init, max_iter=300, tol=1e-4, random_state=seed).fit(z)
        return km.cluster_centers_.astype(z.dtype)
    from sklearn.cluster import DBSCAN

    labels = DBSCAN(eps=eps, min_samples=min_samples).fit(z).labels_
    found = sorted(set(labels) - {-1})
    if not found:
        return z.mean(0, keepdims=True)
    return np.stack([z[labels == c].mean(0) for c in found])


def build_pool(uploads: list[dict], num_classes: int, k: int, pad_all: bool):
    """The global prototype pool (Eqs. 8-10) from the uploads in client order: ``(pool (N, C, K, d),
    present (C,))``. ``pad_all``: a (client, class) with fewer than K prototypes gets Ū_j in every
    slot (Eq. 10); otherwise only its missing slots."""
    first = uploads[0]["protos"]
    d, device = first.shape[1], first.device
    sums = torch.zeros(num_classes, d, device=device)
    counts = torch.zeros(num_classes, device=device)
    for u in uploads:
        sums.index_add_(0, u["classes"], u["protos"])
        counts.index_add_(0, u["classes"], torch.ones(len(u["classes"]), device=device))
    present = counts > 0
    mean = sums / counts.clamp(min=1).unsqueeze(1)                 # Eq. 9: Ū_j
    pool = mean.view(1, num_classes, 1, d).repeat(len(uploads), 1, k, 1)
    for n, u in enumerate(uploads):
        for c in torch.unique(u["classes"]).tolist():
            rows = u["protos"][u["classes"] == c]
            if len(rows) == k or not pad_all:
                pool[n, c, :len(rows)] = rows[:k]
    return pool, present


@register
@dataclasses.dataclass(frozen=True)
class MPFedCL(FedAvg):
    k: int = 2                     # prototypes per class (Table IV: MNIST 2, Digit-5 and Office-10 4, DomainNet 3)
    tau: float = 0.07              # Eq. 11 temperature (Table IV)
    clustering: str = "kmeans"     # "kmeans": MP-FedCL; "mean": SP-FedCL (K = 1); "dbscan": DP-FedCL
    loss_form: str = "literal"     # Eq. 11 as written, or "pool": SupCon over the whole pool
    normalize: bool = True         # L2-normalised embeddings (FedPCL's head; decision 7)
    kmeans_init: str = "random"    # the paper: "randomly select the k centroids"
    kmeans_n_init: int = 10
    dbscan_eps: float = 0.3        # DP-FedCL (not given in the paper; decision 23)
    dbscan_min_samples: int = 3
    level: str = "high"            # the embedding: the decision layer's input
    weighted: bool = True          # FedAvg with |D_i| / |D| (Algorithm 1 line 9)
    eval_model: str = "local"      # each client's own model after its last update (decision 14); "global": ω^{T+1}
    name = "mpfedcl"
    RULES = ("head", "proto")
    CONSTRAINTS = {"k": Interval(1, None, integer=True), "tau": Interval(0, None, low_open=True),
                   "clustering": Options(("kmeans", "mean", "dbscan")), "loss_form": Options(("literal", "pool")),
                   "normalize": BOOL, "kmeans_init": Options(("random", "k-means++")),
                   "kmeans_n_init": Interval(1, None, integer=True), "dbscan_eps": Interval(0, None, low_open=True),
                   "dbscan_min_samples": Interval(1, None, integer=True), "level": Options(("high", "low"))}
    NEUTRAL = {"eval_model": "local"}  # the switch came after the runs, which scored the local models
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "protos": "float[m, d]", "classes": "int[m]"}
    BROADCAST = {"w.*": "float[...]", "pool?": "float[n, C, k, d]", "pool_classes?": "int[c]"}

    def __post_init__(self):
        super().__post_init__()
        if self.clustering == "mean" and self.k != 1:
            from fedlib.validation import ConfigError

            raise ConfigError("algorithm (mpfedcl).k", self.k, "1 with clustering: mean (SP-FedCL)")

    def embed(self, feats: dict) -> torch.Tensor:
        z = feats[self.level]
        return F.normalize(z, dim=1) if self.normalize else z

    # -- client --------------------------------------------------------------------------
    def extras(self, msg):
        if "pool" not in msg:
            return {}
        present = torch.zeros(msg["pool"].shape[1], dtype=torch.bool, device=msg["pool"].device)
        present[msg["pool_classes"]] = True
        return {"pool": msg["pool"], "present": present}

    def local_loss(self, out, y, extras, teachers, params):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        if extras:  # Eq. 12: L_S + L_R, 1 : 1
            loss = loss + pool_contrastive(self.embed(feats), y, extras["pool"], extras["present"], self.tau,
                                           self.loss_form)
        return loss

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        model.eval()
        with torch.no_grad():  # Algorithm 1 line 19: the updated model embeds all local training data
            z = torch.cat([self.embed(model(data.x[s:s + 1024])[1]) for s in range(0, len(data), 1024)])
        zc, yc = z.cpu().numpy(), data.y.cpu().numpy()
        protos, classes = [], []
        for c in np.unique(yc):
            seed = derive_seed(rnd.seed, 9, rnd.index, cid, int(c)) % (2 ** 31)
            p = cluster(zc[yc == c], self.k, self.clustering, seed, self.dbscan_eps, self.dbscan_min_samples,
                        self.kmeans_n_init, self.kmeans_init)
            protos.append(p)
            classes += [int(c)] * len(p)
        up = self.upload(model, data)
        up["protos"] = torch.from_numpy(np.concatenate(protos)).to(z.device)
        up["classes"] = torch.tensor(classes, dtype=torch.int64, device=z.device)
        return {"model": weights(model)}, up, metrics

    # -- server --------------------------------------------------------------------------
    def init_server(self, ctx):
        return {**super().init_server(ctx), "pool": torch.zeros(0, ctx.num_classes, self.k, 0, device=ctx.device),
                "present": torch.zeros(ctx.num_classes, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        msg = dict(server["weights"])
        if server["pool"].numel():
            msg.update(pool=server["pool"], pool_classes=torch.nonzero(server["present"]).flatten())
        return msg

    def aggregate(self, ctx, server, uploads, rnd):
        if not uploads:
            return server, {}
        new = super().aggregate(ctx, server, uploads, rnd)[0]
        ups = [uploads[c] for c in sorted(uploads) if len(uploads[c]["classes"])]
        if not ups:
            return {**server, **new}, {}
        k = self.k
        if self.clustering == "dbscan":  # the round's largest number of clusters of one (client, class)
            k = max(int(torch.bincount(u["classes"]).max()) for u in ups)
        pool, present = build_pool(ups, ctx.num_classes, k, pad_all=self.clustering != "dbscan")
        return {**new, "pool": pool, "present": present}, {"pool_k": k}

    # -- inference -----------------------------------------------------------------------
    def scores(self, ctx, cid, client, msg, logits, feats):
        if "pool" not in msg:
            return {"head": logits, "proto": torch.full_like(logits, float("-inf"))}
        pool = msg["pool"]                                           # (N, C, K, d)
        N, C, K, d = pool.shape
        table = pool.permute(1, 0, 2, 3).reshape(C, N * K, d)        # every prototype of class j
        present = torch.zeros(C, dtype=torch.bool, device=pool.device)
        present[msg["pool_classes"]] = True
        return {"head": logits,
                "proto": nearest_prototype_scores(self.embed(feats), table, present.unsqueeze(1).expand(C, N * K))}
