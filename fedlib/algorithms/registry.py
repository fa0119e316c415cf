"""The algorithm registry: name -> class, filled by each method module's ``@register``; a user method
(``user:<stem>``, a method file or an installed entry point: :mod:`fedlib.algorithms.loader`) is built from the
``source`` its spec carries, in any process."""

from __future__ import annotations

from fedlib.algorithms.base import Algorithm
from fedlib.validation import ConfigError, from_dict

ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator adding ``cls`` to :data:`ALGORITHMS` under ``cls.name``; a missing or
    already registered name is an error (two methods must never share a run id's name)."""
    name = cls.__dict__.get("name")
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__name__} has no 'name' of its own; set name = '<method>' to register it")
    if name in ALGORITHMS and ALGORITHMS[name] is not cls:
        raise TypeError(f"algorithm name {name!r} of {cls.__name__} is already registered by "
                        f"{ALGORITHMS[name].__module__}.{ALGORITHMS[name].__name__}")
    ALGORITHMS[name] = cls
    return cls


def make_algorithm(spec: dict) -> Algorithm:
    """Build an algorithm from ``{"name": ..., **hyperparameters}``, validating every field. A user method
    (``{"name": "user:<stem>", "source": <file or entry point>, "source_sha256": ..., ...}``) is imported from its
    source first (:func:`fedlib.algorithms.loader.class_for`: a file whose bytes changed is refused)."""
    spec = dict(spec)
    name = spec.pop("name", None)
    if isinstance(name, str) and name.startswith("user:"):
        from fedlib.algorithms.loader import class_for

        cls, spec = class_for(name, spec)
        return from_dict(cls, spec, owner=f"algorithm ({name})")
    if name not in ALGORITHMS:
        raise ConfigError("algorithm.name", name, "one of " + ", ".join(sorted(ALGORITHMS))
                          + " (or user:<stem> with algorithm.source, a method file: docs/your_method.md)")
    return from_dict(ALGORITHMS[name], spec, owner=f"algorithm ({name})")
