"""The leakage table: what each method's upload gives each applicable attack, against three references.

:func:`attack_upload` runs the attacks that :func:`fedlib.privacy.holds.what_server_holds` lists for a
method on exactly one (broadcast, upload) pair the server held; :func:`score` scores reconstructions
against the client's private images with PSNR / SSIM and a held-out classifier's label accuracy;
:func:`references` gives the three baselines on the same images; :func:`leakage_table` ranks it all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
import torch
import torch.nn as nn

from fedlib.privacy.gradients import infer_label, invert_gradients, model_update
from fedlib.privacy.holds import what_server_holds
from fedlib.privacy.inversion import Reconstruction, feature_fn, invert_features
from fedlib.privacy.metrics import best_match_reference, class_mean_images, label_accuracy, psnr_ssim
from fedlib.validation import ConfigError

# Upload key holding per-class feature statistics -> the model level they live at.
FEATURE_KEYS: dict[str, str] = {"protos": "high", "low": "low", "high": "high", "means": "high",
                                "anchors": "high", "h": "high"}


def feature_targets(upload: Mapping) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{key: (statistics (k, d), classes (k,))}`` of the feature statistics in an upload.

    Rows pair with ``classes`` (``classes`` key of the upload) or, for a dense (C, d) table such as
    FedFA's anchors, with 0..C-1.
    """
    out = {}
    for key in FEATURE_KEYS:
        if key in upload and torch.is_tensor(upload[key]) and upload[key].dim() == 2:
            stats = upload[key].detach().float()
            classes = upload.get("classes")
            if classes is None or len(classes) != len(stats):
                classes = torch.arange(len(stats))
            out[key] = (stats, torch.as_tensor(classes).long())
    return out


def attack_upload(method: str, broadcast: Mapping, upload: Mapping, model: nn.Module, image_shape: Sequence[int],
                  *, batch: int | None = None, labels: torch.Tensor | None = None,
                  lr: float = 0.01, local_steps: int = 1, steps: int = 300, restarts: int = 2,
                  mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                  seed: int = 0, loss: str = "l2", num_classes: int | None = None
                  ) -> dict[str, tuple[Reconstruction, torch.Tensor | None]]:
    """Run the white-box attacks that apply to ``method`` on one (broadcast, upload) pair.

    ``model`` is a module of the client's architecture; it is loaded with the weights the server
    holds (the upload's ``w.*`` for feature inversion, else the broadcast's; the broadcast's for
    gradient inversion). Returns ``{attack name: (reconstruction, classes of its rows or None)}``:
    ``feature_inversion:<key>`` per feature statistic (images of ``image_shape`` (C, H, W)),
    ``gradient_inversion`` when ``batch`` (the number of images behind the update) is given (with
    ``labels`` for batch > 1; batch 1 infers the label, iDLG; ``lr`` and ``local_steps`` of the run
    make the pseudo-gradient; with ``num_classes`` the label is read from the layer with that many outputs,
    :func:`logits_layer`, else from the last 2-D weight). ``loss``: the feature inversion's distance
    (``"cosine"`` for statistics of L2-normalised features, see :func:`invert_features`). The decoder and the
    active attacks need auxiliary data or a crafted round: :mod:`fedlib.privacy.attack`, :mod:`.active`.
    """
    view = what_server_holds(method)
    out: dict[str, tuple[Reconstruction, torch.Tensor | None]] = {}

    def load(msg):
        model.load_state_dict({**model.state_dict(), **{k[2:]: v for k, v in msg.items() if k.startswith("w.")}})

    if "feature_inversion" in view.attacks:
        load(broadcast)
        load(upload)
        for key, (stats, classes) in feature_targets(upload).items():
            f = feature_fn(model, FEATURE_KEYS[key])
            rec = invert_features(f, stats, image_shape, steps=steps, restarts=restarts, mean=mean, std=std, seed=seed,
                                  loss=loss)
            out[f"feature_inversion:{key}"] = (rec, classes)
    if "gradient_inversion" in view.attacks and batch is not None:
        g = update_gradient(model, broadcast, upload, lr, local_steps)
        if labels is None:
            if batch != 1:
                raise ConfigError("labels", None, "the batch's labels when the batch holds more than one image")
            layer = _last_layer(g) if num_classes is None else logits_layer(g, num_classes)
            if layer is None:
                raise ConfigError("labels", None, f"the image's label: the upload has no gradient of a layer with "
                                                  f"{num_classes} outputs to infer it from (iDLG)")
            labels = torch.tensor([infer_label(g, *layer)])
        rec = invert_gradients(model, g, labels, (batch, *image_shape), steps=steps, restarts=restarts,
                               mean=mean, std=std, seed=seed)
        out["gradient_inversion"] = (rec, None)
    return out


