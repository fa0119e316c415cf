"""The attacks on one client's next round of a finished run: what the server holds of it, attacked as hard as the
leakage study asks (:mod:`fedlib.papers.privacy` reads its settings from ``params/privacy/experiments.yaml``).

:func:`capture` replays the round the server would see next (broadcast and upload, with the engine's seed of that
round); :func:`attack_round` runs every image attack the server holds the inputs of on it: feature inversion of the
uploaded statistics, the realistic gradient inversion of the client's whole round at its own batch size, the batch-1
upper bound (iDLG), a decoder trained on auxiliary images, and the imprint server's crafted broadcast. Each attack
adds one row of scores (:func:`fedlib.privacy.score`) and, when asked, a picture of its reconstructions beside the
private images they were scored against (:func:`_picture`). The threat model of each attack: docs/privacy.md.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np
import torch


def capture(state, cid: int, data=None, batch_size: int | None = None, broadcast: dict | None = None
            ) -> tuple[dict, dict]:
    """``(broadcast, upload)`` of client ``cid`` in the round after the run's last: what the server sends it
    (or ``broadcast``, e.g. a crafted one) and what its local update sends back, with the engine's seed for
    that round (:func:`fedlib.analysis.next_uploads`). ``data`` replaces the client's data and ``batch_size``
    the run's (the batch-1 upper bound). The run's saved states are not modified."""
    from fedlib.algorithms.base import Round, derive_seed

    msg = copy.deepcopy(broadcast if broadcast is not None else state.message(cid))
    ctx = state.ctx
    if batch_size is not None:
        ctx = dataclasses.replace(ctx, train=dataclasses.replace(ctx.train, batch_size=batch_size))
    rnd = Round(state.round + 1, state.cfg["train"]["rounds"], state.ctx.seed)
    torch.manual_seed(derive_seed(state.ctx.seed, 1, rnd.index, cid))
    client = copy.deepcopy(state.clients[cid])
    _, up, _ = state.algorithm.local_update(ctx, cid, client, copy.deepcopy(msg),
                                            data if data is not None else state.data.train[cid], rnd)
    return msg, {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in up.items()}


def held_out_classifier(state, aux_x: torch.Tensor, aux_y: torch.Tensor, epochs: int, seed: int = 0):
    """The label-accuracy judge: a fresh MLP (``mlp_mnist`` for 28x28 images) trained with Adam on the
    attacker's auxiliary images only (held out from every client's training data)."""
    from fedlib.models import build_model

    torch.manual_seed(seed)
    net = build_model("mlp_mnist", state.ctx.input_shape, state.ctx.num_classes)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    net.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(aux_y), generator=g).split(64):
            loss = torch.nn.functional.cross_entropy(net(aux_x[idx])[0], aux_y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


def _best_over(images: torch.Tensor, x: torch.Tensor, y: torch.Tensor, classifier, mean, std) -> dict:
    """Reconstructions without a class (the imprint's bins): each against its best match among all private
    images; label accuracy against that image's class."""
    from fedlib.privacy.metrics import label_accuracy, psnr_ssim

    psnr, ssim, labels = [], [], []
    for img in images:
        s = psnr_ssim(img.unsqueeze(0).expand_as(x), x, mean, std)
        j = int(s.ssim.idxmax())
        psnr.append(min(float(s.psnr[j]), 100.0))
        ssim.append(float(s.ssim[j]))
        labels.append(int(y[j]))
    acc = label_accuracy(classifier, images, torch.tensor(labels)) if classifier is not None else math.nan
    return {"psnr": float(np.mean(psnr)), "ssim": float(np.mean(ssim)), "label_acc": acc}


def finite_scores(row: dict) -> dict:
    """PSNR capped at 100 dB (an exact copy is ``inf``): tables and JSON stay numeric."""
    return {**row, "psnr": min(row["psnr"], 100.0)}


def _mlp_layers(model, shape) -> tuple[str, str] | None:
    """The imprint module's two Linear layers (the first on the flattened image of ``shape``, the next one)
    where the model has them (fedlib's MLPs: ``body.1``, ``body.3``), else None (a convolutional model)."""
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    first = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
             and m.in_features == math.prod(shape)]
    if not first or names.index(first[0]) + 1 >= len(names):
        return None
    return first[0], names[names.index(first[0]) + 1]


