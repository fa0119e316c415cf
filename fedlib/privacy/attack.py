"""Feature-inversion attack of an honest-but-curious server on uploaded prototypes.

FedMPS (Fig. 11, docs/fedmps.md) runs the feature-space hijacking attack of MPFT (Zhang et al.,
ICLR 2025) / FSHA (Pasquini et al., CCS 2021) in the opaque-box setting of He, Zhang and
Lee (IEEE IoT-J 2021). The paper leaves the protocol open; this module implements the
one chosen in docs/fedmps.md, decision 22.

Threat model
------------
- **Attacker**: the server, honest but curious. It runs the protocol faithfully and
  only looks at what it legitimately sees.
- **It holds** the prototypes that one client uploaded: for each class ``k`` the client
  owns, the class means ``p^l_k`` and/or ``p^h_k`` of its L2-normalised low- and
  high-level features (exactly the Message the client sent, nothing more).
- **It can query** the client's model as an opaque box: it submits inputs of its choice
  and receives the intermediate features ``(z^l, z^h)``. It never reads weights or
  gradients and never sees the client's data.
- **It has auxiliary data** from the same distribution that is *not* the client's
  (e.g. test images no client holds), with labels only for the class-average reference.
- **Goal**: reconstruct the client's private images of each class.
- **Method**: query the model on the auxiliary images, train a decoder ``G`` that maps
  the chosen levels' features (low, high, or both concatenated) back to the image with
  an MSE loss and Adam (FedMPS: 10,000 steps), then apply ``G`` to the prototypes:
  one reconstruction per class.

No discriminator or pilot network of the original FSHA is used: the server cannot steer
the client's training here, only invert what the client's model computes.

Because a prototype is a mean of unit vectors, it lies inside the sphere the decoder was
trained on; the expected output is a blurry class average (docs/fedmps.md, decision 22).
:func:`prototype_attack` therefore also reports two references: the attacker's own
auxiliary class-mean image (what class-average knowledge alone gives) and the decoder
applied to the features of single private images (an upper bound on what the decoder
could reveal if individual features were uploaded).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from fedlib.privacy.metrics import SCORE_COLUMNS, class_average_reference, psnr_ssim, scores_against_class
from fedlib.validation import ConfigError

QueryFn = Callable[[torch.Tensor], Mapping[str, torch.Tensor]]
LEVEL_OPTIONS: list[tuple[str, ...]] = [("low", "high"), ("low",), ("high",)]


def model_query(model: nn.Module, batch_size: int = 512, normalize: Sequence[str] = ()) -> QueryFn:
    """Wrap a fedlib model as the opaque box the attacker queries.

    The returned function maps images (n, C, H, W) to ``{level: Tensor (n, d)}``; the levels in
    ``normalize`` are L2-normalised per row, for methods whose prototypes are built from normalised
    embeddings (MP-FedCL), so the decoder is trained on the scale of what the client uploads. It runs
    in eval mode without gradients and restores the model's mode afterwards, so queries
    leave the client's model (batch-norm statistics included) untouched. Eval mode is the
    client's inference behaviour; prototypes collected in train mode (docs/fedmps.md
    item 7) therefore differ slightly from what the attacker's queries return.
    """

    @torch.no_grad()
    def query(x: torch.Tensor) -> dict[str, torch.Tensor]:
        was_training = model.training
        model.eval()
        try:
            parts = [model(x[i:i + batch_size])[1] for i in range(0, len(x), batch_size)]
        finally:
            model.train(was_training)
        out = {k: torch.cat([p[k] for p in parts]).detach().cpu().float() for k in parts[0]}
        return {k: F.normalize(v, dim=1) if k in normalize else v for k, v in out.items()}

    return query


def levels_name(levels: Sequence[str]) -> str:
    """Display name of a level combination, e.g. ``("low", "high") -> "low+high"``."""
    return "+".join(levels)


def _check_levels(levels, available: Sequence[str]) -> tuple[str, ...]:
    allowed = f"a non-empty tuple of distinct names from {sorted(available)}"
    if isinstance(levels, str) or not isinstance(levels, Sequence) or not levels:
        raise ConfigError("levels", levels, allowed)
    levels = tuple(levels)
    for lv in levels:
        if lv not in available:
            raise ConfigError("levels", lv, f"a level the model returns: one of {sorted(available)}")
    if len(set(levels)) != len(levels):
        raise ConfigError("levels", levels, allowed)
    return levels


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(name, value, "an integer in [1, inf)")


class InversionDecoder(nn.Module):
    """Decoder ``G``: concatenated feature vector -> image (normalised pixel space).

    Layout, chosen from the image shape (H, W) by the number of stride-2 upsamplings
    ``u`` (3 if 8 divides H and W, else 2 if 4 does, else 1 if 2 does, else 0)::

        z * scale -> Linear(d, hidden) -> ReLU -> Linear(hidden, c0 * H/2^u * W/2^u) -> ReLU
          -> u x [ConvTranspose2d(k=4, s=2, p=1) -> ReLU]     (channels halve each time)
          -> Conv2d(channels, C, 3, p=1)                      (linear output)

    with c0 = channels * 2^u. Defaults (hidden 256, channels 8) give
    Fashion-MNIST 28x28x1: 32x7x7 -> 16x14x14 -> 8x28x28 -> 1x28x28, and
    CIFAR 32x32x3: 64x4x4 -> 32x8x8 -> 16x16x16 -> 8x32x32 -> 3x32x32.
    The narrow layers keep 1,000 steps on the 4,704-d Fashion-MNIST input within
    seconds of one CPU core; raise ``hidden``/``channels`` for sharper decoders.
    ``scale`` is a fixed per-level factor (1 / RMS of that level's auxiliary features)
    so that levels of very different dimension weigh alike when concatenated; for
    L2-normalised features it equals sqrt(d).
    """

    def __init__(self, in_dim: int, image_shape: tuple[int, int, int], hidden: int = 256, channels: int = 8):
        super().__init__()
        c, h, w = image_shape
        ups = next(u for u in (3, 2, 1, 0) if h % 2 ** u == 0 and w % 2 ** u == 0)
        self.image_shape, self.base = (c, h, w), (channels * 2 ** ups, h // 2 ** ups, w // 2 ** ups)
        self.register_buffer("scale", torch.ones(in_dim))
        self.fc = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(),
                                nn.Linear(hidden, self.base[0] * self.base[1] * self.base[2]), nn.ReLU())
        layers: list[nn.Module] = []
        ch = self.base[0]
        for _ in range(ups):
            layers += [nn.ConvTranspose2d(ch, ch // 2, 4, stride=2, padding=1), nn.ReLU()]
            ch //= 2
        layers.append(nn.Conv2d(ch, c, 3, padding=1))
        # channels-last lets CPU transposed convolutions use oneDNN: about 2x faster.
        self.deconv = nn.Sequential(*layers).to(memory_format=torch.channels_last)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Map features (n, d) to images (n, C, H, W)."""
        h = self.fc(z * self.scale).view(-1, *self.base).contiguous(memory_format=torch.channels_last)
        return self.deconv(h).contiguous()


@dataclasses.dataclass
class InversionResult:
    """A trained decoder and how it was trained.

    decoder : InversionDecoder, in eval mode
    loss_curve : ndarray, shape (steps,), the training MSE of every step
    levels : tuple of level names, in the order their features are concatenated
    feature_dims : {level: d}
    seed, steps : int
    """

    decoder: InversionDecoder
    loss_curve: np.ndarray
    levels: tuple[str, ...]
    feature_dims: dict[str, int]
    seed: int
    steps: int


def _concat(features: Mapping[str, torch.Tensor], levels: Sequence[str], dims: Mapping[str, int] | None,
            field: str) -> torch.Tensor:
    """Concatenate the chosen levels' features, checking names and dimensions."""
    parts, n = [], None
    for lv in levels:
        if lv not in features:
            raise ConfigError(field, sorted(features), f"a mapping with the levels {list(levels)}")
        z = torch.as_tensor(features[lv]).detach().cpu().float()
        if z.dim() == 1:
            z = z.unsqueeze(0)
        want = None if dims is None else dims[lv]
        if z.dim() != 2 or (want is not None and z.shape[1] != want):
            raise ConfigError(f"{field}[{lv!r}]", tuple(z.shape),
                              f"a tensor of shape (k, {want if want is not None else 'd'})")
        if n is not None and len(z) != n:
            raise ConfigError(f"{field}[{lv!r}]", tuple(z.shape), f"{n} rows, as for level {levels[0]!r}")
        n = len(z)
        parts.append(z)
    return torch.cat(parts, dim=1)


def train_inversion(query_fn: QueryFn, aux_images: torch.Tensor, levels: Sequence[str] = ("low", "high"),
                    steps: int = 10_000, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                    hidden: int = 256, channels: int = 8, progress: bool = True) -> InversionResult:
    """Train the decoder ``G`` on (features, image) pairs of the auxiliary data.

    Minimises ``E ||G(z(x)) - x||^2`` over auxiliary images ``x`` with Adam, one random
    batch (with replacement) per step: the opaque-box inversion network of He, Zhang and
    Lee (2021) as used for FedMPS Fig. 11 (10,000 steps there).

    Parameters
    ----------
    query_fn : callable, images (n, C, H, W) -> {level: Tensor (n, d)}
        The opaque box (see :func:`model_query`). Called once on all auxiliary images.
    aux_images : Tensor, shape (n, C, H, W), normalised like the client's data
    levels : tuple of level names, e.g. ``("low", "high")``, ``("low",)``, ``("high",)``
    steps, batch_size : int
    lr : float, Adam learning rate
    seed : int
        Fixes the decoder initialisation and the batch order: same seed, same decoder.
    hidden, channels : int
        Decoder width: its first layer, and its channels at full resolution.
    progress : bool, show a tqdm bar

    Returns
    -------
    InversionResult
    """
    aux_images = torch.as_tensor(aux_images)
    if aux_images.dim() != 4 or len(aux_images) == 0:
        raise ConfigError("aux_images", tuple(aux_images.shape), "a non-empty tensor of shape (n, C, H, W)")
    for name, value in (("steps", steps), ("batch_size", batch_size), ("hidden", hidden), ("channels", channels)):
        _check_positive_int(name, value)
    if not isinstance(lr, (int, float)) or isinstance(lr, bool) or not lr > 0:
        raise ConfigError("lr", lr, "a number in (0, inf)")
    x = aux_images.detach().cpu().float()
    feats = query_fn(x)
    levels = _check_levels(levels, list(feats))
    dims = {lv: int(feats[lv].shape[1]) for lv in levels}
    z = _concat(feats, levels, None, "query_fn(aux_images)")
    if len(z) != len(x):
        raise ConfigError("query_fn(aux_images)", len(z), f"one feature row per auxiliary image ({len(x)})")

    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        decoder = InversionDecoder(z.shape[1], tuple(x.shape[1:]), hidden, channels)
    # Per-level scale (see InversionDecoder): 1 / RMS over the auxiliary features.
    scale = torch.cat([torch.full((dims[lv],), float(feats[lv].float().pow(2).mean().clamp_min(1e-12).rsqrt()))
                       for lv in levels])
    decoder.scale.copy_(scale)
    opt = torch.optim.Adam(decoder.parameters(), lr=lr, fused=True)  # fused: ~4x cheaper step on CPU
    curve = np.empty(steps)
    decoder.train()
    bar = tqdm(range(steps), desc=f"decoder [{levels_name(levels)}]", disable=not progress, leave=False)
    for step in bar:
        idx = torch.randint(len(x), (batch_size,), generator=gen)
        loss = F.mse_loss(decoder(z[idx]), x[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        curve[step] = loss.item()
        if step % 50 == 0 or step == steps - 1:
            bar.set_postfix(mse=f"{curve[max(0, step - 49):step + 1].mean():.4f}")
    decoder.eval()
    return InversionResult(decoder, curve, levels, dims, seed, steps)


@torch.no_grad()
def reconstruct(result: InversionResult, protos: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """Apply the trained decoder to one client's prototypes.

    Parameters
    ----------
    result : InversionResult
    protos : {level: Tensor, shape (k, d_level)}
        The uploaded prototypes, one row per class, the same class order for every level.
        Levels the decoder was not trained on are ignored.

    Returns
    -------
    Tensor, shape (k, C, H, W), in the normalised pixel space of the auxiliary images
    """
    return result.decoder(_concat(protos, result.levels, result.feature_dims, "protos"))


@torch.no_grad()
def reconstruct_samples(result: InversionResult, query_fn: QueryFn, x: torch.Tensor) -> torch.Tensor:
    """Decode the features of individual images ``x`` (n, C, H, W) -> (n, C, H, W)."""
    return result.decoder(_concat(query_fn(x), result.levels, result.feature_dims, "query_fn(x)"))


def single_sample_reference(result: InversionResult, query_fn: QueryFn, x: torch.Tensor, y: torch.Tensor,
                            mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0) -> pd.DataFrame:
    """Upper-bound reference: the decoder applied to each private image's own features.

    What the attack would recover if the client uploaded single-sample features instead of
    class means. Each reconstruction is scored against its own image; rows aggregate per
    class with the columns of :func:`~fedlib.privacy.metrics.scores_against_class`.
    """
    y = torch.as_tensor(y)
    s = psnr_ssim(reconstruct_samples(result, query_fn, x), x, mean, std)
    s["class"] = y.numpy()
    g = s.groupby("class", sort=True)
    out = pd.DataFrame({"n": g.size(), "psnr": g.psnr.mean(), "ssim": g.ssim.mean(),
                        "psnr_best": g.psnr.max(), "ssim_best": g.ssim.max()}).reset_index()
    return out[SCORE_COLUMNS]


@dataclasses.dataclass
class LevelRun:
    """The attack with one level combination: its decoder and one reconstruction per class."""

    levels: tuple[str, ...]
    result: InversionResult
    recons: torch.Tensor              # (k, C, H, W)


@dataclasses.dataclass
class AttackReport:
    """Everything :func:`prototype_attack` produced, ready for tables and Fig. 11.

    runs : {levels_name: LevelRun}, in the order of ``levels_options``
    classes : Tensor (k,), the attacked classes, in prototype row order
    originals : Tensor (k, C, H, W) or None, one private image per class (the first one)
    scores : tidy DataFrame, one row per (source, levels, class); ``source`` is
        ``"prototype"`` (the attack), ``"class_average"`` (auxiliary class-mean image) or
        ``"single_sample"`` (decoder on single private images); empty without client data
    mean, std : the normalisation, for plotting
    """

    runs: dict[str, LevelRun]
    classes: torch.Tensor
    originals: torch.Tensor | None
    scores: pd.DataFrame
    mean: float | Sequence[float]
    std: float | Sequence[float]

    def summary(self) -> pd.DataFrame:
        """Mean PSNR/SSIM over classes per (source, levels): the table a notebook prints."""
        cols = ["psnr", "ssim", "psnr_best", "ssim_best"]
        return self.scores.groupby(["source", "levels"], sort=False)[cols].mean().reset_index()


def prototype_attack(model: nn.Module | QueryFn, aux_x: torch.Tensor, protos_by_level: Mapping[str, torch.Tensor],
                     classes: torch.Tensor | Sequence[int], *, aux_y: torch.Tensor | None = None,
                     client_x: torch.Tensor | None = None, client_y: torch.Tensor | None = None,
                     levels_options: Sequence[Sequence[str]] = tuple(LEVEL_OPTIONS), steps: int = 10_000,
                     batch_size: int = 64, lr: float = 1e-3, seed: int = 0, hidden: int = 256, channels: int = 8,
                     mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                     progress: bool = True) -> AttackReport:
    """Run the FedMPS Fig. 11 attack for each level combination, with scores and references.

    Parameters
    ----------
    model : nn.Module or callable
        The client's model (wrapped by :func:`model_query`) or a ready query function.
    aux_x : Tensor, shape (n, C, H, W), the attacker's auxiliary images
    protos_by_level : {level: Tensor, shape (k, d_level)}, the client's uploaded prototypes
    classes : int Tensor, shape (k,), the class of each prototype row
    aux_y : Tensor, shape (n,), optional; enables the class-average reference
    client_x, client_y : the client's private images and labels, optional
        Only the evaluation uses them (the attacker never does): originals for the figure,
        scores, and the single-sample reference.
    levels_options : level combinations to attack, default both / low / high
    steps, batch_size, lr, seed, hidden, channels, progress : see :func:`train_inversion`
    mean, std : the dataset normalisation, for scores and figures

    Returns
    -------
    AttackReport
    """
    query = model_query(model) if isinstance(model, nn.Module) else model
    classes = torch.as_tensor(classes, dtype=torch.int64).flatten()
    if (client_x is None) != (client_y is None):
        raise ConfigError("client_y", None if client_y is None else "given",
                          "client_x and client_y both given or both omitted")
    runs: dict[str, LevelRun] = {}
    frames = []
    for levels in levels_options:
        result = train_inversion(query, aux_x, levels, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                                 hidden=hidden, channels=channels, progress=progress)
        recons = reconstruct(result, protos_by_level)
        if len(recons) != len(classes):
            raise ConfigError("classes", len(classes), f"one class per prototype row ({len(recons)})")
        name = levels_name(result.levels)
        runs[name] = LevelRun(result.levels, result, recons)
        if client_x is not None:
            frames.append(scores_against_class(recons, classes, client_x, client_y, mean, std)
                          .assign(source="prototype", levels=name))
            ref = single_sample_reference(result, query, client_x, client_y, mean, std)
            frames.append(ref[ref["class"].isin(classes.tolist())].assign(source="single_sample", levels=name))
    originals = None
    if client_x is not None:
        client_y = torch.as_tensor(client_y)
        if aux_y is not None:
            frames.append(class_average_reference(aux_x, aux_y, classes, client_x, client_y, mean, std)
                          .assign(source="class_average", levels="-"))
        originals = torch.stack([client_x[client_y == c][0] for c in classes.tolist()])
    cols = ["source", "levels", *SCORE_COLUMNS]
    scores = pd.concat(frames, ignore_index=True)[cols] if frames else pd.DataFrame(columns=cols)
    return AttackReport(runs, classes, originals, scores, mean, std)


def attacker_aux(state, target: int, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The attacker's auxiliary images: ``n`` images of the official test split that are not in client
    ``target``'s data (same distribution, never the client's own images); ``state`` a finished run's
    :class:`fedlib.runner.RunState`."""
    ds = state.data.dataset
    pool_offset = len(ds.y_train)
    own = {int(i) - pool_offset for i in state.data.partition.test[target] if i >= pool_offset}
    candidates = np.array([i for i in range(len(ds.y_test)) if i not in own])
    pick = np.sort(np.random.default_rng(seed).choice(candidates, min(n, len(candidates)), replace=False))
    idx = torch.from_numpy(pick)
    return ds.x_test[idx], ds.y_test[idx]
