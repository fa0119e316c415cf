"""Partitioners: pure, seeded functions from labels to per-client sample indices.

Every index refers to the *pool* ``concat(train, test)`` of a dataset: official test
samples are offset by ``len(y_train)``. A :class:`Partition` carries the per-client
train and test indices, the client x class count matrices and a hash of all of it.

Schemes
-------
- ``nway_kshot``: FedProto's few-shot split as FedMPS (Table II) and GFPL use it.
- ``dirichlet``: per-class Dirichlet(alpha), PFNM style with PFLlib's capacity mask and
  resampling until every client holds a minimum number of samples.
- ``pathological``: PFLlib's "pat" (a fixed number of classes per client).
- ``iid``: a uniform random split (reference point for the non-IID schemes).
- ``fedpcl``: FedPCL's MNIST label skew as MP-FedCL uses it (a Dirichlet split of the first
  ``train_size`` images, per-client label-IID test blocks).
- ``domains``: feature skew, one domain per client with the same label distribution (FedPCL's
  Digit-5 construction; needs a dataset with domains, :mod:`fedlib.data.domains`).

``dirichlet``, ``pathological`` and ``iid`` take ``split``: ``"merge"`` (PFLlib: pool the
official train and test sets, partition the pool, then split each client
``train_ratio``/rest) or ``"official"`` (partition the official train set; each client's
test set is drawn from the official test set with its training class proportions).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import random

import numpy as np

from fedlib.validation import BOOL, SEED, ConfigError, Interval, Options, check_value, unknown_key_error


@dataclasses.dataclass
class Partition:
    """Per-client indices into the pool ``concat(train, test)`` plus their records."""

    train: list[np.ndarray]
    test: list[np.ndarray]
    num_classes: int
    counts: np.ndarray       # (num_clients, num_classes) training samples per class
    test_counts: np.ndarray  # (num_clients, num_classes) test samples per class
    params: dict
    hash: str

    @property
    def num_clients(self) -> int:
        return len(self.train)

    def classes(self, cid: int) -> np.ndarray:
        """The classes client ``cid`` holds training samples of."""
        return np.flatnonzero(self.counts[cid])

    def record(self) -> dict:
        """The readable record stored with every run (PFLlib's config.json idea)."""
        return {"params": self.params, "hash": self.hash,
                "train_counts": self.counts.tolist(), "test_counts": self.test_counts.tolist()}


def _finish(train, test, labels_pool, num_classes, params) -> Partition:
    train = [np.sort(np.asarray(t, dtype=np.int64)) for t in train]
    test = [np.sort(np.asarray(t, dtype=np.int64)) for t in test]
    counts = np.stack([np.bincount(labels_pool[t], minlength=num_classes) for t in train])
    test_counts = np.stack([np.bincount(labels_pool[t], minlength=num_classes) for t in test])
    h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
    for arr in train + test:
        h.update(arr.tobytes())
        h.update(b"|")
    return Partition(train, test, num_classes, counts, test_counts, params, h.hexdigest()[:16])


def _check_int(field, value, low, high=None, why=""):
    rule = Interval(low, high, integer=True)
    if not rule.ok(value):
        raise ConfigError(field, value, rule.describe() + why)


def nway_kshot(y_train: np.ndarray, y_test: np.ndarray, num_classes: int, num_clients: int = 20,
               ways: int = 3, shots: int = 100, stdev: int = 1, block: int | None = None,
               test_shots: int = 15, seed: int = 1234, shuffle: bool = True,
               ways_stdev: int | None = None) -> Partition:
    """FedProto's n-way k-shot split (FedProto Sec. 5; FedMPS Sec. IV-A, Table II).

    Client i owns ``n_i ~ U{max(2, ways-stdev), ..., min(C, ways+stdev+1) - 1}`` classes
    drawn without replacement and takes ``k_i ~ U{shots-stdev+1, ..., shots+stdev}``
    training samples of each: the first k_i of its own block of ``block`` (|A_ij|)
    samples in the class, so clients are disjoint when k_i <= block. Its test set holds
    ``test_shots`` samples of each owned class from the official test split, also from
    disjoint per-client blocks. The draws follow the FedProto/FedMPS code: numpy's
    legacy RandomState(seed) draws n then k, Python's Random(seed) draws the class sets.
    ``shuffle`` permutes each class once with the seed before blocks are cut (docs/fedmps.md, decision 14:
    equals the paper's "randomly selected").
    ``ways_stdev`` (default: ``stdev``) spreads the number of classes separately from the shots
    (GFPL's w-hat and s-hat; FedProto's code has one ``stdev`` for both).
    """
    C = num_classes
    _check_int("partition.num_clients", num_clients, 1)
    _check_int("partition.ways", ways, 1, C, f" (the dataset has {C} classes)")
    _check_int("partition.stdev", stdev, 0)
    _check_int("partition.shots", shots, max(1, stdev))
    _check_int("partition.test_shots", test_shots, 0)
    block = shots + stdev if block is None else block
    _check_int("partition.block", block, shots + stdev, why=f" (at least shots + stdev = {shots + stdev})")

    w_sd = stdev if ways_stdev is None else ways_stdev
    _check_int("partition.ways_stdev", w_sd, 0)
    rs = np.random.RandomState(seed)
    lo, hi = max(2, ways - w_sd), min(C, ways + w_sd + 1)
    lo = min(lo, C)
    n_list = rs.randint(lo, max(hi, lo + 1), num_clients)
    # stdev = 0 would leave FedProto's range [k+1, k] empty: every client then takes k.
    k_list = rs.randint(shots - stdev + 1 if stdev else shots, shots + stdev + 1, num_clients)
    py = random.Random(seed)
    class_sets = [sorted(py.sample(range(C), int(n))) for n in n_list]

    shuffler = np.random.default_rng([seed, 7])
    n_train = len(y_train)
    by_class_tr, by_class_te = [], []
    for c in range(C):
        tr = np.flatnonzero(y_train == c)
        te = np.flatnonzero(y_test == c) + n_train
        if shuffle:
            tr, te = shuffler.permutation(tr), shuffler.permutation(te)
        by_class_tr.append(tr)
        by_class_te.append(te)

    train, test = [], []
    for i, (classes, k) in enumerate(zip(class_sets, k_list, strict=False)):
        tr_i, te_i = [], []
        for c in classes:
            if i * block + k > len(by_class_tr[c]):
                raise ConfigError(
                    "partition.shots", shots,
                    f"at most what the data holds: class {c} has {len(by_class_tr[c])} training samples, "
                    f"client {i} needs samples {i * block}..{i * block + k - 1} "
                    f"(num_clients={num_clients}, block={block}, k_{i}={k})")
            if (i + 1) * test_shots > len(by_class_te[c]):
                raise ConfigError(
                    "partition.test_shots", test_shots,
                    f"at most {len(by_class_te[c]) // num_clients} for {num_clients} clients "
                    f"(class {c} has {len(by_class_te[c])} test samples)")
            tr_i.append(by_class_tr[c][i * block: i * block + k])
            te_i.append(by_class_te[c][i * test_shots: (i + 1) * test_shots])
        train.append(np.concatenate(tr_i))
        test.append(np.concatenate(te_i))
    params = dict(scheme="nway_kshot", num_clients=num_clients, ways=ways, shots=shots, stdev=stdev,
                  block=block, test_shots=test_shots, seed=seed, shuffle=shuffle)
    if ways_stdev is not None:  # absent otherwise, so that earlier partitions keep their hash
        params["ways_stdev"] = ways_stdev
    pool = np.concatenate([y_train, y_test])
    return _finish(train, test, pool, C, params)


def dirichlet_indices(labels: np.ndarray, num_clients: int, alpha: float, min_size: int,
                      seed: int) -> list[np.ndarray]:
    """Per-class Dirichlet split (PFNM; PFLlib ``separate_data`` "dir").

    For each class, proportions ~ Dir(alpha * 1_M); a client already holding at least
    N/M samples gets proportion 0 for later classes (PFLlib's capacity mask). The whole
    draw repeats until every client holds at least ``min_size`` samples.
    """
    rs = np.random.RandomState(seed)
    N, C = len(labels), int(labels.max()) + 1
    by_class = [np.flatnonzero(labels == c) for c in range(C)]
    concentration = np.repeat(alpha, num_clients)
    # An attempt only counts sizes; the index lists are built for the attempt that succeeds. The random
    # stream is drawn exactly as when every attempt built its lists (a shuffle and a Dirichlet per class),
    # and the proportions are computed with the same floating-point operations.
    for _attempt in range(10_000):
        sizes = np.zeros(num_clients, dtype=np.int64)
        drawn = []
        for idx in by_class:
            idx_c = idx.copy()
            rs.shuffle(idx_c)
            p = rs.dirichlet(concentration) * (sizes < N / num_clients)
            p = p / p.sum()
            ends = (np.cumsum(p) * len(idx_c)).astype(int)
            ends[-1] = len(idx_c)           # the last client takes the rest, as np.split gives it
            sizes[0] += ends[0]
            sizes[1:] += ends[1:] - ends[:-1]
            drawn.append((idx_c, ends[:-1]))
        if sizes.min() >= min_size:
            parts: list[list[int]] = [[] for _ in range(num_clients)]
            for idx_c, cuts in drawn:
                for part, chunk in zip(parts, np.split(idx_c, cuts), strict=False):
                    part.extend(chunk.tolist())
            return [np.array(p, dtype=np.int64) for p in parts]
    raise ConfigError("partition.min_size", min_size,
                      f"a size every client reaches; 10,000 Dirichlet(alpha={alpha}) draws failed")


def pathological_indices(labels: np.ndarray, num_clients: int, classes_per_client: int,
                         balance: bool, least_samples: int, seed: int) -> list[np.ndarray]:
    """PFLlib's "pat": classes are dealt to clients first-fit in a fixed order.

    Class c goes to the first ``ceil(M / C * classes_per_client)`` clients that still
    need classes; it is split equally (``balance``) or with random sizes drawn from
    U[max(n/10, least_samples/C), n) for all but the last, who takes the rest.
    """
    rs = np.random.RandomState(seed)
    C = int(labels.max()) + 1
    need = [classes_per_client] * num_clients
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c in range(C):
        idx_c = np.flatnonzero(labels == c)
        chosen = [m for m in range(num_clients) if need[m] > 0]
        chosen = chosen[: int(np.ceil(num_clients / C * classes_per_client))]
        if not chosen:
            continue
        per = len(idx_c) / len(chosen)
        if balance:
            sizes = [int(per)] * (len(chosen) - 1)
        else:
            sizes = rs.randint(max(int(per / 10), int(least_samples / C)), max(int(per), 1),
                               len(chosen) - 1).tolist()
        sizes.append(len(idx_c) - sum(sizes))
        start = 0
        for m, s in zip(chosen, sizes, strict=False):
            parts[m].extend(idx_c[start:start + s].tolist())
            start += s
            need[m] -= 1
    return [np.array(p, dtype=np.int64) for p in parts]


def _split_each(parts: list[np.ndarray], train_ratio: float, seed: int):
    """Split each client's pool indices ``train_ratio``/rest (PFLlib: 0.75/0.25)."""
    rng = np.random.default_rng([seed, 75])
    train, test = [], []
    for p in parts:
        p = rng.permutation(p)
        cut = int(round(len(p) * train_ratio))
        train.append(p[:cut])
        test.append(p[cut:])
    return train, test


def _test_like_train(train_counts: np.ndarray, y_test: np.ndarray, offset: int, seed: int):
    """Deal each class's official test samples to clients in proportion to their train counts."""
    rng = np.random.default_rng([seed, 99])
    M, C = train_counts.shape
    test: list[list[np.ndarray]] = [[] for _ in range(M)]
    for c in range(C):
        idx = rng.permutation(np.flatnonzero(y_test == c)) + offset
        total = train_counts[:, c].sum()
        if total == 0:
            continue
        cuts = np.floor(np.cumsum(train_counts[:, c]) / total * len(idx)).astype(int)[:-1]
        for m, chunk in enumerate(np.split(idx, cuts)):
            test[m].append(chunk)
    return [np.concatenate(t) if t else np.zeros(0, np.int64) for t in test]


def label_partition(scheme: str, y_train: np.ndarray, y_test: np.ndarray, num_classes: int,
                    num_clients: int = 20, seed: int = 1, split: str = "merge",
                    train_ratio: float = 0.75, alpha: float = 0.1, min_size: int | None = None,
                    classes_per_client: int = 2, balance: bool = False) -> Partition:
    """``dirichlet``, ``pathological`` or ``iid`` with the ``merge`` or ``official`` split."""
    _check_int("partition.num_clients", num_clients, 1)
    if split not in ("merge", "official"):
        raise ConfigError("partition.split", split, "one of 'merge', 'official'")
    check_value("partition.train_ratio", train_ratio, RULES["train_ratio"])
    n_train = len(y_train)
    pool = np.concatenate([y_train, y_test])
    labels = pool if split == "merge" else y_train
    N = len(labels)
    # PFLlib: least_samples = min(batch_size / (1 - train_ratio), N / M / 2) with batch_size 10.
    least = int(min(10 / (1 - 0.75), N / num_clients / 2))
    params = dict(scheme=scheme, num_clients=num_clients, seed=seed, split=split)
    if split == "merge":
        params["train_ratio"] = train_ratio
    if scheme == "dirichlet":
        check_value("partition.alpha", alpha, RULES["alpha"])
        min_size = least if min_size is None else min_size
        _check_int("partition.min_size", min_size, 0, N // num_clients,
                   f" (the data holds {N} samples for {num_clients} clients)")
        parts = dirichlet_indices(labels, num_clients, float(alpha), min_size, seed)
        params.update(alpha=alpha, min_size=min_size)
    elif scheme == "pathological":
        _check_int("partition.classes_per_client", classes_per_client, 1, num_classes,
                   f" (the dataset has {num_classes} classes)")
        if classes_per_client * num_clients < num_classes:
            raise ConfigError("partition.classes_per_client", classes_per_client,
                              f"at least {-(-num_classes // num_clients)} so that {num_clients} clients "
                              f"cover all {num_classes} classes")
        parts = pathological_indices(labels, num_clients, classes_per_client, bool(balance), least, seed)
        params.update(classes_per_client=classes_per_client, balance=bool(balance))
    elif scheme == "iid":
        parts = np.array_split(np.random.default_rng([seed, 3]).permutation(N), num_clients)
    else:
        raise ConfigError("partition.scheme", scheme, "one of " + ", ".join(SCHEMES))
    if split == "merge":
        train, test = _split_each(parts, train_ratio, seed)
    else:
        train = parts
        counts = np.stack([np.bincount(y_train[p], minlength=num_classes) for p in parts])
        test = _test_like_train(counts, y_test, n_train, seed)
    return _finish(train, test, pool, num_classes, params)


def fedpcl(y_train: np.ndarray, y_test: np.ndarray, num_classes: int, num_clients: int = 5, alpha: float = 0.05,
           train_size: int = 2000, min_size: int = 10, test_size: int = 100, seed: int = 0) -> Partition:
    """FedPCL's label-skew construction, used by MP-FedCL on MNIST (FedPCL code ``partition_data``).

    The first ``train_size`` training images (after one fixed shuffle of the official split,
    the same for every seed: a class-sorted source must not leave classes out) are split per
    class by Dir(``alpha``) with the capacity mask ("balance": a client already holding
    ``train_size / num_clients`` samples gets no more), drawn again until every client holds
    ``min_size``; client i's test set is the block ``[i * test_size, (i + 1) * test_size)`` of
    the (fixed-shuffled) official test split, so test sets are label-IID.
    """
    _check_int("partition.num_clients", num_clients, 1)
    _check_int("partition.train_size", train_size, num_clients, len(y_train),
               f" (the data holds {len(y_train)} training samples)")
    _check_int("partition.test_size", test_size, 1, len(y_test) // num_clients,
               f" ({len(y_test)} test samples for {num_clients} clients)")
    check_value("partition.alpha", alpha, RULES["alpha"])
    _check_int("partition.min_size", min_size, 0, train_size // num_clients)
    fixed = np.random.default_rng(0)
    tr_order, te_order = fixed.permutation(len(y_train)), fixed.permutation(len(y_test))
    chosen = tr_order[:train_size]
    parts = dirichlet_indices(np.asarray(y_train)[chosen], num_clients, float(alpha), min_size, seed)
    train = [chosen[p] for p in parts]
    n_train = len(y_train)
    test = [te_order[i * test_size:(i + 1) * test_size] + n_train for i in range(num_clients)]
    params = dict(scheme="fedpcl", num_clients=num_clients, alpha=alpha, train_size=train_size, min_size=min_size,
                  test_size=test_size, seed=seed)
    return _finish(train, test, np.concatenate([y_train, y_test]), num_classes, params)


def domains(y_train: np.ndarray, y_test: np.ndarray, num_classes: int, domain_train: np.ndarray,
            domain_test: np.ndarray, num_clients: int | None = None, train_per_class: int = 10,
            test_per_class: int = 200, seed: int = 0) -> Partition:
    """Feature skew (MP-FedCL Table V, FedPCL's Digit-5 construction): client i holds domain i, its
    first ``train_per_class`` training and first ``test_per_class`` test samples of every class (fewer
    where the domain has fewer), so every client has the same label distribution and its own features.
    ``num_clients`` must equal the number of domains; the split does not depend on ``seed``."""
    n_dom = int(max(domain_train.max(), domain_test.max())) + 1
    if num_clients is None:
        num_clients = n_dom
    if num_clients != n_dom:
        raise ConfigError("partition.num_clients", num_clients, f"{n_dom} (one client per domain of the dataset)")
    _check_int("partition.train_per_class", train_per_class, 1)
    _check_int("partition.test_per_class", test_per_class, 1)
    n_train = len(y_train)
    train, test = [], []
    for d in range(n_dom):
        for y, dom, per, out, offset in ((y_train, domain_train, train_per_class, train, 0),
                                         (y_test, domain_test, test_per_class, test, n_train)):
            idx = [np.flatnonzero((dom == d) & (y == c))[:per] for c in range(num_classes)]
            out.append(np.concatenate(idx) + offset)
    params = dict(scheme="domains", num_clients=num_clients, train_per_class=train_per_class,
                  test_per_class=test_per_class, seed=seed)
    return _finish(train, test, np.concatenate([y_train, y_test]), num_classes, params)


SCHEMES = ("nway_kshot", "dirichlet", "pathological", "iid", "fedpcl", "domains")
_COUNT, _SIZE = Interval(0, None, integer=True), Interval(1, None, integer=True)
# Type and range of every partition parameter, checked with the config before any data is loaded
# (bounds that depend on the data, e.g. ways <= classes, are checked by each scheme).
RULES = {"num_clients": _SIZE, "ways": _SIZE, "shots": _SIZE, "stdev": _COUNT,
         "block": Interval(1, None, integer=True, allow_none=True), "test_shots": _COUNT, "seed": SEED,
         "shuffle": BOOL, "ways_stdev": Interval(0, None, integer=True, allow_none=True),
         "split": Options(("merge", "official")), "train_ratio": Interval(0, 1, low_open=True, high_open=True),
         "alpha": Interval(0, None, low_open=True), "min_size": Interval(0, None, integer=True, allow_none=True),
         "classes_per_client": _SIZE, "balance": BOOL, "train_size": _SIZE, "test_size": _SIZE,
         "train_per_class": _SIZE, "test_per_class": _SIZE}
_HIDDEN = ("y_train", "y_test", "num_classes", "domain_train", "domain_test")


def _scheme_fn(scheme):
    return {"nway_kshot": nway_kshot, "fedpcl": fedpcl, "domains": domains}.get(scheme) \
        or functools.partial(label_partition, scheme)


def check_params(params: dict) -> None:
    """The scheme, the keys it takes and every value's type and range (:data:`RULES`), without the data."""
    scheme = params.get("scheme")
    if scheme not in SCHEMES:
        raise ConfigError("partition.scheme", scheme, "one of " + ", ".join(SCHEMES))
    known = [p for p in inspect.signature(_scheme_fn(scheme)).parameters if p not in _HIDDEN]
    for key, value in params.items():
        if key == "scheme":
            continue
        if key not in known:
            raise unknown_key_error(f"partition ({scheme})", key, known)
        if not (key == "num_clients" and scheme == "domains" and value is None):
            check_value(f"partition.{key}", value, RULES[key])


def make_partition(params: dict, y_train, y_test, num_classes: int,
                   domains: tuple[np.ndarray, np.ndarray] | None = None) -> Partition:
    """Dispatch on ``params['scheme']``; the other keys are the scheme's arguments. ``domains``: the
    domain index of every training and test sample, for the ``domains`` scheme."""
    check_params(params)
    params = dict(params)
    scheme = params.pop("scheme")
    y_train = np.asarray(y_train)
    y_test = np.asarray(y_test)
    fn = _scheme_fn(scheme)
    if scheme == "domains":
        if domains is None:
            raise ConfigError("partition.scheme", scheme, "a dataset with domains (digit5, digit5_standin)")
        params["domain_train"], params["domain_test"] = (np.asarray(d) for d in domains)
    return fn(y_train, y_test, num_classes, **params)
