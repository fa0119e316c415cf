"""Algorithm registry: one module per method, registered by name.

Adding a method touches its module, one import line below, a ``params/`` YAML and a
test; never the engine (see docs/adding_a_method.md).
"""

from __future__ import annotations

from fedlib.algorithms.base import Algorithm, ClientData, Context, Message, Round, TrainSettings
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
    """Build an algorithm from ``{"name": ..., **hyperparameters}``, validating every field."""
    spec = dict(spec)
    name = spec.pop("name", None)
    if name not in ALGORITHMS:
        raise ConfigError("algorithm.name", name, "one of " + ", ".join(sorted(ALGORITHMS)))
    return from_dict(ALGORITHMS[name], spec, owner=f"algorithm ({name})")


# Registration happens on import; keep this list sorted.
from fedlib.algorithms import (  # noqa: E402,F401
    cflgp, fedavg, fedcam, fedccfa, feddistill, fedfa, fedgkd, fedic, fedkd, fedmps, fednh, fedntd, fedpa, fedpac,
    fedper, fedproc, fedproto, fedprox, fedrep, fedtgp, feduv, fesem, fml, gfpl, ifca, lgfedavg, local, moon, mpfedcl,
    protonorm)

__all__ = ["ALGORITHMS", "Algorithm", "ClientData", "Context", "Message", "Round", "TrainSettings",
           "make_algorithm", "register"]