def attack_round(state, method: str, attacks: list[str], attack: dict, settings: dict, aux: tuple, classifier,
                 defence: dict | None = None, seed: int = 0, pictures: int | None = None):
    """The image attacks ``attacks`` (of ``gradient_inversion``, ``feature_inversion``, ``decoder``, ``imprint``:
    those the server holds the inputs of for ``method``, :func:`fedlib.privacy.what_server_holds`) on the target
    client's next round of the finished run ``state``. ``attack``: the client (``client``) and the decoder's
    ``decoder_batch`` / ``decoder_lr``; ``settings``: ``attack_steps``, ``restarts``, ``batch1_images``,
    ``decoder_steps``; ``aux``: the attacker's auxiliary images and labels; ``classifier``: the held-out label judge
    (:func:`held_out_classifier`). With ``defence`` (the clip + noise spec of
    :func:`fedlib.privacy.defense.defend_upload`) each upload first goes through the defence. One row per attack:
    ``attack``, ``psnr``, ``ssim``, ``label_acc``, ``images`` (reconstructions scored), ``seconds``.

    With ``pictures`` (a number of images, e.g. :data:`PICTURES`) it returns ``(rows, pictures)``: besides the
    rows, ``{attack: picture}`` with up to that many of the attack's reconstructions (evenly spaced over them,
    :func:`fedlib.privacy.pictures.spread`) and, beside each, the private image it was scored against (the best
    match the score took: of its class for a per-class statistic or a batch image, among all the client's images
    for an imprint bin, the image itself for the batch-1 bound), with the SSIM of each pair (:func:`_picture`)."""
    from fedlib.data.sources import MNIST_MEAN, MNIST_STD

    cid = attack["client"]
    private = state.data.train[cid]
    a = _Attacker(settings, state, method, cid, private.x, private.y, tuple(private.x.shape[1:]), aux, classifier,
                  defence, seed, pictures, MNIST_MEAN, MNIST_STD)
    broadcast, upload = capture(state, cid)
    upload = a.defended(broadcast, upload, 1)
    if "feature_inversion" in attacks:
        a.feature_inversion(broadcast, upload)
    if "gradient_inversion" in attacks:
        a.gradient_inversion(broadcast, upload)
        a.batch_one(broadcast, upload)
    if "decoder" in attacks:
        a.decoder(upload, attack)
    if "imprint" in attacks:
        a.imprint(broadcast)
    return (a.rows, a.kept) if pictures else a.rows


