"""FML: Shen et al., "Federated Mutual Learning", arXiv 2006.16765 (2020), as run by HtFLlib
(ProtoNorm Table 1 baseline; docs/protonorm.md).

Each client keeps a private model (any architecture; it predicts) and a copy of a shared
"meme" model of one common architecture: the first member of the model family (or the
configured model), ``ctx.new_model(None)``. Both are trained together by deep mutual learning
(FML paper Eqs. 1-2, HtFLlib's weighting):

    L_private = alpha * CE(private) + (1 - alpha) * KL(p_meme || p_private)
    L_meme    = beta  * CE(meme)    + (1 - beta)  * KL(p_private || p_meme)

The server averages the clients' memes (plain mean, HtFLlib) and sends the mean back.

Up: ``meme.<name>`` for every meme parameter, ``train_loss``. Down: the averaged
``meme.<name>``; nothing before the first aggregation: every client starts from the same
seeded meme (``ctx.new_model(None)``), as HtFLlib clients copy the server's initial model
when they are created. Only parameters travel (HtFLlib averages ``parameters()``); each
client keeps its meme's BatchNorm statistics.

Choices (paper vs HtFLlib code, HtFLlib is the default):
- ``alpha=beta=0.5``: ProtoNorm Table 6, HtFLlib ``-al 0.5 -bt 0.5``.
- ``kl_reduction="mean"``: HtFLlib's ``nn.KLDivLoss()`` default, the mean over batch *and*
  classes; ``"batchmean"`` is the per-sample KL of the paper.
- ``joint_backward=True``: HtFLlib back-propagates both losses into both models (the other
  model's softmax is not detached); ``False``: each model minimises its own loss with the
  other's prediction as a constant target (deep mutual learning as in the paper).
- ``clip_norm=10``: HtFLlib clips each model's gradient norm at 10; ``null`` switches it off.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from fedlib.algorithms.registry import register
from fedlib.algorithms.base import (Algorithm, joint_sgd_epochs, load_model_message, mean_params, model_message,
                                   weights)
from fedlib.losses import kl_loss
from fedlib.validation import BOOL, Interval, Options


def fml_losses(out: torch.Tensor, out_meme: torch.Tensor, y: torch.Tensor, alpha: float, beta: float,
               reduction: str = "mean", joint: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_private, L_meme) of FML; ``joint=False`` detaches the partner's logits in each KL."""
    t_meme, t_priv = (out_meme, out) if joint else (out_meme.detach(), out.detach())
    loss = alpha * F.cross_entropy(out, y) + (1 - alpha) * kl_loss(out, t_meme, 1.0, reduction, target_logits=True)
    loss_meme = beta * F.cross_entropy(out_meme, y) + (1 - beta) * kl_loss(out_meme, t_priv, 1.0, reduction,
                                                                          target_logits=True)
    return loss, loss_meme


@register
@dataclasses.dataclass(frozen=True)
class FML(Algorithm):
    alpha: float = 0.5            # CE weight of the private model (Table 6; HtFLlib -al)
    beta: float = 0.5             # CE weight of the meme model (Table 6; HtFLlib -bt)
    kl_reduction: str = "mean"    # "mean": HtFLlib nn.KLDivLoss(); "batchmean": per-sample KL
    joint_backward: bool = True   # HtFLlib: both losses reach both models
    clip_norm: float | None = 10.0  # HtFLlib clip_grad_norm_ 10; null = off
    name = "fml"
    CONSTRAINTS = {"alpha": Interval(0, 1), "beta": Interval(0, 1),
                   "kl_reduction": Options(("mean", "batchmean")), "joint_backward": BOOL,
                   "clip_norm": Interval(0, None, low_open=True, allow_none=True)}
    UPLOAD = {"meme.*": "float[...]"}
    BROADCAST = {"meme.*": "float[...]"}

    def build(self, ctx, cid, role="model"):
        return ctx.new_model(None if role == "meme" else cid)  # the meme: the family's first member

    def init_client(self, ctx, cid):
        return {"model": weights(ctx.new_model(cid)), "meme": weights(ctx.new_model(None))}

    def init_server(self, ctx):
        return {"weights": {}}  # empty before the first aggregation

    def broadcast(self, ctx, server, cid, rnd):
        return dict(server["weights"])

    def batch_support(self):
        return "two trained modules of different architectures (the client's model and the meme), each clipped"

    def local_update(self, ctx, cid, client, msg, data, rnd):
        model = self.module(ctx, cid, client["model"])
        meme = self.module(ctx, cid, client["meme"], role="meme")
        load_model_message(meme, msg, "meme.", buffers=False)

        def loss_fn(xb, yb, epoch):
            loss, loss_meme = fml_losses(model(xb)[0], meme(xb)[0], yb, self.alpha, self.beta,
                                         self.kl_reduction, self.joint_backward)
            return loss + loss_meme

        lr = ctx.train.round_lr(rnd)
        loss = joint_sgd_epochs(ctx, [(model, lr), (meme, lr)], data, rnd.generator(cid), loss_fn, self.clip_norm)
        state = {"model": weights(model), "meme": weights(meme)}
        return state, model_message(meme, "meme.", buffers=False), {"train_loss": loss}

    def aggregate(self, ctx, server, uploads, rnd):
        msgs = list(uploads.values())
        if not msgs:
            return server, {}
        return {"weights": mean_params(msgs, [k for k in msgs[0] if k.startswith("meme.")])}, {}
