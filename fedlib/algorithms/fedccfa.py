"""FedCCFA: Junbao Chen, Jingfeng Xue, Yong Wang, Zhenyan Liu, Lu Huang, "Classifier Clustering and Feature
Alignment for Federated Learning under Distributed Concept Drift", NeurIPS 2024, arXiv 2410.18478; a baseline of
FedIC (Table 1).

The model is a feature extractor f_theta (everything outside ``model.head``, shared) and a classifier phi_i
(``model.head``, personal). One round of client i:

1. Balanced classifier (the clustering probe): the server's classifier (its initialisation, sent every round
   as in the authors' code) is trained on the global extractor for ``balanced_epochs`` on a class-balanced
   subset of the local data, ``min(n_min, balanced_per_class)`` samples of every held class (n_min: the
   smallest held class); its class rows phi^b_{i,c} are uploaded.
2. Decoupled training from the global extractor and the personal classifier: the classifier alone for
   ``clf_epochs`` with cross-entropy, then the extractor alone for the run's ``local_epochs`` with

       L_i = CE + lambda_i R_i,   lambda_i = H(P_i(Y)) / gamma,   H(P_i(Y)) = -sum_c p_{i,c} log p_{i,c}

   (the adaptive weight, the entropy of the client's label distribution; ``gamma: 0`` uses the fixed weight
   ``lam``), R_i the alignment of each feature z = f_theta(x) of class y to the client's class anchors a_c:

       contrastive (default):  R = -log( exp(cos(z, a_y) / tau) / sum_c exp(cos(z, a_c) / tau) ),
       l2:                     R = ||z - a_y||^2 (mean over dimensions and batch),

   applied from round ``align_start`` on.
3. Local anchors: the class means of its features after training; it uploads the extractor, its classifier's
   class rows phi_{i,c} = [W_c, b_c] of the last Linear, the balanced rows and the anchors with class counts.

Server: the extractor is averaged (sample-count weights; ``weighted: false``: plain mean). For each class c
the uploaders' balanced rows are clustered: the MADD distance

    d(i, j) = 1 / (n - 2) sum_{z != i, j} | cos(phi^b_{i,c}, phi^b_{z,c}) - cos(phi^b_{j,c}, phi^b_{z,c}) |

and DBSCAN (``eps``, min_samples 1: the groups are the connected components of d <= eps). Within every group
of two or more clients the personal class-c rows are averaged (plain; class-count weights with
``class_weighted: true``) and replace each member's row, and the members' class-c local anchors are averaged
into the group's clustered anchor; a client alone in its group keeps its row and its own anchor
(``clustered_anchors: false``: every client's anchors are instead the per-class means over all uploaders that
hold the class). These come back in the same round (``reply``), as the authors' server writes them into the
clients' models; only the round's participants are clustered, and a client not sampled keeps its classifier
and anchors.

Inference: the client's classifier (after the last merge) on the global extractor.

Up: the extractor ``w.*``, ``num_samples``, ``rows`` (C, e) and ``probe`` (C, e) (e: the last Linear's input
width + 1), local anchors ``protos`` (k, d), ``classes`` (k,), ``counts`` (k,). Down: the global extractor
``w.*`` and the server classifier ``b.*`` (the balanced classifier's start; not sent when ``balanced_epochs: 0``);
reply: the merged rows ``rows`` (k, e) with ``row_classes`` (k,) and the clustered anchors ``anchors`` (m, d) with
``anchor_classes`` (m,).

Defaults are the authors' released configuration: ``clf_epochs: 1``, ``balanced_epochs: 5``,
``balanced_per_class: 5``, ``eps: 0.1``, ``gamma: 20`` (adaptive weight), ``lam: 0``, ``align: contrastive``,
``temperature: 0.1``, ``align_start: 21`` (the code aligns from its 0-based round 20), ``clustered_anchors: true``,
``class_weighted: false`` (their ``weights: uniform``), the extractor averaged with sample counts
(``weighted: true``), and ``head_lr_scale: 10``: the classifier phases (balanced and personal) use 10 x the run's
learning rate (their 0.1 against 0.01 for the extractor).

Choices and simplifications:

- Clients that hold only some classes (the code assumes every client holds every class): the balanced subset
  covers the held classes; a class without anchor is left out of the contrastive softmax and a sample whose
  class has no anchor adds no alignment; a clustered anchor averages the group members that hold the class
  (none: no anchor is sent); class-count weights fall back to the plain mean for a group that holds no sample
  of the class; 0 log 0 = 0 in the entropy.
- MADD needs three clients; with two uploaders d is 1 - cos (the two terms z = i, j of the sum).
- The classifier is ``model.head``; the rows clustered and merged are those of its last Linear (weight row
  and bias). A hidden head layer (``cnn_cifar``) stays personal and trains in the classifier phases. The
  anchors live at the ``high`` level, the head's input.
- The run's SGD settings (momentum, weight decay, batch size, one batch-order generator for every phase) in
  all phases instead of the code's momentum 0.9, weight decay 1e-5 and batch 64; the extractor trains for the
  run's ``local_epochs`` (the code: 5).
- Local anchors come from an eval-mode pass after training (the code leaves the model in train mode).
- The data never drift in this simulator; the entropy weight is computed every round as in the code. The final
  fine-tuning of the code (commented out there) is not done.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import (Algorithm, ClientData, mean_params, model_message, sample_weights, sgd_epochs,
                                    weights)
from fedlib.algorithms.fedper import base_only
from fedlib.prototypes import aggregate_protos, eval_class_means, proto_regulariser
from fedlib.validation import BOOL, Interval, Options


def madd(v: torch.Tensor) -> torch.Tensor:
    """MADD distances (n, n) between the rows of ``v`` (n, e), from their cosine similarities; with
    n = 2, 1 - cos."""
    v = v.detach().to(torch.float64)
    cos = F.cosine_similarity(v.unsqueeze(1), v.unsqueeze(0), dim=2)
    n = len(v)
    if n < 3:
        return (1 - cos).fill_diagonal_(0).clamp(min=0)
    diff = (cos.unsqueeze(1) - cos.unsqueeze(0)).abs()            # [i, j, z] = |cos(i, z) - cos(j, z)|
    ar = torch.arange(n, device=v.device)
    keep = (ar.view(1, 1, n) != ar.view(n, 1, 1)) & (ar.view(1, 1, n) != ar.view(1, n, 1))
    return (diff * keep).sum(2) / (n - 2)


def cluster_classifiers(v: torch.Tensor, eps: float) -> np.ndarray:
    """Group labels (n,) of one class's classifier rows ``v`` (n, e): DBSCAN (min_samples 1) on MADD."""
    if len(v) == 1:
        return np.zeros(1, dtype=np.int64)
    from sklearn.cluster import DBSCAN

    return DBSCAN(eps=eps, min_samples=1, metric="precomputed").fit(madd(v).cpu().numpy()).labels_.astype(np.int64)