@dataclasses.dataclass
class _Attacker:
    """The attacks of :func:`attack_round` on one client's next round of one finished run, each adding its row
    (and, with ``pictures``, its picture) as it finishes."""

    settings: dict
    state: object
    method: str
    cid: int
    x: torch.Tensor
    y: torch.Tensor
    shape: tuple
    aux: tuple
    classifier: object
    spec: dict | None
    seed: int
    pictures: int | None
    mean: object
    std: object
    rows: list = dataclasses.field(default_factory=list)
    kept: dict = dataclasses.field(default_factory=dict)

    @property
    def kw(self) -> dict:
        s = self.settings
        return dict(steps=s["attack_steps"], restarts=s["restarts"], mean=self.mean, std=self.std, seed=self.seed)

    @property
    def lr(self) -> float:
        t = self.state.ctx.train
        return t.lr * t.lr_decay ** self.state.round

    def defended(self, b, u, tag):
        """The upload ``u`` through the defence (its own noise draw per ``tag``), or as it is without one."""
        from fedlib.privacy.defense import defend_upload

        if self.spec is None:
            return u
        return defend_upload(b, u, self.spec, torch.Generator().manual_seed(self.seed * 1000 + tag))

    @staticmethod
    def usable(images) -> bool:  # a diverged run's NaN weights give no reconstruction
        return images is not None and len(images) > 0 and bool(torch.isfinite(images).all())

    def add(self, name, t0, images, picture=None, **scores):
        self.rows.append(finite_scores({"method": self.method, "attack": name, **scores, "images": int(images),
                                  "seconds": time.perf_counter() - t0}))
        if self.pictures and picture is not None:
            self.kept[name] = _picture(*picture, mean=self.mean, std=self.std, n=self.pictures)

    def scored(self, name, t0, images, classes):
        """Add the row of per-class or per-image reconstructions ``images`` of ``classes``, where usable."""
        from fedlib.privacy import score

        x, y = self.x, self.y
        if self.usable(images):
            self.add(name, t0, len(images), (images, x, y, classes),
                     **score(images, x, y, classes, self.classifier, self.mean, self.std))

    def feature_inversion(self, broadcast, upload) -> None:
        from fedlib.privacy import attack_upload

        t0 = time.perf_counter()
        out = attack_upload(self.method, broadcast, upload, self.state.model(self.cid), self.shape, loss="cosine",
                            **self.kw)
        for name, (rec, classes) in out.items():
            images, classes = held_classes(rec.images, classes, self.y)
            self.scored(name, t0, images, classes)
            t0 = time.perf_counter()

    def gradient_inversion(self, broadcast, upload) -> None:
        """The realistic gradient inversion: the client's whole round of local steps at its own batch size."""
        from fedlib.privacy import attack_upload

        t0, t, y = time.perf_counter(), self.state.ctx.train, self.y
        steps = max(1, len(y) // t.batch_size) * t.local_epochs
        out = attack_upload(self.method, broadcast, upload, self.state.model(self.cid), self.shape, batch=len(y),
                            labels=y.clone(), lr=self.lr, local_steps=steps, **self.kw)
        if "gradient_inversion" in out:
            self.scored(f"gradient_inversion (B {t.batch_size}, {steps} steps)", t0,
                        out["gradient_inversion"][0].images, y.clone())

    def batch_one(self, broadcast, upload) -> None:
        """The batch-1 upper bound: one image per round, its label read from the logits layer (iDLG) where the
        upload has one, else given."""
        from fedlib.data.federated import ClientData
        from fedlib.privacy import attack_upload, score
        from fedlib.privacy.table import logits_layer, update_gradient

        t0, x, y, cid = time.perf_counter(), self.x, self.y, self.cid
        parts, ones, C = [], [], self.state.ctx.num_classes
        # the method's upload layout decides it once: FedPer, FedNH send no layer with C outputs to read a label from
        no_head = logits_layer(update_gradient(self.state.model(cid), broadcast, upload, self.lr, 1), C) is None
        for i in range(min(self.settings["batch1_images"], len(y))):
            one = ClientData(cid, x[i:i + 1], y[i:i + 1], y[i:i + 1].clone())
            b1, u1 = capture(self.state, cid, data=one, batch_size=1)
            u1 = self.defended(b1, u1, 100 + i)
            known = y[i:i + 1].clone() if no_head else None
            rec = attack_upload(self.method, b1, u1, self.state.model(cid), self.shape, batch=1, labels=known,
                                lr=self.lr, local_steps=1, num_classes=C, **self.kw)["gradient_inversion"][0]
            if self.usable(rec.images):
                parts.append(score(rec.images, x[i:i + 1], y[i:i + 1], None, self.classifier, self.mean, self.std))
                ones.append((i, rec.images))
        if parts:
            idx = [i for i, _ in ones]
            self.add(f"gradient_inversion (batch 1, {'known label' if no_head else 'iDLG label'})", t0, len(parts),
                     (torch.cat([r for _, r in ones]), x[idx], y[idx], None, True),
                     **{k: float(np.mean([min(p[k], 100.0) for p in parts])) for k in ("psnr", "ssim", "label_acc")})

    def decoder(self, upload, atk: dict) -> None:
        """A decoder trained on the auxiliary images inverts each uploaded feature statistic."""
        from fedlib.privacy import model_query, reconstruct, train_inversion
        from fedlib.privacy.table import feature_targets

        normalize = ("high",) if self.state.cfg["algorithm"]["name"] == "mpfedcl" else ()
        query = model_query(self.state.model(self.cid), normalize=normalize)
        for key, (stats, classes) in feature_targets(upload).items():
            level = key if key in ("low", "high") else "high"
            t0 = time.perf_counter()
            res = train_inversion(query, self.aux[0], levels=(level,), steps=self.settings["decoder_steps"],
                                  batch_size=atk["decoder_batch"], lr=atk["decoder_lr"], seed=self.seed,
                                  progress=False)
            with torch.no_grad():
                images = reconstruct(res, {level: stats})
            images, classes = held_classes(images, classes, self.y)
            self.scored(f"decoder:{key}", t0, images, classes)

    def imprint(self, broadcast) -> None:
        """A malicious server's crafted first layer: the update's bins give back single images."""
        from fedlib.privacy import craft_imprint, recover_imprint

        layers = _mlp_layers(self.state.model(self.cid), self.shape)
        if layers is None or not all(f"w.{n}.weight" in broadcast for n in layers):
            return
        t0 = time.perf_counter()
        honest = {k[2:]: v for k, v in broadcast.items() if k.startswith("w.")}
        crafted = {**broadcast, **{f"w.{k}": v for k, v in craft_imprint(honest, self.aux[0], *layers).items()}}
        b, u = capture(self.state, self.cid, broadcast=crafted)
        u = self.defended(b, u, 2)
        grads = {k[2:]: b[k] - u[k] for k in u if k.startswith("w.") and k in b}
        images = recover_imprint(grads, self.shape, layers[0])
        images = torch.maximum(torch.minimum(images, _box(self.mean, self.std)[1]), _box(self.mean, self.std)[0])
        if self.usable(images):
            self.add("imprint (crafted broadcast)", t0, len(images), (images, self.x, self.y, None),
                     **_best_over(images, self.x, self.y, self.classifier, self.mean, self.std))


#: how many of an attack's reconstructions the leakage study keeps as pictures (:func:`attack_round`)
PICTURES = 8


def _picture(images: torch.Tensor, x: torch.Tensor, y: torch.Tensor, classes: torch.Tensor | None,
             direct: bool = False, *, mean, std, n: int) -> dict:
    """Up to ``n`` of an attack's reconstructions ``images`` (evenly spaced over them), each beside the private image
    its score compared it with, as the scores of :func:`attack_round` take it: with ``classes`` the best match (by
    SSIM) among the client's images ``x`` of that class; without, the best match among all of them (the imprint's
    bins); with ``direct`` the image of ``x`` at the same position (the batch-1 bound). ``{"n", "of", "index",
    "labels", "ssim", "real", "recon"}``: the images as base64 PNG strips (:func:`fedlib.privacy.pictures.encode`),
    ``ssim`` the SSIM of each pair (their mean over all ``of`` reconstructions is the row's SSIM)."""
    from fedlib.privacy import psnr_ssim, to_unit_range
    from fedlib.privacy.pictures import encode, spread

    pick = spread(len(images), n)
    real, ssim, labels = [], [], []
    for k in pick:
        img = images[k:k + 1]
        if direct:
            pool, pool_y = x[k:k + 1], y[k:k + 1]
        elif classes is not None:
            own = y == int(classes[k])
            pool, pool_y = x[own], y[own]
        else:
            pool, pool_y = x, y
        s = psnr_ssim(img.expand_as(pool), pool, mean, std)
        j = int(s.ssim.idxmax())
        real.append(pool[j])
        ssim.append(float(s.ssim[j]))
        labels.append(int(pool_y[j]))
    return {"n": len(pick), "of": len(images), "index": pick, "labels": labels, "ssim": ssim,
            "real": encode(to_unit_range(torch.stack(real), mean, std)),
            "recon": encode(to_unit_range(images[pick], mean, std))}


def held_classes(images: torch.Tensor, classes: torch.Tensor | None, y: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows of a per-class reconstruction whose class the target client holds (``y``: its labels).

    A dense per-class table (FedFA's anchors: one row per class of the task) also carries rows of classes the
    client has no image of; such a row is the server's own broadcast, or its update by other data, so it
    reveals nothing of this client and there is no private image to score it against. Reconstructions
    without classes (gradient inversion) pass unchanged."""
    if classes is None or images is None:
        return images, classes
    keep = torch.isin(classes, y)
    return images[keep], classes[keep]


def _box(mean, std):
    from fedlib.privacy.inversion import pixel_box

    return pixel_box(mean, std, 1)
