"""The algorithm registry: name -> class, filled by each method module's ``@register``. A method from a file or an
installed entry point (``user:<stem>``, :mod:`fedlib.algorithms.loader`) is kept apart from it;
:func:`fedlib.algorithms.make.make_algorithm` builds both."""

from __future__ import annotations

from fedlib.algorithms.base import Algorithm

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
