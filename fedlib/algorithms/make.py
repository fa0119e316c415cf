"""Building an algorithm from its config section: a registered method by name
(:data:`fedlib.algorithms.registry.ALGORITHMS`), or a method from a file or an installed entry point
(``user:<stem>``, imported from the ``source`` its spec carries, in any process: :mod:`fedlib.algorithms.loader`).
Apart from the registry so that the registry imports nothing of the loader."""

from __future__ import annotations

from fedlib.algorithms.base import Algorithm
from fedlib.algorithms.registry import ALGORITHMS
from fedlib.validation import ConfigError, from_dict


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
