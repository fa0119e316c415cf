"""Where a grid of runs trains: ``local`` (the process pool of :func:`fedlib.runner.run_many`, the default)
or ``ray`` (one Ray task per run on a cluster or a multi-GPU box, :mod:`fedlib.ray_backend`).

The choice travels in environment variables, so that one setting reaches a study command, the notebooks
that ``python -m fedlib reproduce`` starts through papermill (their kernels inherit the environment) and a
notebook's own ``backend`` parameter alike. The command-line options write them (:func:`apply`):

=====================  ============================  =========================================
option                 variable                      meaning
=====================  ============================  =========================================
``--backend``          ``FEDLIB_BACKEND``            ``local`` (default) or ``ray``
``--address``          ``FEDLIB_RAY_ADDRESS``        a running cluster (``auto``, ``HOST:6379``);
                                                     unset: a Ray instance on this machine
``--gpus-per-run``     ``FEDLIB_GPUS_PER_RUN``       GPU share of one run (0 < g <= 1 or whole);
                                                     unset: measured peak memory, else 1/4
``--cpus-per-run``     ``FEDLIB_CPUS_PER_RUN``       CPU cores of one run (default 1)
``--ray-results``      ``FEDLIB_RAY_RESULTS``        ``auto`` (default), ``shared`` or ``returned``
=====================  ============================  =========================================

Nothing here imports Ray: a laptop without it never needs it.
"""

from __future__ import annotations

import argparse
import os

from fedlib.validation import ConfigError

BACKENDS = ("local", "ray")
RESULT_MODES = ("auto", "shared", "returned")
ENV = {"backend": "FEDLIB_BACKEND", "address": "FEDLIB_RAY_ADDRESS", "gpus_per_run": "FEDLIB_GPUS_PER_RUN",
       "cpus_per_run": "FEDLIB_CPUS_PER_RUN", "ray_results": "FEDLIB_RAY_RESULTS"}
RAY_PIN = "ray==2.55.1"


def add_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The backend options of a command (a study command, ``python -m fedlib reproduce``)."""
    g = parser.add_argument_group("where runs train")
    g.add_argument("--backend", help="local (default: a process pool here) or ray (one Ray task per run)")
    g.add_argument("--address", help="Ray cluster to join: auto (the one `ray start` made here) or HOST:6379 "
                                     "(default: start Ray on this machine)")
    g.add_argument("--gpus-per-run", type=float, help="GPU share of one run with --backend ray, e.g. 0.25 "
                                                      "(default: from the measured peak GPU memory, else 0.25)")
    g.add_argument("--cpus-per-run", type=float, help="CPU cores of one run with --backend ray (default 1)")
    g.add_argument("--ray-results", help="auto (default), shared (every node writes the results folder) or "
                                         "returned (each task sends its run's files back to this process)")
    return parser


def apply(args: argparse.Namespace) -> None:
    """Check the parsed backend options and write them to the environment (:data:`ENV`).

    Raises :class:`~fedlib.validation.ConfigError` with a one-line message for a bad value, and for
    ``--backend ray`` where Ray is not installed.
    """
    given = {key: getattr(args, key, None) for key in ENV}
    if given["backend"] is not None and given["backend"] not in BACKENDS:
        raise ConfigError("--backend", given["backend"], " or ".join(BACKENDS))
    if given["ray_results"] is not None and given["ray_results"] not in RESULT_MODES:
        raise ConfigError("--ray-results", given["ray_results"], ", ".join(RESULT_MODES))
    for key in ("gpus_per_run", "cpus_per_run"):
        value = given[key]
        if value is not None:
            check_share(f"--{key.replace('_', '-')}", value, gpu=key == "gpus_per_run")
    for key, value in given.items():
        if value is not None:
            os.environ[ENV[key]] = str(value)
    if resolve() == "ray":
        require_ray()
        return
    for key, value in given.items():
        if value is not None and key != "backend":
            raise ConfigError(f"--{key.replace('_', '-')}", value, "a value only with --backend ray")


def check_share(field: str, value: float, gpu: bool) -> float:
    """A per-run resource: positive; a GPU share above one must be a whole number of GPUs (Ray's rule)."""
    if not value > 0 or (gpu and value > 1 and value != int(value)):
        raise ConfigError(field, value, "a positive number" + (": a fraction up to 1 or whole GPUs" if gpu else ""))
    return float(value)


def resolve(backend: str | None = None) -> str:
    """``backend``, else ``$FEDLIB_BACKEND``, else ``local``; checked."""
    chosen = backend or os.environ.get(ENV["backend"]) or "local"
    if chosen not in BACKENDS:
        raise ConfigError("backend" if backend else ENV["backend"], chosen, " or ".join(BACKENDS))
    return chosen


def setting(key: str) -> str | None:
    """The environment's value of one option of :data:`ENV` (``None`` when unset or empty)."""
    return os.environ.get(ENV[key]) or None


def use(backend: str | None = None, **options) -> str:
    """A notebook's ``backend`` parameter (and the other options of :func:`add_options` by name, e.g.
    ``address="auto"``): ``None`` keeps the environment's choice; returns the backend in force."""
    apply(argparse.Namespace(backend=backend, **options))
    return resolve()


def require_ray():
    """The ``ray`` module, or a one-line :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--backend", "ray", "local", f"--backend ray: Ray is not installed; `pip install -r "
                          f"requirements-ray.txt` ({RAY_PIN}) or use --backend local") from None
    return ray
