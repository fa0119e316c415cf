"""The one schema of every study's ``params/<study>/experiments.yaml``.

A study file holds run-config fragments and the profiles that size them::

    base:              the run config every entry starts from (dataset, model, partition, train)
    partitions:        {name: {label, scheme, ...}}        settings a table sweeps (a partition each)
    datasets:          {name: {label, changes, ...}}       per-dataset values; ``changes`` are dotted overrides
    methods:           {name: {label, algorithm: {name, ...}, train, model, rounds}}
    variants:          {name: {label, of, algorithm}}      a method with changed hyperparameters (``of``)
    prototype_methods: [method, ...]                       scored by the nearest prototype, not the head
    attack:            {...}                               the privacy attack's settings
    profiles:          {profile: {seeds, rounds, overrides, method_changes, <the study's sweeps>}}

plus the sections a study declares for itself (``Plan.sections``, e.g. FedMPS's ``ablation``). Values that
depend on the setting are written in the file, not in code, as references: ``"{dataset.K}"`` (the dataset's
entry), ``"{profile.fedccfa_align_start}"`` (the profile's settings) or ``"{train.rounds}"`` (the run's train
block), resolved when a run config is made (:func:`resolve`). A profile's ``method_changes`` are dotted
overrides for one method only (``{fedproc: {algorithm.ramp_rounds: "{train.rounds}"}}``).

:func:`check` validates a whole file and fails on the first bad value with one line naming the field, the
value and what is allowed, as the run configs do.
"""

from __future__ import annotations

import re
from typing import Any

from fedlib.validation import POSITIVE_INT, ConfigError, check_value

COMMON = ("base", "partitions", "datasets", "methods", "variants", "prototype_methods", "attack", "profiles")
BASE_KEYS = ("dataset", "model", "partition", "train", "algorithm")
METHOD_KEYS = ("label", "algorithm", "train", "model", "rounds", "of")
REFERENCE = re.compile(r"^\{(dataset|profile|train)\.([A-Za-z_][A-Za-z0-9_.]*)\}$")


def check_seeds(seeds, field: str = "seeds") -> list[int]:
    """A notebook's ``seeds`` parameter: a non-empty list of integers in [0, 2**32 - 1]."""
    from fedlib.config import check_seeds as check

    return check(seeds, field)


def check_rounds(rounds, field: str = "rounds") -> int:
    """A notebook's ``rounds`` parameter: a positive integer."""
    return check_value(field, rounds, POSITIVE_INT)


def check_plan_settings(settings, where: str) -> None:
    """A profile's settings in ``experiments.yaml``: its seeds, and every round count (a key naming
    rounds, or the values of a mapping under one) a positive integer; ``where`` names the profile."""
    if "seeds" in settings:
        check_seeds(settings["seeds"], f"{where}.seeds")
    for key, value in settings.items():
        name = f"{where}.{key}"
        if key == "method_changes":   # dotted run-config changes, checked with the configs they change
            continue
        if isinstance(value, dict) and "rounds" in str(key):
            for sub, rounds in value.items():
                check_rounds(rounds, f"{name}.{sub}")
        elif isinstance(value, dict):
            check_plan_settings(value, name)
        elif "rounds" in str(key):
            check_rounds(value, name)


def _mapping(value: Any, field: str, what: str = "a mapping") -> dict:
    if not isinstance(value, dict):
        raise ConfigError(field, value, what)
    return value


def _keys(value: dict, field: str, allowed) -> None:
    for key in value:
        if key not in allowed:
            raise ConfigError(f"{field}.{key}", value[key], "a known key: " + ", ".join(allowed))


def check_base(base: Any, field: str) -> None:
    """A run-config fragment: a mapping of config sections, ``train`` a mapping."""
    _keys(_mapping(base, field), field, BASE_KEYS)
    if "train" in base:
        _mapping(base["train"], f"{field}.train")


def check_methods(entries: Any, field: str, methods: dict | None = None) -> None:
    """A table of methods (or, given ``methods``, of variants whose ``of`` names one of them)."""
    from fedlib.algorithms import ALGORITHMS

    for name, entry in _mapping(entries, field).items():
        where = f"{field}.{name}"
        _keys(_mapping(entry, where), where, METHOD_KEYS)
        if not isinstance(entry.get("label", ""), str):
            raise ConfigError(f"{where}.label", entry["label"], "a string")
        if "of" in entry and (methods is None or entry["of"] not in methods):
            raise ConfigError(f"{where}.of", entry["of"], "one of the methods: " + ", ".join(methods or ()))
        algo = _mapping(entry.get("algorithm"), f"{where}.algorithm", "a mapping with the algorithm's name")
        if "of" not in entry and algo.get("name") not in ALGORITHMS:
            raise ConfigError(f"{where}.algorithm.name", algo.get("name"),
                              "a registered algorithm: " + ", ".join(sorted(ALGORITHMS)))
        if "train" in entry:
            _mapping(entry["train"], f"{where}.train")
        rounds = entry.get("rounds", 1)
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ConfigError(f"{where}.rounds", rounds, "a positive integer")


