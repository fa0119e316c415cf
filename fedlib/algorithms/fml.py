"""FML: Shen et al., "Federated Mutual Learning", arXiv 2006.16765 (2020), as run by HtFLlib
(ProtoNorm Table 1 baseline; notes protonorm.md §3.2, §5).

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
import torch.nn as nn
import torch.nn.functional as F

from fedlib.algorithms import register
from fedlib.algorithms.base import Algorithm, Message, joint_sgd_epochs
from fedlib.validation import BOOL, Interval, Options


def kl_to(logits: torch.Tensor, target_logits: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """KL(softmax(target) || softmax(logits)), i.e. ``nn.KLDivLoss`` on (log_softmax(logits),
    softmax(target)); ``"mean"`` averages over all elements, ``"batchmean"`` over samples."""
    elem = F.kl_div(F.log_softmax(logits, dim=1), F.softmax(target_logits, dim=1), reduction="none")
    return elem.mean() if reduction == "mean" else elem.sum() / len(logits)


def param_message(model: nn.Module, prefix: str) -> Message:
    """The model's parameters (no buffers) under ``prefix``."""
    return {prefix + n: p.detach().clone() for n, p in model.named_parameters()}


def load_param_message(model: nn.Module, msg: Message, prefix: str) -> None:
    with torch.no_grad():
        for n, p in model.named_parameters():
            if prefix + n in msg:
                p.copy_(msg[prefix + n])




def fml_losses(out: torch.Tensor, out_meme: torch.Tensor, y: torch.Tensor, alpha: float, beta: float,
               reduction: str = "mean", joint: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(L_private, L_meme) of FML; ``joint=False`` detaches the partner's logits in each KL."""
    t_meme, t_priv = (out_meme, out) if joint else (out_meme.detach(), out.detach())
    loss = alpha * F.cross_entropy(out, y) + (1 - alpha) * kl_to(out, t_meme, reduction)
    loss_meme = beta * F.cross_entropy(out_meme, y) + (1 - beta) * kl_to(out_meme, t_priv, reduction)
    return loss, loss_meme


@dataclasses.dataclass
class FMLClient:
    model: object  # private model (predicts)
    meme: object   # this client's copy of the shared meme model


@dataclasses.dataclass
class FMLServer:
    weights: dict  # {"meme.<name>": Tensor}; empty before the first aggregation


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

    def init_client(self, ctx, cid):
        return FMLClient(ctx.new_model(cid), ctx.new_model(None))

    def init_server(self, ctx):
        return FMLServer({})

    def broadcast(self, ctx, server, cid):
        return dict(server.weights)

    def local_update(self, ctx, client, msg, data, gen):
        model, meme = client.model, client.meme
        load_param_message(meme, msg, "meme.")

        def loss_fn(xb, yb, epoch):
            loss, loss_meme = fml_losses(model(xb)[0], meme(xb)[0], yb, self.alpha, self.beta,
                                         self.kl_reduction, self.joint_backward)
            return loss + loss_meme

        lr = ctx.train.lr
        loss = joint_sgd_epochs(ctx, [(model, lr), (meme, lr)], data, gen, loss_fn, self.clip_norm)
        up = param_message(meme, "meme.")
        up["train_loss"] = loss
        return client, up

    def aggregate(self, ctx, server, uploads):
        msgs = list(uploads.values())
        if not msgs:
            return server
        keys = [k for k in msgs[0] if k.startswith("meme.")]
        return FMLServer({k: sum(m[k] for m in msgs) / len(msgs) for k in keys})

    def predict(self, ctx, client, msg, x):
        client.model.eval()
        return {"head": client.model(x)[0]}