def alignment(z: torch.Tensor, y: torch.Tensor, anchors: torch.Tensor, present: torch.Tensor, kind: str,
              tau: float) -> torch.Tensor:
    """R (mean over the batch): ``z`` (B, d) features, ``anchors`` (C, d) with ``present`` (C,).
    ``contrastive``: cross-entropy of cos(z, a_c) / tau over the present classes; ``l2``: MSE to a_y.
    A sample whose class has no anchor contributes zero."""
    if kind == "l2":
        return proto_regulariser(z, y, anchors, present, "mse")
    sims = F.cosine_similarity(z.unsqueeze(1), anchors.unsqueeze(0), dim=2) / tau
    logp = sims.masked_fill(~present.unsqueeze(0), float("-inf")).log_softmax(dim=1)
    per = -logp.gather(1, y.unsqueeze(1)).squeeze(1)
    return torch.where(present[y], per, torch.zeros_like(per)).mean()


def entropy_weight(y: torch.Tensor, num_classes: int, gamma: float, lam: float) -> float:
    """lambda_i = H(P_i(Y)) / gamma (natural log, 0 log 0 = 0); ``lam`` when gamma = 0."""
    if gamma == 0:
        return lam
    counts = torch.bincount(y, minlength=num_classes).to(torch.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum()) / gamma