def check_entries(entries: Any, field: str, required: tuple[str, ...] = ()) -> None:
    """A table of named settings (partitions, datasets): each a mapping, with a string ``label`` where
    given, the ``required`` keys and ``changes`` a mapping of dotted overrides."""
    for name, entry in _mapping(entries, field).items():
        where = f"{field}.{name}"
        _mapping(entry, where)
        for key in required:
            if key not in entry:
                raise ConfigError(f"{where}.{key}", None, f"a value (every {field} entry names its {key})")
        if not isinstance(entry.get("label", ""), str):
            raise ConfigError(f"{where}.label", entry["label"], "a string")
        _mapping(entry.get("changes", {}), f"{where}.changes", "a mapping of dotted keys to values")


def check_profiles(profiles: Any, field: str, methods: list[str]) -> None:
    """Every profile: seeds, round counts (:func:`fedlib.study.check_plan_settings`), ``overrides`` a mapping
    of dotted keys, ``method_changes`` a mapping of known methods to such mappings."""
    for name, settings in _mapping(profiles, field).items():
        where = f"{field}.{name}"
        _mapping(settings, where)
        if "seeds" not in settings:
            raise ConfigError(f"{where}.seeds", None, "a non-empty list of integers in [0, 4294967295]")
        check_plan_settings(settings, where)
        for key in ("overrides", "fs_overrides"):
            _mapping(settings.get(key, {}), f"{where}.{key}", "a mapping of dotted keys to values")
        for method, changes in _mapping(settings.get("method_changes", {}), f"{where}.method_changes").items():
            if method not in methods:
                raise ConfigError(f"{where}.method_changes.{method}", changes, "a method: " + ", ".join(methods))
            _mapping(changes, f"{where}.method_changes.{method}", "a mapping of dotted keys to values")


def references(value: Any):
    """Every ``(root, path)`` reference string inside ``value``."""
    if isinstance(value, dict):
        for v in value.values():
            yield from references(v)
    elif isinstance(value, list):
        for v in value:
            yield from references(v)
    elif isinstance(value, str) and (m := REFERENCE.match(value)):
        yield m.group(1), m.group(2)


def _lookup(table: dict, path: str) -> tuple[bool, Any]:
    value = table
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def check_references(spec: dict, field: str, sections: tuple[str, ...]) -> None:
    """Every ``{dataset.X}`` reference resolvable in every dataset entry, every ``{profile.X}`` in every
    profile (``{train.X}`` is the run's own train block, checked when a config is made)."""
    for section in sections:
        for root, path in references(spec.get(section, {})):
            table = {"dataset": spec.get("datasets", {}), "profile": spec["profiles"]}.get(root)
            for name, entry in (table or {}).items():
                if not _lookup(entry, path)[0]:
                    plural = "datasets" if root == "dataset" else "profiles"
                    raise ConfigError(f"{field}: {section} refers to {{{root}.{path}}}", name,
                                      f"{plural} that all define {path}")


def resolve(value: Any, context: dict, field: str = "reference") -> Any:
    """``value`` with every reference string replaced by what it names in ``context``
    (``{"dataset": ..., "profile": ..., "train": ...}``)."""
    if isinstance(value, dict):
        return {k: resolve(v, context, f"{field}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, context, field) for v in value]
    if isinstance(value, str) and (m := REFERENCE.match(value)):
        found, got = _lookup(context.get(m.group(1)) or {}, m.group(2))
        if not found:
            raise ConfigError(field, value, f"a reference to a value this {m.group(1)} defines")
        return got
    return value


def check(spec: Any, field: str, sections: dict | None = None) -> dict:
    """Validate a whole study file (``field`` names it in errors); ``sections`` are the study's own
    top-level sections, each name mapped to its check (``check(value, field)``) or None. Returns ``spec``."""
    sections = sections or {}
    top = {key: f"{field}: {key}" for key in COMMON + tuple(sections)}
    _mapping(spec, field)
    for key in spec:
        if key not in top:
            raise ConfigError(f"{field}: {key}", "(a section)", "a known section: " + ", ".join(top))
    for key in ("methods", "profiles"):
        if key not in spec:
            raise ConfigError(top[key], None, "a section every study file has")
    if "base" in spec:
        check_base(spec["base"], top["base"])
    check_methods(spec["methods"], top["methods"])
    check_methods(spec.get("variants", {}), top["variants"], spec["methods"])
    check_entries(spec.get("partitions", {}), top["partitions"], ("scheme",))
    check_entries(spec.get("datasets", {}), top["datasets"])
    scored = list(spec["methods"]) + list(spec.get("variants", {}))
    for method in spec.get("prototype_methods", []):
        if method not in scored:
            raise ConfigError(top["prototype_methods"], method, "methods of the file: " + ", ".join(scored))
    _mapping(spec.get("attack", {}), top["attack"])
    check_profiles(spec["profiles"], top["profiles"], list(spec["methods"]))
    for name, check_section in sections.items():
        if check_section is not None and name in spec:
            check_section(spec[name], top[name])
    check_references(spec, field, ("methods", "variants", "partitions") + tuple(sections))
    return spec