def update_gradient(model: nn.Module, broadcast: Mapping, upload: Mapping, lr: float, local_steps: int) -> dict:
    """The pseudo-gradient ``(w_0 - w_E) / (lr E)`` of one local update, keyed by ``model``'s parameter names,
    with ``model`` loaded with the weights the client started from (:func:`~fedlib.privacy.gradients.model_update`:
    any message layout that carries the client's model both ways, e.g. FML's meme, FedKD's SVD factors, IFCA's
    clusters, FedCAM's two parts); parameters the upload does not carry (a personal head) keep the module's."""
    start, end = model_update(broadcast, upload, model.state_dict())
    model.load_state_dict({**model.state_dict(), **start})
    params = dict(model.named_parameters())
    return {n: (start[n] - end[n]).detach() / (lr * local_steps) for n in end if n in start and n in params}


def logits_layer(g: Mapping, num_classes: int) -> tuple[str, str | None] | None:
    """The layer of a gradient that makes the logits, for iDLG: the last 2-D weight with ``num_classes`` rows,
    and its bias when present; ``None`` when the gradient has none (FedNH's classifier is the server's fixed
    prototypes, a buffer: its clients' last trained weight is a hidden layer, whose row index is no label)."""
    weights = [k for k, v in g.items() if k.endswith("weight") and v.dim() == 2 and v.shape[0] == num_classes]
    if not weights:
        return None
    bias = weights[-1][:-len("weight")] + "bias"
    return weights[-1], bias if bias in g else None


def _last_layer(g: Mapping) -> tuple[str, str | None]:
    weight = [k for k, v in g.items() if k.endswith("weight") and v.dim() == 2][-1]
    bias = weight[:-len("weight")] + "bias"
    return weight, bias if bias in g else None


def score(images: torch.Tensor, x: torch.Tensor, y: torch.Tensor, classes: torch.Tensor | None,
          classifier: nn.Module | None = None, mean: float | Sequence[float] = 0.0,
          std: float | Sequence[float] = 1.0) -> dict:
    """PSNR / SSIM of reconstructions against the private images, and the held-out label accuracy.

    With ``classes`` (one class per reconstruction: a per-class statistic) each reconstruction is
    compared with every private image of its class and the best match is kept (``psnr``/``ssim``
    are means over the reconstructions of the best match: does it reveal one particular image?);
    without, ``images`` are the batch ``x`` in order (gradient inversion). ``label_acc``: the
    classifier's accuracy on the reconstructions with their class (NaN without a classifier).
    """
    if classes is None:
        s, labels = psnr_ssim(images, x, mean, std), y
    else:
        rows = []
        for img, c in zip(images, classes.tolist(), strict=True):
            own = x[y == c]
            if len(own) == 0:
                raise ConfigError("classes", c, "classes present in the client's labels")
            rows.append(psnr_ssim(img.unsqueeze(0).expand_as(own), own, mean, std).max())
        s, labels = pd.DataFrame(rows), classes
    acc = float("nan") if classifier is None else label_accuracy(classifier, images, labels)
    return {"psnr": float(s.psnr.mean()), "ssim": float(s.ssim.mean()), "label_acc": acc}


def references(aux_x: torch.Tensor, aux_y: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
               single: torch.Tensor | None = None, classifier: nn.Module | None = None,
               mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0) -> pd.DataFrame:
    """The three baselines on the private images ``(x, y)``: the attacker's class average, the best
    match in its auxiliary data (an oracle choice), and ``single``: the inversion of each private
    image's own upload-kind statistic (e.g. :func:`invert_features` on its single feature), one per
    image of ``x``, when given."""
    classes = torch.unique(y)
    rows = [{"attack": "reference: class average",
             **score(class_mean_images(aux_x, aux_y, classes), x, y, classes, classifier, mean, std)}]
    best = best_match_reference(aux_x, x, mean, std)
    rows.append({"attack": "reference: best auxiliary match", "psnr": float(best.psnr.mean()),
                 "ssim": float(best.ssim.mean()), "label_acc": float("nan")})
    if single is not None:
        rows.append({"attack": "reference: single-sample inversion", **score(single, x, y, None, classifier,
                                                                              mean, std)})
    return pd.DataFrame(rows).assign(method="—")


def leakage_table(results: pd.DataFrame, refs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Rank ``results`` (columns ``method, attack, psnr, ssim, label_acc``) by SSIM, best attack first,
    with what the server holds per method (:func:`what_server_holds`) and the reference rows."""
    missing = {"method", "attack", "psnr", "ssim", "label_acc"} - set(results.columns)
    if missing:
        raise ConfigError("results", sorted(missing), "a frame with columns method, attack, psnr, ssim, label_acc")
    table = results.assign(holds=[what_server_holds(m).summary() for m in results.method])
    if refs is not None:
        table = pd.concat([table, refs.assign(holds="auxiliary data")], ignore_index=True)
    table = table.sort_values(["ssim", "psnr"], ascending=False, ignore_index=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    return table[["rank", "method", "holds", "attack", "psnr", "ssim", "label_acc"]]