def last_linear(model: nn.Module) -> tuple[str, str | None]:
    """State-dict keys ``(weight, bias)`` of the last Linear of ``model.head``."""
    name = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and (n == "head" or n.startswith("head."))]
    lin = model.get_submodule(name[-1])
    return name[-1] + ".weight", (name[-1] + ".bias" if lin.bias is not None else None)


def class_rows(state: dict, keys: tuple[str, str | None]) -> torch.Tensor:
    """(C, e): every class's row of the last Linear, its bias appended."""
    w = state[keys[0]].detach()
    return w.clone() if keys[1] is None else torch.cat([w, state[keys[1]].detach().unsqueeze(1)], dim=1)


@register
@dataclasses.dataclass(frozen=True)
class FedCCFA(Algorithm):
    clf_epochs: int = 1              # classifier epochs before the extractor's (code clf_epochs)
    balanced_epochs: int = 5         # balanced-classifier epochs (code balanced_epochs); 0: cluster the trained rows
    balanced_per_class: int = 5      # at most this many samples per class in the balanced subset (code: 5)
    head_lr_scale: float = 10.0      # classifier lr / run lr (code: clf_lr 0.1, rep_lr 0.01)
    eps: float = 0.1                 # DBSCAN radius on MADD (code eps)
    gamma: float = 20.0              # adaptive weight H / gamma (code gamma); 0: the fixed weight lam
    lam: float = 0.0                 # fixed alignment weight when gamma = 0 (code lambda)
    align: str = "contrastive"       # "contrastive" (code penalize: CL) or "l2"
    temperature: float = 0.1         # contrastive alignment temperature (code temperature)
    align_start: int = 21            # first round with alignment (code: 0-based round >= 20)
    clustered_anchors: bool = True   # cluster-level anchors (code clustered_protos) or global ones
    class_weighted: bool = False     # merged rows / anchors weighted by class counts (code weights: uniform)
    weighted: bool = True            # extractor average weighted by sample counts (code aggregate_rep)
    name = "fedccfa"
    CONSTRAINTS = {"clf_epochs": Interval(0, None, integer=True), "balanced_epochs": Interval(0, None, integer=True),
                   "balanced_per_class": Interval(1, None, integer=True),
                   "head_lr_scale": Interval(0, None, low_open=True), "eps": Interval(0, None, low_open=True),
                   "gamma": Interval(0, None), "lam": Interval(0, None), "align": Options(("contrastive", "l2")),
                   "temperature": Interval(0, None, low_open=True), "align_start": Interval(1, None, integer=True),
                   "clustered_anchors": BOOL, "class_weighted": BOOL, "weighted": BOOL}
    UPLOAD = {"w.*": "float[...]", "num_samples": "int", "rows": "float[C, e]", "probe?": "float[C, e]",
              "protos": "float[k, d]", "classes": "int[k]", "counts": "int[k]"}
    BROADCAST = {"w.*": "float[...]", "b.*": "float[...]"}
    REPLY = {"rows?": "float[k, e]", "row_classes?": "int[k]", "anchors?": "float[m, d]", "anchor_classes?": "int[m]"}

    # -- state ---------------------------------------------------------------------------
    def init_client(self, ctx, cid):
        model = ctx.new_model(None)  # every client starts from the server's model (the code sends all of it)
        d = model.feature_dims["high"]
        return {"model": weights(model), "anchors": torch.zeros(ctx.num_classes, d, device=ctx.device),
                "present": torch.zeros(ctx.num_classes, dtype=torch.bool, device=ctx.device)}

    def init_server(self, ctx):
        w = model_message(ctx.new_model(None))
        return {"weights": base_only(w), "head": {"b." + k[2:]: v for k, v in w.items() if k.startswith("w.head.")},
                "reply": {}}

    def broadcast(self, ctx, server, cid, rnd):
        return {**server["weights"], **(server["head"] if self.balanced_epochs > 0 else {})}

    # -- client --------------------------------------------------------------------------
    def batch_support(self):
        return ("a first phase on a balanced subset of the data (not the client's batches), whose head is read off "
                "between the phases")

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.module(ctx, cid, self.predict_weights(ctx, cid, client, msg))
        keys = last_linear(model)
        gen, lr = rnd.generator(cid), ctx.train.round_lr(rnd)
        head = {id(p) for p in model.head.parameters()}

        def phase(part, epochs, d, loss_fn, rate):
            for p in model.parameters():
                p.requires_grad_((id(p) in head) == (part == "head"))
            phase_ctx = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, local_epochs=epochs))
            return sgd_epochs(phase_ctx, model, d, gen, loss_fn, lr=rate)

        def ce(xb, yb, epoch):
            return F.cross_entropy(model(xb)[0], yb)

        probe = None
        if self.balanced_epochs > 0:  # 1. the balanced classifier from the server's classifier
            self._load(model, {k[2:]: v for k, v in msg.items() if k.startswith("b.")})
            phase("head", self.balanced_epochs, self.balanced_subset(data, gen), ce, lr * self.head_lr_scale)
            probe = class_rows(model.state_dict(), keys)
            self._load(model, {k: v for k, v in client["model"].items() if k.startswith("head.")})
        if self.clf_epochs > 0:       # 2. the personal classifier, then the extractor
            phase("head", self.clf_epochs, data, ce, lr * self.head_lr_scale)
        weight = 0.0
        if rnd.index >= self.align_start and bool(client["present"].any()):
            weight = entropy_weight(data.y, ctx.num_classes, self.gamma, self.lam)
        anchors, present = client["anchors"], client["present"]

        def loss_fn(xb, yb, epoch):
            logits, feats = model(xb)
            loss = F.cross_entropy(logits, yb)
            if weight > 0:
                loss = loss + weight * alignment(feats["high"], yb, anchors, present, self.align, self.temperature)
            return loss

        loss = phase("body", ctx.train.local_epochs, data, loss_fn, lr)
        model.requires_grad_(True)
        acc = eval_class_means(model, data, ctx.num_classes, ("high",))["high"]   # 3. local anchors
        up = {**base_only(model_message(model)), "num_samples": len(data), "rows": class_rows(model.state_dict(), keys),
              **acc.message()}
        if probe is not None:
            up["probe"] = probe
        held = acc.counts > 0
        own = torch.where(held.unsqueeze(1), acc.sums / acc.counts.clamp(min=1).unsqueeze(1), 0.0)
        state = {"model": weights(model), "anchors": own, "present": held}
        return state, up, {"train_loss": loss, "align_weight": weight}

    @staticmethod
    def _load(model: nn.Module, tensors: dict) -> None:
        state = model.state_dict()
        with torch.no_grad():
            for k, v in tensors.items():
                state[k].copy_(v)

    def balanced_subset(self, data: ClientData, gen: torch.Generator) -> ClientData:
        """``min(n_min, balanced_per_class)`` samples of every held class, drawn with ``gen``."""
        y = data.y.cpu()
        held = torch.unique(y)
        m = min(int((y == held.unsqueeze(1)).sum(1).min()), self.balanced_per_class)
        idx = []
        for c in held.tolist():
            members = torch.nonzero(y == c).flatten()
            idx.append(members[torch.randperm(len(members), generator=gen)[:m]])
        idx = torch.cat(idx).to(data.y.device)
        return ClientData(data.cid, data.x[idx], data.y[idx], data.classes)

    def receive(self, ctx, cid, client, msg, data, rnd):
        state, anchors, present = dict(client["model"]), client["anchors"], client["present"]
        if "rows" in msg:
            wk, bk = last_linear(self.module(ctx, cid, state))
            cls, rows = msg["row_classes"], msg["rows"]
            w = state[wk].clone()
            w[cls] = rows[:, :w.shape[1]]
            state[wk] = w
            if bk is not None:
                b = state[bk].clone()
                b[cls] = rows[:, -1]
                state[bk] = b
        if "anchors" in msg:
            anchors, present = anchors.clone(), present.clone()
            anchors[msg["anchor_classes"]] = msg["anchors"]
            present[msg["anchor_classes"]] = True
        return {"model": state, "anchors": anchors, "present": present}, {}

    # -- server --------------------------------------------------------------------------
    def aggregate(self, ctx, server, uploads, rnd):
        ids = sorted(uploads)
        if not ids:
            return server, {}
        msgs = [uploads[c] for c in ids]
        glob = mean_params(msgs, server["weights"], sample_weights(msgs, self.weighted))
        n, C = len(ids), ctx.num_classes
        rows = torch.stack([u["rows"] for u in msgs])                        # (n, C, e)
        probes = torch.stack([u.get("probe", u["rows"]) for u in msgs])
        d = msgs[0]["protos"].shape[1]
        counts = torch.zeros(n, C, device=rows.device)
        anchors = torch.zeros(n, C, d, device=rows.device)
        for i, u in enumerate(msgs):
            counts[i, u["classes"]] = u["counts"].to(counts.dtype)
            anchors[i, u["classes"]] = u["protos"]
        merged_rows = [([], []) for _ in ids]
        merged_anchors = [([], []) for _ in ids]
        groups = 0
        for c in range(C):
            labels = cluster_classifiers(probes[:, c], self.eps)
            groups += len(set(labels.tolist()))
            for g in sorted(set(labels.tolist())):
                members = torch.from_numpy(np.nonzero(labels == g)[0]).to(rows.device)
                if len(members) < 2:
                    continue
                w = counts[members, c] if self.class_weighted and counts[members, c].sum() > 0 \
                    else torch.ones(len(members), device=rows.device)
                row = (w.unsqueeze(1) * rows[members, c]).sum(0) / w.sum()
                hold = counts[members, c] > 0
                anchor = None
                if self.clustered_anchors and hold.any():
                    wa = (counts[members, c] if self.class_weighted else hold.to(counts.dtype)) * hold
                    anchor = (wa.unsqueeze(1) * anchors[members, c]).sum(0) / wa.sum()
                for i in members.tolist():
                    merged_rows[i][0].append(c)
                    merged_rows[i][1].append(row)
                    if anchor is not None:
                        merged_anchors[i][0].append(c)
                        merged_anchors[i][1].append(anchor)
        if not self.clustered_anchors:
            table, present = aggregate_protos(msgs, C, self.class_weighted)
            classes = torch.nonzero(present).flatten().tolist()
            merged_anchors = [(classes, [table[c] for c in classes]) for _ in ids]
        reply = {}
        for i, cid in enumerate(ids):
            msg = {}
            for (cls, vals), key, ckey in ((merged_rows[i], "rows", "row_classes"),
                                           (merged_anchors[i], "anchors", "anchor_classes")):
                if cls:
                    msg[key] = torch.stack(vals)
                    msg[ckey] = torch.tensor(cls, dtype=torch.int64, device=rows.device)
            reply[cid] = msg
        return {**server, "weights": glob, "reply": reply}, {"clusters_per_class": groups / C}

    def reply(self, ctx, server, cid, rnd):
        return server["reply"].get(cid)

    # -- inference -----------------------------------------------------------------------
    def predict_weights(self, ctx, cid, client, msg):
        """The client's model (its classifier) on the global extractor."""
        return {**client["model"], **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}}
