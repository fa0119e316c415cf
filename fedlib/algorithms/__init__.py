"""Algorithm registry: one module per method, registered by name.

Every module of this package is imported here, in name order, so a method's module registers itself
(``@register``) by being in ``fedlib/algorithms/``: adding a method touches its module and a test (and one line
of ``params/benchmark/experiments.yaml`` to enter the benchmark); never this file or the engine (see
docs/adding_a_method.md).
"""

from __future__ import annotations

import importlib
import pkgutil

from fedlib.algorithms.base import Algorithm, ClientData, Context, Message, Round, TrainSettings
from fedlib.algorithms.make import make_algorithm
from fedlib.algorithms.registry import ALGORITHMS, register


def import_methods() -> None:
    """Import every module of the package (the folders of its ``__path__``), sorted by name: the method modules
    register themselves (``@register``); the others (base, checks, loader, ...) register nothing."""
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        importlib.import_module(f"{__name__}.{module}")


# Registration happens on import.
import_methods()

__all__ = ["ALGORITHMS", "Algorithm", "ClientData", "Context", "Message", "Round", "TrainSettings",
           "import_methods", "make_algorithm", "register"]
