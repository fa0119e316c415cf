"""Experiment configs (YAML): schema, validation, ``key=value`` overrides and run ids.

A config file looks like::

    name: fedproto_fmnist
    dataset: fmnist
    model: cnn_fmnist                 # or {name: fedavg_cnn, feature_dim: 512}
    partition: {scheme: nway_kshot, num_clients: 20, ways: 3, shots: 100, stdev: 2,
                block: 110, test_shots: 15}
    algorithm: {name: fedproto, lam: 1.0}
    train: {rounds: 100, batch_size: 8, lr: 0.01, momentum: 0.5, local_epochs: 1}
    seeds: [1234, 1235, 1236]

A run is (config, one seed). Its id hashes the whole validated config (defaults filled
in) with that seed, except fields that cannot change a number (``name``,
``data_root``, ``results_dir``). :mod:`fedlib.runner` runs it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from fedlib.algorithms import make_algorithm
from fedlib.algorithms.base import TrainSettings
from fedlib.data.sources import LOADERS
from fedlib.models import FAMILIES, MODELS
from fedlib.validation import (BOOL, SEED, ConfigError, Interval, Options, check_fields, check_value, from_dict,
                               unknown_key_error)

# Bump when a change to the code changes the numbers of existing runs.
# 2: every run trains with one torch thread (numbers must not depend on the machine's cores).
CACHE_VERSION = 2
NON_SEMANTIC = ("name", "data_root", "results_dir")
# Where a run ran (device kind and executor) is part of its identity, written only when it is not the
# reference (cpu, sequential), so that the ids of runs made before devices existed stay valid.
REFERENCE_PLACEMENT = {"device": "cpu", "executor": "sequential"}
# Training settings added after runs existed, at the value that changes nothing: left out of run ids.
TRAIN_NEUTRAL = {"lr_decay": 1.0, "shuffle": True}
# Training settings that say how far to take a run, not what it computes: never in a run id. ``extend_to`` trains a
# run past ``rounds`` (its first ``rounds`` rounds are those of the run without it: ``Round.total`` stays
# ``rounds``), so extending a run towards its plateau keeps its id and its first rounds (fedlib.plateau).
TRAIN_EXTENT = ("extend_to",)
EXECUTOR_CHOICES = ("auto", "sequential", "batched")


# Type and range of every field of a config's ``train`` section.
TRAIN_RULES = {
    "rounds": Interval(1, None, integer=True), "participation": Interval(0, 1, low_open=True),
    "local_epochs": Interval(1, None, integer=True), "batch_size": Interval(1, None, integer=True),
    "lr": Interval(0, None, low_open=True), "momentum": Interval(0, 1, high_open=True),
    "weight_decay": Interval(0, None), "drop_last": BOOL,
    "eval_every": Interval(1, None, integer=True), "lr_decay": Interval(0, 1, low_open=True), "shuffle": BOOL,
    "extend_to": Interval(1, None, integer=True, allow_none=True)}


@dataclasses.dataclass(frozen=True)
class TrainConfig(TrainSettings):
    """An experiment's ``train`` section: the local optimisation settings every algorithm sees
    (:class:`TrainSettings`: lr, momentum, weight_decay, batch_size, local_epochs, drop_last and
    lr_decay and shuffle, left out of run ids at their neutral 1 and true) plus what only the engine uses."""

    rounds: int = 100
    participation: float = 1.0
    eval_every: int = 1
    extend_to: int | None = None

    def __post_init__(self):
        check_fields(self, TRAIN_RULES, prefix="train")
        if self.extend_to is not None and self.extend_to < self.rounds:
            raise ConfigError("train.extend_to", self.extend_to,
                              f"null or an integer of at least train.rounds ({self.rounds})")

    def settings(self) -> TrainSettings:
        """The part algorithms see, floats as floats."""
        own = {f.name: getattr(self, f.name) for f in dataclasses.fields(TrainSettings)}
        return TrainSettings(**{k: float(v) if isinstance(TrainSettings.__dataclass_fields__[k].default, float) else v
                                for k, v in own.items()})


TOP_KEYS = ("name", "dataset", "model", "partition", "algorithm", "train", "seeds", "data_root", "results_dir",
            "device", "executor", "defense")
REQUIRED = ("dataset", "model", "partition", "algorithm", "train")


# The most values a YAML document may stand for once its aliases are expanded (every ``*name`` counted as the
# values it repeats). A config is a few hundred values; a "billion laughs" document (anchors of anchors, nine
# levels deep) stands for billions, which building, printing or hashing would expand: it is refused while it is
# composed, before any value is built.
MAX_EXPANDED_NODES = 100_000
MAX_CONFIG_BYTES = 1 << 18   # 262,144 bytes: the largest YAML file of params/ is 13 kB


class AliasBomb(yaml.YAMLError):
    """A document whose aliases expand beyond :data:`MAX_EXPANDED_NODES` values, or refer to themselves."""


class _Loader(yaml.SafeLoader):
    """YAML 1.1 with exponent floats written without a dot (``1e-3``, ``1e9``) read as numbers, and documents that
    expand their aliases beyond :data:`MAX_EXPANDED_NODES` values (or into themselves) refused as they are
    composed (:class:`AliasBomb`)."""

    def compose_document(self):
        self._sizes, self._open, self._aliased = {}, set(), 0
        node = super().compose_document()
        _expanded_size(node, self._sizes)
        return node

    def compose_node(self, parent, index):
        """Each alias adds what it stands for to the document's count as it is read, so that a wide bomb (thousands
        of aliases of large anchors) is refused after its first few hundred aliases, not after it is all read."""
        if not self.check_event(yaml.AliasEvent):
            anchor = getattr(self.peek_event(), "anchor", None)
            if anchor is None:
                return super().compose_node(parent, index)
            self._open.add(anchor)
            try:
                return super().compose_node(parent, index)
            finally:
                self._open.discard(anchor)
        anchor = self.peek_event().anchor
        if anchor in self._open:
            raise AliasBomb("an alias refers to a value that contains it (a recursive document)")
        if anchor in self.anchors:
            self._aliased += _expanded_size(self.anchors[anchor], self._sizes)
            if self._aliased > MAX_EXPANDED_NODES:
                raise AliasBomb(f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values (a config needs a "
                                "few hundred)")
        return super().compose_node(parent, index)


def _expanded_size(root, sizes: dict[int, int] | None = None) -> int:
    """How many values the composed document ``root`` stands for with its aliases expanded (shared nodes counted
    once per use); :class:`AliasBomb` past the limit or for a node that contains itself. Linear in the composed
    nodes (each distinct node's size is computed once; ``sizes`` keeps them across calls on one document)."""
    sizes = {} if sizes is None else sizes
    open_nodes: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [n for pair in node.value for n in pair]
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > MAX_EXPANDED_NODES:
                raise AliasBomb(f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values (a config needs a few "
                                "hundred)")
            sizes[key] = total
            open_nodes.discard(key)
            continue
        if key in sizes:
            continue
        if not isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            sizes[key] = 1
            continue
        if key in open_nodes:
            raise AliasBomb("an alias refers to a value that contains it (a recursive document)")
        open_nodes.add(key)
        stack.append((node, True))
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        for child in children:
            if id(child) in open_nodes:
                raise AliasBomb("an alias refers to a value that contains it (a recursive document)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def safe_yaml(text: str) -> Any:
    """``text`` parsed as the configs are (:func:`load_yaml`'s loader: alias bombs refused), errors raised as
    :class:`yaml.YAMLError`; for YAML files other than run configs (a study's ``experiments.yaml``)."""
    return yaml.load(text, Loader=_Loader)


def read_yaml(path: str | Path, source: str | None = None) -> Any:
    """The YAML file ``path`` parsed as the configs are (:func:`load_yaml`: a syntax error or an alias bomb is one
    :class:`ConfigError` line naming ``source``, default the path): every YAML file fedlib reads (a study's
    ``experiments.yaml``, ``params/profiles.yaml``, a paper's reference numbers) goes through it."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source or str(path), str(path), "a readable UTF-8 YAML file",
                          message=f"{source or path}: cannot be read ({type(exc).__name__}: "
                                  f"{getattr(exc, 'strerror', None) or exc})") from None
    return load_yaml(text, source or str(path))


def load_yaml(text: str, source: str, column_offset: int = 0) -> Any:
    """Parse YAML; a syntax error becomes one :class:`ConfigError` line naming ``source`` and
    ``line:column`` (columns shifted by ``column_offset``, e.g. the ``key=`` of an override), and so does a
    document whose aliases expand beyond what a config can need (:class:`AliasBomb`)."""
    try:
        return yaml.load(text, Loader=_Loader)
    except AliasBomb as exc:
        raise ConfigError(source, "(not shown)", "a document of at most "
                          f"{MAX_EXPANDED_NODES:,} values once its aliases are expanded",
                          message=f"{source}: refused: {exc}") from None
    except RecursionError:   # the parser recurses once per level: [[[[...]]]] thousands deep
        raise ConfigError(source, "(not shown)", "a document nested a few levels deep",
                          message=f"{source}: refused: its values are nested too deeply for a config") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = (f"{source}:{mark.line + 1}:{mark.column + 1 + column_offset}" if mark is not None else source)
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        context = getattr(exc, "context", None)
        raise ConfigError(source, text, "valid YAML", message=f"{where}: YAML error: {problem}"
                          + (f" ({' '.join(str(context).split())})" if context else "")) from None


def _as_spec(value: Any, field: str) -> dict:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, dict):
        return dict(value)
    raise ConfigError(field, value, "a name or a mapping with a 'name' key")


def _mapping(value: Any, field: str, keys) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(field, value, "a mapping of " + ", ".join(keys))
    return dict(value)


def validate(raw: dict, source: str = "config") -> dict:
    """Check every field of a raw config; return it normalised with all defaults filled.

    ``dataset``, ``model``, ``partition`` (with its ``scheme``), ``algorithm`` and ``train``
    are required. Raises :class:`ConfigError` naming the field, the value and what is
    allowed. Checks that need the data (shots vs samples per class, clients vs samples,
    model vs input shape) happen when the run is built, before anything is written.
    """
    raw = _top_level(raw, source)
    cfg: dict[str, Any] = {"name": _name(raw.get("name"))}
    cfg["dataset"] = _dataset(_as_spec(raw["dataset"], "dataset"))

    cfg["model"] = _model(_as_spec(raw["model"], "model"))

    from fedlib.data.partition import check_params

    part = _mapping(raw["partition"], "partition", ("scheme", "num_clients", "..."))
    check_params(part)
    cfg["partition"] = part

    algo_spec = _as_spec(raw["algorithm"], "algorithm")
    algo = make_algorithm(algo_spec)
    cfg["algorithm"] = {"name": algo.name, **algo.hyperparameters()}

    train = from_dict(TrainConfig, _mapping(raw["train"], "train", list(TRAIN_RULES)), owner="train")
    cfg["train"] = dataclasses.asdict(train)

    seeds = raw.get("seeds", [1234])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    cfg["seeds"] = check_seeds(seeds)
    for key in ("data_root", "results_dir"):
        if raw.get(key) is not None and not isinstance(raw[key], (str, os.PathLike)):
            raise ConfigError(key, raw[key], "a folder path (a string)")
    cfg["data_root"] = None if raw.get("data_root") is None else str(raw["data_root"])
    cfg["results_dir"] = str(raw.get("results_dir") or "results")
    _placement(cfg, raw)
    return cfg


def _top_level(raw, source: str) -> dict:
    """``raw`` as a mapping of known top-level keys holding every required one (None: an empty config)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("config", raw, "a mapping of " + ", ".join(TOP_KEYS))
    for key in raw:
        if key not in TOP_KEYS:
            raise unknown_key_error("config", key, list(TOP_KEYS))
    missing = [k for k in REQUIRED if raw.get(k) is None]
    if missing:
        raise ConfigError(missing[0], None, "required", message=(
            f"{source}: missing {', '.join(repr(k) for k in missing)}; a config names dataset, model, partition "
            "(with its scheme), algorithm and train (see params/fedproto_fmnist.yaml)"))
    return raw


def _name(name) -> str:
    """The experiment's name (default ``experiment``): a string of printable characters."""
    name = "experiment" if name is None else name
    if isinstance(name, (list, dict, set, tuple, bytes)):
        raise ConfigError("name", name, "a name (a string)")
    name = str(name)
    if not name.isprintable():   # it is printed on progress bars and in summaries, and may name a file
        raise ConfigError("name", name, "a name of printable characters (no newline, tab or control character)")
    return name


def _dataset(ds: dict) -> dict:
    """The ``dataset`` section checked: a known loader, a fraction in (0, 1], an encoder only for domain data."""
    if set(ds) - {"name", "fraction", "encoder"}:
        raise unknown_key_error("dataset", next(iter(set(ds) - {"name", "fraction", "encoder"})),
                                ["name", "fraction", "encoder"])
    if "fraction" in ds:
        fr = ds["fraction"]
        if isinstance(fr, bool) or not isinstance(fr, (int, float)) or not 0 < fr <= 1:
            raise ConfigError("dataset.fraction", fr, "a number in (0, 1] (a stratified subsample of both splits)")
    if ds.get("name") not in LOADERS:
        raise ConfigError("dataset.name", ds.get("name"), "one of " + ", ".join(sorted(LOADERS)))
    if "encoder" in ds:
        from fedlib.data.domains import ENCODERS
        from fedlib.data.sources import DOMAIN_DATASETS

        if ds["name"] not in DOMAIN_DATASETS:
            raise ConfigError("dataset.encoder", ds["encoder"],
                              f"only with {' or '.join(DOMAIN_DATASETS)} (not {ds['name']})")
        if ds["encoder"] not in ENCODERS:
            raise ConfigError("dataset.encoder", ds["encoder"], "one of " + ", ".join(ENCODERS))
    return ds


def _placement(cfg: dict, raw: dict) -> None:
    """``cfg``'s device and executor (``auto``: batched on CUDA, else sequential) and its ``defense``, if any
    (DP-SGD: the sequential executor, on a method it applies to)."""
    from fedlib.device import resolve

    cfg["device"] = resolve(raw.get("device", "auto"))
    executor = check_value("executor", raw.get("executor", "auto"), Options(EXECUTOR_CHOICES))
    cfg["executor"] = ("batched" if cfg["device"] == "cuda" else "sequential") if executor == "auto" else executor
    if raw.get("defense") is not None:  # clip + noise on every upload or DP-SGD (fedlib.privacy); absent: none
        from fedlib.privacy.defense import check_defense, upload_defense

        cfg["defense"] = check_defense(raw["defense"])
        if not upload_defense(cfg["defense"]):  # DP-SGD: the sequential executor, a method it applies to
            from fedlib.privacy.dpsgd import check_dp_sgd_run

            if executor == "auto":
                cfg["executor"] = "sequential"
            check_dp_sgd_run(cfg)


def check_seeds(seeds: Any, field: str = "seeds") -> list[int]:
    """A non-empty list of distinct seeds, each an integer the random generators accept (:data:`SEED`). A seed
    given twice is refused: its one run would be counted twice, making up a spread (``55.00 +- 0.00``)."""
    if not isinstance(seeds, list) or not seeds or not all(SEED.ok(x) for x in seeds):
        raise ConfigError(field, seeds, f"a non-empty list of integers in [0, {SEED.high}]")
    twice = sorted({x for x in seeds if seeds.count(x) > 1})
    if twice:
        raise ConfigError(field, seeds, "distinct seeds", message=(
            f"{field}: got {seeds!r}; allowed: distinct seeds ({', '.join(map(str, twice))} given more than once: one "
            "run counted twice would make up a spread)"))
    return list(seeds)


# Type and range of the model arguments a config may set (each model takes some of them).
MODEL_RULES = {"feature_dim": Interval(1, None, integer=True)}


def _model(model: dict) -> dict:
    """The model's name, and arguments the model (every member, for a family) takes, each in range."""
    import inspect

    name = model.get("name")
    if name not in MODELS and name not in FAMILIES:
        raise ConfigError("model.name", name, "one of " + ", ".join(sorted(MODELS) + sorted(FAMILIES)))
    members = FAMILIES.get(name) or [name]
    takes = set.intersection(*(set(inspect.signature(MODELS[m]).parameters) for m in members))
    known = sorted(takes - {"input_shape", "num_classes"})
    for key, value in model.items():
        if key == "name":
            continue
        if key not in known:
            raise unknown_key_error(f"model ({name})", key, known or ["(none: this model takes no arguments)"])
        check_value(f"model.{key}", value, MODEL_RULES[key])
    return model


def load_config(path: str | Path, overrides: list[str] | dict | None = None) -> dict:
    """Read a YAML config, apply ``key.sub=value`` overrides, validate."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("config file", str(path), "an existing YAML file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError("config file", str(path), f"a YAML file of at most {MAX_CONFIG_BYTES:,} bytes (a config "
                          f"is a few hundred; this one has {path.stat().st_size:,})")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("config file", str(path), "a readable UTF-8 text file",
                          message=f"{path}: unreadable ({getattr(exc, 'strerror', None) or exc.__class__.__name__})"
                          ) from None
    raw = load_yaml(text, str(path))
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("config", raw, "a mapping of " + ", ".join(TOP_KEYS),
                          message=f"{path}: holds a {type(raw).__name__}, not a mapping of " + ", ".join(TOP_KEYS))
    return validate(apply_overrides(raw, overrides), source=str(path))


def apply_overrides(raw: dict, overrides: list[str] | dict | None) -> dict:
    """``["train.rounds=5", "seeds=[1,2]"]`` or ``{"train.rounds": 5}`` applied to a copy of ``raw``."""
    raw = copy.deepcopy(raw)
    if not overrides:
        return raw
    items = overrides.items() if isinstance(overrides, dict) else []
    if not isinstance(overrides, dict):
        parsed = []
        for item in overrides:
            if "=" not in item:
                raise ConfigError("override", item, "key=value, e.g. train.rounds=5 or algorithm.lam=0.5")
            k, v = item.split("=", 1)
            parsed.append((k.strip(), load_yaml(v, f"override {item!r}", column_offset=len(k) + 1)))
        items = parsed
    for key, value in items:
        parts = key.split(".")
        node = raw
        for i, p in enumerate(parts[:-1]):
            if isinstance(node.get(p), str) and i == 0:  # "model: cnn_fmnist" shorthand
                node[p] = {"name": node[p]}
            child = node.setdefault(p, {})
            if not isinstance(child, dict):
                path = ".".join(parts[:i + 1])
                raise ConfigError(path, child, "a mapping", message=(
                    f"override {key}={value!r}: {path} is a single value ({child!r}) and has no sub-keys"))
            node = child
        node[parts[-1]] = value
    return raw


def run_id(cfg: dict, seed: int) -> str:
    """Hash of the validated config with one seed (paths and the display name excluded).

    A hyperparameter added to an algorithm later, at the value that leaves the method
    unchanged (its ``NEUTRAL`` value, e.g. FedProto's ``gamma: 1``), is left out, so runs
    made before it existed stay cache hits.
    """
    from fedlib.algorithms import ALGORITHMS

    body = {k: v for k, v in cfg.items() if k not in NON_SEMANTIC and k != "seeds"}
    for key, reference in REFERENCE_PLACEMENT.items():
        if body.get(key, reference) == reference:
            body.pop(key, None)
    if "train" in body:
        body["train"] = {k: v for k, v in body["train"].items()
                         if not (k in TRAIN_NEUTRAL and v == TRAIN_NEUTRAL[k]) and k not in TRAIN_EXTENT}
    algo = dict(body["algorithm"])
    for field, neutral in getattr(ALGORITHMS.get(algo["name"]), "NEUTRAL", {}).items():
        if field in algo and algo[field] == neutral:
            del algo[field]
    body["algorithm"] = algo
    body.update(seed=seed, cache_version=CACHE_VERSION)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]



def target_rounds(cfg: dict) -> int:
    """How many rounds a run of ``cfg`` trains: ``train.extend_to`` where set, else ``train.rounds``."""
    return cfg["train"].get("extend_to") or cfg["train"]["rounds"]


def run_dir(cfg: dict, seed: int) -> Path:
    """``<results_dir>/<run id>``: the folder of one run."""
    return Path(cfg["results_dir"]) / run_id(cfg, seed)
