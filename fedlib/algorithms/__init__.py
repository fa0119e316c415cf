"""Algorithm registry: one module per method, registered by name.

Adding a method touches its module, one import line below, a ``params/`` YAML and a
test; never the engine (see docs/adding_a_method.md).
"""

from __future__ import annotations

from fedlib.algorithms.base import Algorithm, ClientData, Context, Message, Round, TrainSettings
from fedlib.algorithms.make import make_algorithm
from fedlib.algorithms.registry import ALGORITHMS, register

# Registration happens on import; keep this list sorted.
from fedlib.algorithms import (  # noqa: E402,F401
    cflgp, fedavg, fedcam, fedccfa, feddistill, fedfa, fedgkd, fedic, fedkd, fedmps, fednh, fedntd, fedpa, fedpac,
    fedper, fedproc, fedproto, fedprox, fedrep, fedtgp, feduv, fesem, fml, gfpl, ifca, lgfedavg, local, moon, mpfedcl,
    protonorm)

__all__ = ["ALGORITHMS", "Algorithm", "ClientData", "Context", "Message", "Round", "TrainSettings",
           "make_algorithm", "register"]
