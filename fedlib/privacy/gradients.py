"""Gradient inversion of one local update: Inverting Gradients, DLG and iDLG's label inference.

Threat model
------------
- **Attacker**: the honest-but-curious server of a method that sends the client a model and gets
  the trained model back (FedAvg, FedProx, MOON, FedPer, ...; :func:`fedlib.privacy.holds.what_server_holds`
  lists them).
- **It holds** the broadcast weights w_0 (it sent them), the uploaded weights w_E, the client's
  architecture and training settings (learning rate, local steps, batch size: the run's config is
  common knowledge) and, for the reference attacks, the batch's labels (or infers them, batch 1).
- **Goal**: the client's training images of the round.

One local update as a gradient (the pseudo-gradient)
----------------------------------------------------
E local SGD steps of learning rate eta without momentum give w_E = w_0 - eta sum_t g_t(w_{t-1}), so

    g~ = (w_0 - w_E) / (eta E)

is the mean of the E step gradients. The attacks treat g~ as the gradient at w_0 of the mean loss
over every image the client used in the round (:func:`pseudo_gradient`): exact for E = 1 (FedSGD),
an approximation otherwise, good while the weights move little over the round (small eta E).
Geiping et al. (Sec. 5) instead unroll the E steps inside the attack; that is not done here.
Momentum and weight decay rescale or tilt g~; the cosine loss of Inverting Gradients ignores a
scale, the L2 loss of DLG does not.

The attacks
-----------
- :func:`invert_gradients`: Inverting Gradients (Geiping, Bauermeister, Droege, Moeller, NeurIPS
  2020, Eq. 4): minimise 1 - cos(grad L(x, y; w_0), g~) + tv * TV(x) over images x with Adam on
  the sign of the gradient, learning rate 0.1 dropped by 10x at 3/8, 5/8 and 7/8 of the steps,
  pixels kept in the valid box, several random restarts, the lowest final loss kept.
- :func:`dlg`: Deep Leakage from Gradients (Zhu, Liu, Han, NeurIPS 2019, Eq. 4): minimise
  ||grad L(x, y'; w_0) - g~||^2 over images x and soft labels y' with L-BFGS; with given labels
  (iDLG) only x is optimised.
- :func:`infer_label`: iDLG (Zhao, Mopuri, Bilen, arXiv:2001.02610, Sec. 3): for one image and
  cross-entropy, the gradient of the last layer's bias is softmax(z) - onehot(y), negative only at
  y; without a bias, the row sums of the weight gradient (non-negative inputs) have the same sign.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.privacy.inversion import Reconstruction, check_positive, pixel_box, total_variation
from fedlib.validation import ConfigError

Grads = dict  # {parameter name: Tensor}


def pseudo_gradient(broadcast: Mapping[str, torch.Tensor], upload: Mapping[str, torch.Tensor], lr: float,
                    local_steps: int, prefix: str = "w.") -> Grads:
    """``(w_0 - w_E) / (lr * local_steps)`` for every float tensor under ``prefix`` in both messages.

    ``broadcast`` / ``upload`` are the messages as the server holds them (keys ``w.<name>``); the
    result is keyed by ``<name>``. See the module docstring for what it approximates.
    """
    check_positive("local_steps", local_steps)
    check_positive("lr", lr, integer=False)
    names = [k for k in upload if k.startswith(prefix) and k in broadcast and upload[k].is_floating_point()]
    if not names:
        raise ConfigError("upload", sorted(upload)[:5], f"model weights under {prefix!r} present in the broadcast")
    return {k[len(prefix):]: (broadcast[k] - upload[k]).detach() / (lr * local_steps) for k in names}


# Message prefixes whose tensors are the weights of the client's model (FedAvg family, FML's meme, FedKD's
# uncompressed mentee tensors); ``c<j>.`` is IFCA's cluster j; ``g.`` is FedCAM's global part, matched as is.
_WEIGHT_PREFIXES = ("w.", "meme.", "mentee.")


def _message_weights(msg: Mapping, names: Mapping[str, torch.Tensor], cluster: int | None = None) -> dict:
    """``{model entry: tensor}`` of the model weights in one message, keyed by the entries of ``names`` (the
    attacked module's ``state_dict()``): ``w.``/``meme.``/``mentee.`` keys without their prefix, FedKD's SVD
    factors multiplied back (``svd_u``, ``svd_s``, ``svd_v``: u diag(s) v), IFCA's ``c<cluster>.`` keys (the
    cluster the client chose), and keys that already are entries (FedCAM's ``g.``). Where the module is
    FedCAM's sum of a global and a cluster part (entries ``g.*`` and ``f.*``), the cluster part is ``f.``."""
    out = {}
    for k, v in msg.items():
        if not torch.is_tensor(v) or not v.is_floating_point():
            continue
        head, _, rest = k.partition(".")
        if k in names:
            out[k] = v
            continue
        if head + "." in _WEIGHT_PREFIXES or (cluster is not None and head == f"c{cluster}"):
            for name in (rest, "f." + rest):
                if name in names:
                    out[name] = v
                    break
        elif head == "svd_u" and rest in names and f"svd_s.{rest}" in msg and f"svd_v.{rest}" in msg:
            u, sv, vt = v, msg[f"svd_s.{rest}"], msg[f"svd_v.{rest}"]
            out[rest] = ((u * sv.unsqueeze(-2)) @ vt).reshape(names[rest].shape)
    return out


def model_update(broadcast: Mapping, upload: Mapping, entries: Mapping[str, torch.Tensor]) -> tuple[dict, dict]:
    """``(start, end)``: the weights the client started its update from (in the broadcast) and those it sent
    back, keyed by the attacked module's ``state_dict()`` entries (:func:`_message_weights`; IFCA's start is
    the cluster named by the upload's ``cluster``). Raises ConfigError when the two share no entry."""
    cluster = upload.get("cluster")
    cluster = None if cluster is None else int(cluster)
    end = _message_weights(upload, entries)
    start = _message_weights(broadcast, entries, cluster)
    if not any(n in start for n in end):
        raise ConfigError("upload", sorted(upload)[:5], "model weights that the broadcast also carries")
    return start, end


def client_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Grads:
    """The exact gradient of the mean cross-entropy of ``(x, y)`` at the model's weights (the reference)."""
    params = dict(model.named_parameters())
    g = torch.autograd.grad(F.cross_entropy(model(x)[0], y), list(params.values()))
    return {n: t.detach() for n, t in zip(params, g, strict=True)}


def infer_label(grads: Grads, weight: str, bias: str | None = None) -> int:
    """iDLG: the label of a single image from the last layer's gradient (module docstring)."""
    if bias is not None and bias in grads:
        return int(grads[bias].argmin())
    if weight not in grads:
        raise ConfigError("weight", weight, f"a parameter name in the gradient ({sorted(grads)[-3:]} ...)")
    return int(grads[weight].sum(1).argmin())


def _matched(model: nn.Module, target: Grads) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    params = [(n, p) for n, p in model.named_parameters() if n in target]
    if not params:
        raise ConfigError("target", sorted(target)[:5], "gradients keyed by the model's parameter names")
    return [p for _, p in params], [target[n].detach().to(p.dtype) for n, p in params]


def _grads_of(model, params, x, labels):
    logits = model(x)[0]
    if labels.is_floating_point():  # DLG's soft labels (logits of a distribution)
        loss = -(F.softmax(labels, -1) * F.log_softmax(logits, -1)).sum(-1).mean()
    else:
        loss = F.cross_entropy(logits, labels)
    return torch.autograd.grad(loss, params, create_graph=True)


def _cosine_loss(grads, target) -> torch.Tensor:
    dot = sum((g * t).sum() for g, t in zip(grads, target, strict=True))
    gn = sum(g.pow(2).sum() for g in grads).sqrt()
    tn = sum(t.pow(2).sum() for t in target).sqrt()
    return 1 - dot / (gn * tn + 1e-12)


def _l2_loss(grads, target) -> torch.Tensor:
    return sum((g - t).pow(2).sum() for g, t in zip(grads, target, strict=True))


def _best_start(restarts: int, shape, lo, hi, seed: int, run) -> tuple[torch.Tensor, float]:
    """``run`` (optimises an image batch in place, returns its final loss) from ``restarts`` random
    starts uniform in the pixel box [lo, hi]; the batch with the lowest loss and that loss."""
    gen = torch.Generator().manual_seed(seed)
    best, best_loss = None, float("inf")
    for _ in range(restarts):
        x = (lo + (hi - lo) * torch.rand(*shape, generator=gen)).requires_grad_(True)
        final = run(x)
        if final < best_loss:
            best, best_loss = x.detach().clone(), final
    return best, best_loss


def invert_gradients(model: nn.Module, target: Grads, labels: torch.Tensor, shape: Sequence[int], *,
                     steps: int = 300, restarts: int = 2, lr: float = 0.1, tv: float = 1e-4,
                     mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                     seed: int = 0) -> Reconstruction:
    """Inverting Gradients: images (n, C, H, W) whose gradient at the model's weights points like ``target``.

    Parameters
    ----------
    model : the broadcast model w_0 (its mode, train or eval, is the client's; left unchanged)
    target : {parameter name: Tensor}, the (pseudo-)gradient of the upload (:func:`pseudo_gradient`)
    labels : int Tensor, shape (n,), the batch's labels (known or from :func:`infer_label`)
    shape : (n, C, H, W) of the batch to reconstruct
    steps, restarts, lr, tv : see the module docstring
    mean, std : the dataset normalisation (the pixel box)
    seed : the random starts

    Returns
    -------
    Reconstruction: images (n, C, H, W); loss (n,) the final loss of the kept start (same for every row)
    """
    check_positive("steps", steps)
    check_positive("restarts", restarts)
    params, tgt = _matched(model, target)
    lo, hi = pixel_box(mean, std, shape[1])

    def objective(x):
        return _cosine_loss(_grads_of(model, params, x, labels), tgt) + tv * total_variation(x).mean()

    def run(x):
        opt = torch.optim.Adam([x], lr=lr)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, [steps * 3 // 8, steps * 5 // 8, steps * 7 // 8], 0.1)
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            x.grad, = torch.autograd.grad(objective(x), [x])
            x.grad.sign_()
            opt.step()
            sched.step()
            with torch.no_grad():
                x.copy_(torch.maximum(torch.minimum(x, hi), lo))
        return float(objective(x).detach())

    best, best_loss = _best_start(restarts, shape, lo, hi, seed, run)
    return Reconstruction(best, torch.full((shape[0],), best_loss))


def _lbfgs(model, params, tgt, x, labels, steps) -> float:
    """L-BFGS on the L2 gradient distance over ``x`` (and ``labels`` when they are soft); the final loss."""
    variables = [x] + ([labels] if labels.is_floating_point() else [])
    opt = torch.optim.LBFGS(variables, lr=1.0, max_iter=20, history_size=100, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad(set_to_none=True)
        loss = _l2_loss(_grads_of(model, params, x, labels), tgt)
        for v, g in zip(variables, torch.autograd.grad(loss, variables), strict=True):
            v.grad = g
        return loss

    for _ in range(steps):
        opt.step(closure)
    return float(_l2_loss(_grads_of(model, params, x, labels), tgt).detach())


def dlg(model: nn.Module, target: Grads, shape: Sequence[int], num_classes: int, *,
        labels: torch.Tensor | None = None, steps: int = 50, restarts: int = 1,
        mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0, seed: int = 0) -> Reconstruction:
    """DLG (``labels=None``: soft labels optimised too) or iDLG (labels given): L2 gradient matching, L-BFGS.

    ``steps`` counts L-BFGS iterations (each up to 20 function evaluations). Pixels start uniform in
    the box and are not constrained during the L-BFGS run (as in DLG); the result is clipped to it.
    """
    check_positive("steps", steps)
    check_positive("restarts", restarts)
    params, tgt = _matched(model, target)
    lo, hi = pixel_box(mean, std, shape[1])
    gen = torch.Generator().manual_seed(seed + 1)  # the soft labels' starts

    def run(x):
        soft = torch.randn(shape[0], num_classes, generator=gen).requires_grad_(True) if labels is None else None
        return _lbfgs(model, params, tgt, x, labels if soft is None else soft, steps)

    best, best_loss = _best_start(restarts, shape, lo, hi, seed, run)
    return Reconstruction(torch.maximum(torch.minimum(best, hi), lo), torch.full((shape[0],), best_loss))
