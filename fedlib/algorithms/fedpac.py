"""FedPAC: Xu, Tong, Huang, "Personalized Federated Learning with Feature Alignment and Classifier
Collaboration", ICLR 2023 (arXiv 2306.11867); a FedIC Table 1 baseline and FedIC's parent.

Each client model is a feature extractor (every layer outside ``model.head``) and a linear head.
A round, as in PFLlib's port of FedPAC:

- client: loads the global extractor and its personalised head from the broadcast; with
  ``stats: received`` computes the statistics of the head-weight problem on its training data
  with the received model (the scalar V_i and h_i^c = p_i(c) mu_i^c); trains the head alone for
  ``head_epochs`` with cross-entropy (extractor frozen), then the extractor for the run's local
  epochs with the head frozen on CE + ``lam`` x MSE(z, A_i^y) (paper Eq. 6; ``nn.MSELoss``, the
  mean over batch and feature dimensions; no alignment term before anchors exist, i.e. round 1);
  then computes its class prototypes P_i^c (class means of the features, eval mode, over its
  training data) and uploads model, prototypes, class counts and statistics;
- server: averages the extractors (sample-count weights), averages each class's prototypes over
  its holders (count weights, paper Eq. 7; ``weighted: false``: plain mean, PFLlib), and gives
  every client i the head hat phi_i = sum_j beta_ij phi_j whose weights solve (paper Eq. 10)

      min_beta  sum_j beta_j^2 V_j + sum_c || h_i^c - sum_j beta_j h_j^c ||^2,
      beta >= 0, sum_j beta_j = 1,

  the quadratic program beta^T (diag(V) + D^(i)) beta with D^(i)_{jk} = sum_c <h_i^c - h_j^c,
  h_i^c - h_k^c> (:func:`simplex_qp`, scipy's SLSQP). As in the FedPAC code: a Q that is not
  positive semi-definite is rebuilt from its eigenpairs with eigenvalue >= 0.01; weights below
  ``cutoff`` (1e-3) are set to 0 and the rest are not renormalised; a client whose problem has
  no solution keeps its own head.
- inference: the global extractor under the client's combined head (PFLlib evaluates the model a
  client receives at the start of the next round).

The server's per-client anchors A_i (the global prototypes here) and the set of clients whose
heads may enter client i's combination are hooks (:meth:`FedPAC.cluster_labels`, ``collab``)
that FedIC overrides. Defaults follow FedIC's setting (PFLlib: lr 0.005, batch 10, no momentum,
``lam`` 1). ``collab: none`` keeps every head local (FedPAC without classifier collaboration).

Up: ``w.*`` (extractor and head), ``num_samples``, ``protos`` (k, d), ``classes`` (k,), ``counts``
(k,), ``v`` and, with ``stats: received``, ``h`` (C, d). Down: the global extractor and the
client's head (``w.*``) and its anchors ``protos`` (k', d), ``classes`` (k').
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import (Algorithm, LocalTask, Phase, mean_params, model_message, sample_weights,
                                   weights)
from fedlib.prototypes import ProtoTable, proto_regulariser, rows_message
from fedlib.validation import BOOL, Interval, Options

HEAD = "w.head."


def feature_statistics(model, data, num_classes: int, chunk: int = 1024) -> dict:
    """One eval-mode pass over ``data``: per-class feature means (C, d), counts (C,) and the
    scalar V of FedPAC (its Eq. 9 estimate of the feature variance term):

        V = (1/n) sum_c [ p(c) E_c ||z||^2 - p(c)^2 ||mu_c||^2 ],   p(c) = n_c / n.
    """
    d = model.feature_dims["high"]
    sums = torch.zeros(num_classes, d, device=data.x.device, dtype=torch.float64)
    sq = torch.zeros(num_classes, device=data.x.device, dtype=torch.float64)
    counts = torch.bincount(data.y, minlength=num_classes)
    model.eval()
    with torch.no_grad():
        for s in range(0, len(data), chunk):
            z = model(data.x[s:s + chunk])[1]["high"].double()
            y = data.y[s:s + chunk]
            sums.index_add_(0, y, z)
            sq.index_add_(0, y, (z * z).sum(1))
    n = max(len(data), 1)
    held = counts.clamp(min=1).double()
    means = sums / held.unsqueeze(1)
    p = counts.double() / n
    v = float(((p * sq / held) - p * p * (means * means).sum(1)).sum() / n)
    return {"means": means.float(), "counts": counts, "v": v}


def simplex_qp(Q: np.ndarray, cutoff: float = 1e-3) -> np.ndarray | None:
    """``argmin_b b^T Q b`` over the probability simplex (FedPAC's head weights), or ``None``.

    A ``Q`` with a negative eigenvalue is first rebuilt from its eigenpairs with eigenvalue >= 0.01
    (the FedPAC code's repair); weights below ``cutoff`` are set to 0 afterwards (not renormalised,
    as in the code). Solved with scipy's SLSQP on ``Q`` scaled to unit largest diagonal (the
    minimiser does not change under a positive scale)."""
    from scipy.optimize import minimize

    Q = 0.5 * (Q + Q.T)
    evals, evecs = np.linalg.eigh(Q)
    if evals.min() < 0:
        keep = evals >= 0.01
        Q = (evecs[:, keep] * evals[keep]) @ evecs[:, keep].T
    m = len(Q)
    if m == 1:
        return np.ones(1)
    scale = float(np.abs(np.diag(Q)).max())
    if not np.isfinite(scale):
        return None
    Qs = Q / scale if scale > 0 else Q
    res = minimize(lambda b: b @ Qs @ b, np.full(m, 1.0 / m), jac=lambda b: 2 * Qs @ b, method="SLSQP",
                   bounds=[(0.0, 1.0)] * m,
                   constraints=[{"type": "eq", "fun": lambda b: b.sum() - 1.0, "jac": lambda b: np.ones(m)}],
                   options={"ftol": 1e-12, "maxiter": 500})
    if not res.success:
        return None
    b = np.clip(res.x, 0.0, None)
    return np.where(b >= cutoff, b, 0.0)


def head_qp_matrix(v: np.ndarray, h: np.ndarray, i: int, support: list[int]) -> np.ndarray:
    """``diag(V) + D^(i)`` over ``support`` (FedPAC Eq. 10): ``v`` (N,), ``h`` (N, C, d)."""
    diff = (h[i][None] - h[support]).reshape(len(support), -1)
    return np.diag(v[support]) + diff @ diff.T


@register
@dataclasses.dataclass(frozen=True)
class FedPAC(Algorithm):
    lam: float = 1.0            # alignment weight (PFLlib -lam 1, nn.MSELoss)
    head_epochs: int = 1        # the head-only phase before the extractor phase
    weighted: bool = True       # prototypes averaged with class-count weights (paper); false: plain mean
    collab: str = "all"         # which heads may enter a client's combination: all clients, or none (own head)
    stats: str = "received"     # V and h from the received model before training (FedPAC code) or "trained"
    cutoff: float = 1e-3        # head weights below this are zeroed (FedPAC code)
    name = "fedpac"
    CONSTRAINTS = {"lam": Interval(0, None), "head_epochs": Interval(0, None, integer=True), "weighted": BOOL,
                   "collab": Options(("all", "none")), "stats": Options(("received", "trained")),
                   "cutoff": Interval(0, 1)}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "protos": "float[k, d]", "classes": "int[k]",
              "counts": "int[k]", "v": "float", "h?": "float[C, d]"}
    BROADCAST = {"w.*": "float[...]", "protos?": "float[k, d]", "classes?": "int[k]"}

    # -- server-side hooks (FedIC) ---------------------------------------------------------------
    def cluster_labels(self, ctx, protos: torch.Tensor, holders: torch.Tensor, rnd) -> torch.Tensor:
        """(C, N) int64 cluster of each holder's class-c prototype, -1 for non-holders. FedPAC:
        one cluster per class (every anchor is the global prototype)."""
        return torch.where(holders, 0, -1).long()

    def supports(self, labels: torch.Tensor, ids: list[int]) -> dict[int, list[int]]:
        """``{i: clients whose heads may enter i's combination}`` among this round's uploaders ``ids``."""
        if self.collab == "none":
            return {i: [i] for i in ids}
        return {i: list(ids) for i in ids}

    # -- state -------------------------------------------------------------------------------------
    def init_server(self, ctx):
        init = model_message(ctx.new_model(None))
        N, C = ctx.num_clients, ctx.num_classes
        head = {k: v for k, v in init.items() if k.startswith(HEAD)}
        return {"base": {k: v for k, v in init.items() if not k.startswith(HEAD)},
                "heads": [dict(head) for _ in range(N)],            # one initial model for all (PFLlib)
                "anchors": torch.zeros(N, C, 0, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device),
                "beta": torch.zeros(N, N, device=ctx.device),
                "labels": torch.full((C, N), -1, dtype=torch.int64, device=ctx.device),
                "history": torch.zeros(0, C, N, dtype=torch.int8, device=ctx.device)}   # labels per round

    def broadcast(self, ctx, server, cid, rnd):
        msg = {**server["base"], **server["heads"][cid]}
        if server["anchors"].shape[-1]:
            msg.update(rows_message(server["anchors"][cid], server["present"]))
        return msg

    def predict_weights(self, ctx, cid, client, msg):
        return {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}

    # -- client ----------------------------------------------------------------------------------
    def task(self, ctx, cid, client, msg, data, rnd):
        start = self.predict_weights(ctx, cid, client, msg)
        received = None
        if self.stats == "received":
            received = feature_statistics(self.module(ctx, cid, start), data, ctx.num_classes)
        table = ProtoTable.from_message(msg, ctx.num_classes)
        extras = {}
        if table is not None and self.lam > 0:
            extras["anchors"], extras["present"] = table.single()
        return LocalTask(start, extras=extras, memo={"received": received},
                         phases=(Phase("head", self.head_epochs), Phase("body", ctx.train.local_epochs)))

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd, phase="body"):
        """The head phase: cross-entropy; the extractor phase: plus ``lam`` x the pull towards the anchors."""
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        if phase == "body" and extras:
            loss = loss + self.lam * proto_regulariser(feats["high"], y, extras["anchors"], extras["present"])
        return loss, {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        received = task.memo["received"]
        after = feature_statistics(model, data, ctx.num_classes)
        classes = torch.nonzero(after["counts"]).flatten()
        up = {**model_message(model), "num_samples": len(data), "protos": after["means"][classes],
              "classes": classes, "counts": after["counts"][classes],
              "v": (received or after)["v"]}
        if received is not None:
            p = received["counts"].float() / max(len(data), 1)
            up["h"] = p.unsqueeze(1) * received["means"]
        out = {"train_loss": metrics["train_loss"]}
        if "head_loss" in metrics:
            out["head_loss"] = metrics["head_loss"]
        return {"model": weights(model)}, up, out

    # -- server ----------------------------------------------------------------------------------
    def aggregate(self, ctx, server, uploads, rnd):
        ids = sorted(uploads)
        if not ids:
            return server, {}
        ups = [uploads[i] for i in ids]
        N, C = ctx.num_clients, ctx.num_classes
        base = mean_params(ups, server["base"], sample_weights(ups, True))
        d = ups[0]["protos"].shape[1]
        dev = ups[0]["protos"].device
        P = torch.zeros(N, C, d, device=dev)               # this round's client prototypes
        n = torch.zeros(N, C, device=dev)                  # and class counts
        for i, u in zip(ids, ups, strict=True):
            P[i, u["classes"]] = u["protos"]
            n[i, u["classes"]] = u["counts"].float()
        holders = (n > 0).T                                # (C, N)
        w = n if self.weighted else (n > 0).float()
        tot = w.sum(0)                                     # (C,)
        present = tot > 0
        glob = (w.unsqueeze(2) * P).sum(0) / tot.clamp(min=1e-12).unsqueeze(1)     # Eq. 3 / FedPAC Eq. 7
        labels = self.cluster_labels(ctx, P, holders, rnd)
        anchors = glob.unsqueeze(0).repeat(N, 1, 1)         # Eq. 8: the global prototype where not a holder
        bias_g, bias_k = [], []
        for c in torch.nonzero(present).flatten().tolist():
            for k in labels[c].unique().tolist():
                if k < 0:
                    continue
                members = labels[c] == k
                wk = w[members, c]
                anchors[members, c] = (wk.unsqueeze(1) * P[members, c]).sum(0) / wk.sum().clamp(min=1e-12)  # Eq. 7
            hold = holders[c]
            bias_g.append((P[hold, c] - glob[c]).norm(dim=1))
            bias_k.append((P[hold, c] - anchors[hold, c]).norm(dim=1))
        if server["anchors"].shape[-1]:                    # a client not heard from keeps its anchors
            heard = torch.zeros(N, dtype=torch.bool, device=dev)
            heard[ids] = True
            anchors = torch.where(heard.view(N, 1, 1), anchors, server["anchors"])
            present = present | server["present"]
        heads, beta = self.combine_heads(ctx, server, uploads, ids, labels, P, n)
        metrics = {"bias_global": float(torch.cat(bias_g).mean()) if bias_g else 0.0,
                   "bias_cluster": float(torch.cat(bias_k).mean()) if bias_k else 0.0,
                   "clusters": float(np.mean([len(set(labels[c][holders[c]].tolist())) for c in range(C)
                                              if holders[c].any()])),
                   "collab_size": float((beta[ids] > 0).sum(1).float().mean()),
                   "beta_self": float(beta[ids, ids].mean())}
        return {**server, "base": base, "heads": heads, "anchors": anchors, "present": present,
                "beta": beta, "labels": labels,
                "history": torch.cat([server["history"], labels.unsqueeze(0).to(torch.int8)])}, metrics

    def stat_tables(self, uploads: dict, ids: list[int], N: int, C: int, P: torch.Tensor, n: torch.Tensor):
        """``(v (N,), h (N, C, d))`` as float64 numpy: uploaded ``h`` (``stats: received``) or
        h_i^c = p_i(c) P_i^c from the prototypes and counts (``stats: trained``)."""
        v = np.zeros(N)
        h = np.zeros((N, C, P.shape[2]))
        for i in ids:
            v[i] = uploads[i]["v"]
            if "h" in uploads[i]:
                h[i] = uploads[i]["h"].double().cpu().numpy()
            else:
                h[i] = ((n[i] / max(uploads[i]["num_samples"], 1)).unsqueeze(1) * P[i]).double().cpu().numpy()
        return v, h

    def combine_heads(self, ctx, server, uploads, ids, labels, P, n):
        """Each uploader's combined head (Eq. 10-11 of FedPAC, restricted to :meth:`supports`) and the
        (N, N) weight matrix; the other clients keep their heads."""
        N, C = ctx.num_clients, ctx.num_classes
        heads = list(server["heads"])
        beta = torch.zeros(N, N, device=P.device)
        own = {i: {k: v for k, v in uploads[i].items() if k.startswith(HEAD)} for i in ids}
        v, h = self.stat_tables(uploads, ids, N, C, P, n)
        for i, support in self.supports(labels, ids).items():
            b = simplex_qp(head_qp_matrix(v, h, i, support), self.cutoff) if len(support) > 1 else None
            if b is None:
                heads[i], beta[i, i] = own[i], 1.0
                continue
            beta[i, support] = torch.tensor(b, dtype=beta.dtype, device=beta.device)
            heads[i] = {k: sum(float(bj) * own[j][k] for j, bj in zip(support, b, strict=True) if bj > 0)
                        for k in own[i]}
        return heads, beta
