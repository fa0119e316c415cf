"""The shared base of prototype methods whose clients keep personal models (any
architecture) and share one class prototype per class of one feature level.

The round, written once here:

- client: loads its model, trains CE + :meth:`PrototypeMethod.regulariser` towards the
  received global prototypes (skipped until some exist, i.e. CE only in round 1), then
  uploads the class means of its features: ``proto_pass = "train"`` collects them from
  the last local epoch (train mode, before each step; the FedProto/FedMPS code),
  ``"eval"`` from a pass after training (HtFLlib);
- server: averages each class's prototypes over the clients that uploaded it (plain or
  count-weighted), keeps the previous prototype of a class nobody uploaded, then
  :meth:`PrototypeMethod.refine` (e.g. ProtoNorm's alignment);
- broadcast: the rows of the classes with a global prototype, times :meth:`sent_scale`;
- predict: ``head`` (the client's classifier) and ``proto`` (nearest global prototype).

A method sets its hyperparameters (at least ``lam``, the regulariser weight) and
overrides only what differs. Up: ``protos`` (k, d), ``classes`` (k,), ``counts`` (k,) (no
counts when ``send_counts`` is false). Down: ``protos`` (k', d), ``classes`` (k',).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedlib.algorithms.base import Algorithm, LocalTask, weights
from fedlib.prototypes import aggregate_protos, eval_class_means, keep_last, message_scores, rows_message, single_table


class PrototypeMethod(Algorithm):
    """Default client, server and inference of a single-prototype method (module docstring)."""

    RULES = ("head", "proto")
    SHARED_BROADCAST = True
    UPLOAD = {"protos": "float[k, d]", "classes": "int[k]", "counts": "int[k]"}
    BROADCAST = {"protos?": "float[k, d]", "classes?": "int[k]"}
    # defaults a method may turn into hyperparameter fields
    level = "high"          # the feature level that is the prototype space
    proto_pass = "eval"     # "train" | "eval" (module docstring)
    weighted = False        # server mean weighted by class counts
    send_counts = True      # the upload carries class counts

    # -- hooks ---------------------------------------------------------------------------
    def regulariser(self, z: torch.Tensor, y: torch.Tensor, table: torch.Tensor, present: torch.Tensor):
        """The weighted prototype term added to cross-entropy (``table`` (C, d), ``present`` (C,))."""
        raise NotImplementedError

    def target_table(self, table: torch.Tensor) -> torch.Tensor:
        """What the client regresses to, from the received (C, d) table (default: itself)."""
        return table

    def sent_scale(self) -> float:
        """Factor on the prototypes the server sends (default 1)."""
        return 1.0

    def refine(self, ctx, server: dict, uploads: list[dict], rnd) -> tuple[dict, dict]:
        """Server step after averaging (default: none): ``(server state, metrics)``."""
        return server, {}

    def client_state(self, model, upload: dict, ctx) -> dict:
        """The client's new state after training (default: its model)."""
        return {"model": weights(model)}

    # -- client --------------------------------------------------------------------------
    def task(self, ctx, cid, client, msg, data, rnd):
        received = single_table(msg, ctx.num_classes)
        extras = {}
        if received is not None and self.lam > 0:
            table, has = received
            extras = {"targets": self.target_table(table), "present": has}
        return LocalTask(client["model"], extras=extras, collect=(self.level,) if self.proto_pass == "train" else ())

    def batch_loss(self, out, y, epoch, extras, teachers, params, rnd):
        logits, feats = out
        loss = F.cross_entropy(logits, y)
        if extras:
            loss = loss + self.regulariser(feats[self.level], y, extras["targets"], extras["present"])
        return loss, {}

    def finish(self, ctx, cid, client, msg, data, rnd, task, model, sums, metrics):
        acc = sums[self.level] if self.proto_pass == "train" else \
            eval_class_means(model, data, ctx.num_classes, (self.level,))[self.level]
        up = acc.message(counts=self.send_counts)
        return self.client_state(model, up, ctx), up, metrics

    def finish_group(self, ctx, rnd, group):
        """The clients of a batched group at once, where prototypes come from training and the state is the
        model: every upload from the group's sums in one pass, every state the trained weights as they are."""
        if self.proto_pass != "train" or type(self).client_state is not PrototypeMethod.client_state \
                or type(self).finish is not PrototypeMethod.finish:
            return super().finish_group(ctx, rnd, group)
        ups = group.sums[self.level].messages(counts=self.send_counts)
        return {cid: ({"model": group.states[cid]}, up, group.metrics[cid])
                for cid, up in zip(group.cids, ups, strict=True)}

    # -- server --------------------------------------------------------------------------
    def init_server(self, ctx):
        C = ctx.num_classes
        return {"protos": torch.zeros(C, 0, device=ctx.device),
                "present": torch.zeros(C, dtype=torch.bool, device=ctx.device)}

    def broadcast(self, ctx, server, cid, rnd):
        return rows_message(server["protos"], server["present"], scale=self.sent_scale())

    def aggregate(self, ctx, server, uploads, rnd):
        ups = [u for u in uploads.values() if len(u["classes"])]
        if not ups:
            return server, {}
        protos, present = aggregate_protos(ups, ctx.num_classes, self.weighted)
        protos, present = keep_last(protos, present, server["protos"], server["present"])
        return self.refine(ctx, {**server, "protos": protos, "present": present}, ups, rnd)

    # -- inference -----------------------------------------------------------------------
    def scores(self, ctx, cid, client, msg, logits, feats):
        return {"head": logits, "proto": message_scores(feats[self.level], msg, ctx.num_classes, single=True)}

    def scores_group(self, ctx, cids, clients, msgs, logits, feats):
        if type(self).scores is not PrototypeMethod.scores:
            return None
        return group_scores(ctx, msgs, logits, feats, self.level, "protos")


def group_scores(ctx, msgs, logits, feats, level, key):
    """``{"head", "proto"}`` scores of a group (``(G, n, C)``) whose clients all hold the same broadcast (a
    shared one): the nearest-prototype scores of all their features against its table (``key`` rows of
    ``level`` features) at once; ``None`` where the messages differ."""
    if any(m is not msgs[0] for m in msgs):
        return None
    z = feats[level]
    proto = message_scores(z.flatten(0, 1), msgs[0], ctx.num_classes, key=key, single=True)
    return {"head": logits, "proto": proto.view(*z.shape[:2], -1)}
