"""FedMPS: Yang et al., "FedMPS: Federated Learning in a Synergy of Multi-Level
Prototype-Based Contrastive Learning and Soft Label Generation", IEEE TNNLS 2025.

Each client keeps its own model (never averaged) and minimises (Eq. 2)
    CE + lam * (alpha * SupCon_low + beta * SupCon_high) + mu * KL(q_bar_y || q_i),
where SupCon (Eq. 3, :func:`fedlib.losses.supcon_with_prototypes`) contrasts the batch's
features of one level with the global prototypes of the batch labels, and q_i is the
client's prediction softened by tau2 (Eq. 5). It uploads the class means of its low-
and high-level features. The server averages them per class (the multi-level global
prototypes), trains a head of the clients' output-layer architecture on the uploaded
high-level prototypes (Eq. 7) and turns its outputs into one soft label per class (Eq. 8).

Up: ``low`` (k, d_l), ``high`` (k, d_h), ``classes`` (k,), ``counts`` (k,).
Down: ``low``, ``high`` (k', .), ``classes`` (k',) for every class with a global
prototype, and ``soft`` (k', C): the global soft label of each of those classes.
Inference: ``proto`` = nearest global high-level prototype (the paper's rule, §V-A,
"following FedProto"), ``head`` = the client's own classifier.

Choices (docs/fedmps.md, decision numbers in brackets; the alternative is a field where one exists):
- ``supcon_base_tau=0.07``: the code's SupContrast factor tau1/0.07 (decision 3);
  ``null`` gives Eq. 3 as printed. The paper's alpha/mu were tuned with the factor.
- ``soft_label="eq8"``: q_bar_k = mean over clients of softmax(f(p_ik)/tau2) (Eq. 8);
  ``"code"`` = softmax(mean_i f(p_ik) / tau2), what the code sends (decision 4).
- The KL target is the soft label of the sample's true class, no tau2^2 factor (decision 5).
- Server head (decision 6, the code): created once and kept across rounds, a new Adam
  (lr 1e-3) each round, 6 epochs, batch 4, shuffled, on this round's (client, class)
  high-level prototypes.
- Prototypes are the means of the training-time features of the last local epoch
  (decision 7, the code); ``proto_pass: eval`` recomputes them after training.
- Global prototypes: plain mean over the clients holding the class (decision 8);
  ``weighted: true`` weights by class counts. They are not re-normalised (decision 9).
- Before any global knowledge exists (round 1) the loss is CE only; a batch label
  without a global prototype uses the sample's own detached feature (decision 26).
Paper names are used: alpha = low-level weight, beta = high-level weight, mu = soft-label
weight (the code's ``--beta``, ``--alph``, ``--gama``; decision 2). Defaults are the
paper's Fashion-MNIST values (alpha 1, mu 1; CIFAR-10 uses alpha 0.2, mu 5).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import Algorithm, LocalTask, linear_adam_epochs, server_epochs, weights
from fedlib.algorithms.prototype_method import group_scores
from fedlib.losses import supcon_with_prototypes
from fedlib.prototypes import (aggregate_protos, eval_class_means, keep_last, message_scores, proto_targets,
                               single_table)
from fedlib.validation import BOOL, Interval, Options

LEVELS = ("low", "high")
_SENT = WeakIdKeyDictionary()  # server "present" -> ("has_soft", (classes sent, whether soft labels go too))


def _sent(server: dict) -> list[torch.Tensor]:
    """How many classes the broadcast sends, and whether all of them have a soft label (float64, on the device)."""
    present = server["present"]
    return [present.sum().double(), (~(present & ~server["has_soft"]).any()).double()]


@register
@dataclasses.dataclass(frozen=True)
class FedMPS(Algorithm):
    alpha: float = 1.0            # weight of the low-level contrastive loss (Eq. 4)
    beta: float = 1.0             # weight of the high-level contrastive loss (Eq. 4)
    lam: float = 1.0              # weight of the multi-level contrastive loss (Eq. 2)
    mu: float = 1.0               # weight of the soft-label KL (Eq. 2)
    tau1: float = 0.5             # contrastive temperature (paper §V-A)
    tau2: float = 5.0             # soft-label temperature (Eq. 5)
    supcon_base_tau: float | None = 0.07  # code's tau1/0.07 factor; None = Eq. 3 as printed
    soft_label: str = "eq8"       # "eq8": mean of softmaxes; "code": softmax of the mean logits
    server_epochs: int = 6        # T, global epochs
    server_batch_size: int = 4
    server_lr: float = 1e-3       # Adam, the code's choice (not in the paper)
    weighted: bool = False
    proto_pass: str = "train"
    name = "fedmps"
    SWEEPABLE = ("alpha", "beta", "lam", "mu", "tau1", "tau2")  # loss weights and temperatures (arithmetic)
    RULES = ("head", "proto")
    SHARED_BROADCAST = True
    CONSTRAINTS = {
        "alpha": Interval(0, None), "beta": Interval(0, None), "lam": Interval(0, None),
        "mu": Interval(0, None), "tau1": Interval(0, None, low_open=True),
        "tau2": Interval(0, None, low_open=True),
        "supcon_base_tau": Interval(0, None, low_open=True, allow_none=True),
        "soft_label": Options(("eq8", "code")), "server_epochs": Interval(0, None, integer=True),
        "server_batch_size": Interval(1, None, integer=True), "server_lr": Interval(0, None, low_open=True),
        "weighted": BOOL, "proto_pass": Options(("train", "eval")),
    }
    UPLOAD = {"low": "float[k, dl]", "high": "float[k, dh]", "classes": "int[k]", "counts": "int[k]"}
    BROADCAST = {"low?": "float[k, dl]", "high?": "float[k, dh]", "classes?": "int[k]", "soft?": "float[k, C]"}

    # -- client --------------------------------------------------------------------------
    def task(self, ctx, cid, client, msg, data, rnd):
        C = ctx.num_classes
        extras = {}
        for lv in LEVELS:
            if lv in msg and self.lam * (self.alpha if lv == "low" else self.beta) > 0:
                extras[lv], extras[lv + "_present"] = single_table(msg, C, lv)
        if "soft" in msg and self.mu > 0:
            extras["soft"], extras["soft_present"] = single_table(msg, C, "soft")
        return LocalTask(client["model"], extras=extras, collect=LEVELS if self.proto_pass == "train" else ())

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        parts = {}
        for lv, weight in (("low", self.lam * self.alpha), ("high", self.lam * self.beta)):
            if lv in extras:
                z = feats[lv]
                con = supcon_with_prototypes(z, y, proto_targets(z, y, extras[lv], extras[lv + "_present"]),
                                             self.tau1, self.supcon_base_tau)
                loss = loss + weight * con
                parts["l_con_" + lv] = con.detach()
        if "soft" in extras:
            # Eq. 6 averaged over the whole batch; a sample whose class has no soft label yet
            # contributes zero (possible only under partial participation)
            known = extras["soft_present"][y].to(logits.dtype)
            log_q = F.log_softmax(logits / self.tau2, dim=1)
            kl = (F.kl_div(log_q, extras["soft"][y], reduction="none") * known.unsqueeze(1)).sum() / len(y)
            loss = loss + self.mu * kl
            parts["l_soft"] = kl.detach()
        return loss, parts

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        if self.proto_pass == "eval":
            sums = eval_class_means(model, data, ctx.num_classes, LEVELS)
        low, high = sums["low"].message(), sums["high"].message()
        up = {"low": low["protos"], "high": high["protos"], "classes": high["classes"], "counts": high["counts"]}
        return {"model": weights(model)}, up, metrics

    def finish_group(self, ctx, rnd, group):
        """A batched group at once (prototypes from training): both levels' uploads from the group's sums."""
        if self.proto_pass != "train":
            return super().finish_group(ctx, rnd, group)
        lows, highs = group.sums["low"].messages(counts=False), group.sums["high"].messages()
        ups = [{"low": low["protos"], "high": high["protos"], "classes": high["classes"], "counts": high["counts"]}
               for low, high in zip(lows, highs, strict=True)]
        return {cid: ({"model": group.states[cid]}, ups[g], group.metrics[cid]) for g, cid in enumerate(group.cids)}

    # -- server --------------------------------------------------------------------------
    def build(self, ctx, cid, role="model"):
        return ctx.new_model(None).head if role == "head" else super().build(ctx, cid, role)

    def init_server(self, ctx):
        C = ctx.num_classes
        return {"head": weights(ctx.new_model(None).head),  # the server's global model f(psi_bar; .), persistent
                "low": torch.zeros(C, 0, device=ctx.device), "high": torch.zeros(C, 0, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device),
                "soft": torch.zeros(C, C, device=ctx.device),
                "has_soft": torch.zeros(C, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        present = server["present"]
        held = _SENT.get(present)  # read with the head's losses where this process aggregated the state
        if held is not None and held[0] is server["has_soft"]:
            k, soft_too = held[1]
        else:  # one host read: which classes travel, and whether all of them have a soft label
            k, soft_too = (int(v) for v in torch.stack(_sent(server)).tolist())
        if not k:
            return {}
        classes = torch.nonzero_static(present, size=k).flatten()
        msg = {"high": server["high"][classes], "classes": classes, "low": server["low"][classes]}
        if soft_too:
            msg["soft"] = server["soft"][classes]
        return msg

    def aggregate(self, ctx, server, uploads, rnd):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server, {}
        new = dict(server)
        for lv in LEVELS:
            protos, present = aggregate_protos(ups, ctx.num_classes, self.weighted, key=lv)
            new[lv], new["present"] = keep_last(protos, present, server[lv], server["present"])
        x = torch.cat([u["high"] for u in ups])  # the (client, class) high-level prototypes and their classes
        y = torch.cat([u["classes"] for u in ups])
        head, losses = self.train_head(ctx, server, x, y, rnd)
        new["head"] = weights(head)
        new["soft"], new["has_soft"] = self.soft_labels(server, head, x, y, ctx.num_classes)
        # metrics are plain numbers (the contract): both read in one transfer, with what the next broadcast reads
        sent = _sent(new)
        vals = torch.stack([*sent, *([losses[0], losses[-1]] if len(losses) else [])]).tolist()
        _SENT[new["present"]] = (new["has_soft"], (int(vals[0]), bool(vals[1])))
        if not len(losses):
            return new, {}
        return new, {"head_loss": vals[3], "head_loss_first_epoch": vals[2]}

    def train_head(self, ctx, server, x, y, rnd):
        """Eq. 7: the server head, trained on this round's (client, class) high-level prototypes ``x``
        with their classes ``y`` (shuffled with torch's global RNG, which the engine seeds per round for the
        server). A bare ``Linear`` head in a round that need not be exact (the batched executor) takes the
        written-out loop with fused Adam steps (:func:`linear_adam_epochs`: the same batches, numbers at
        rounding level, a quarter of the ops); otherwise autograd and ``torch.optim.Adam``."""
        head = self.module(ctx, None, server["head"], role="head")
        if not rnd.exact and type(head) is nn.Linear and head.bias is not None:
            return head, linear_adam_epochs(head, x, y, self.server_epochs, self.server_batch_size, self.server_lr)
        # foreach: the same numbers as the per-tensor loop on a CPU (the default on a GPU), in fewer ops
        opt = torch.optim.Adam(head.parameters(), lr=self.server_lr, foreach=True)
        losses = server_epochs(head, opt, x, y, self.server_epochs, self.server_batch_size,
                               lambda xb, yb: F.cross_entropy(head(xb), yb))
        return head, losses

    def soft_labels(self, server, head, x, y, C):
        """Eq. 8: one soft label per class from the head's outputs on the uploaded prototypes ``x``
        (classes ``y``); classes absent this round keep their previous soft label."""
        head.eval()
        with torch.no_grad():
            logits = head(x)
        seen = torch.zeros(C, device=y.device).index_add_(0, y, torch.ones_like(y, dtype=torch.float32))
        counts = seen.clamp(min=1).unsqueeze(1)  # a bincount without reading its size on the host
        if self.soft_label == "eq8":
            soft = torch.zeros(C, C, device=y.device).index_add_(0, y, F.softmax(logits / self.tau2, dim=1)) / counts
        else:  # the code: per-class mean logits, softened by the client
            mean_logits = torch.zeros(C, C, device=y.device).index_add_(0, y, logits) / counts
            soft = F.softmax(mean_logits / self.tau2, dim=1)
        has_soft = seen > 0
        return keep_last(soft, has_soft, server["soft"], server["has_soft"])

    # -- inference -----------------------------------------------------------------------
    def scores(self, ctx, cid, client, msg, logits, feats):
        return {"head": logits, "proto": message_scores(feats["high"], msg, ctx.num_classes, key="high", single=True)}

    def scores_group(self, ctx, cids, clients, msgs, logits, feats):
        return group_scores(ctx, msgs, logits, feats, "high", "high") if type(self).scores is FedMPS.scores else None
