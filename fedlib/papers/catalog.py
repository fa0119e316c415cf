"""The suite's studies: the one list of them (:data:`NAMES`), the interface each declares (:class:`Study`), and the
runs each keeps in the run archive (``python -m fedlib archive``: :mod:`fedlib.archive_cli`).

A study is a module ``fedlib/papers/<name>.py`` (its tables and figures) beside its plan
(``params/<name>/experiments.yaml`` and ``fedlib/plans/<name>.py``), its claims (``params/<name>/claims.yaml``), its
numbers and ledger (``fedlib/ledgers/<name>.py``) and its notebook (``notebooks/<name>.py``). The report's render
(:mod:`fedlib.render`), the evidence planner and the archive command reach a study only through :func:`load`, which
checks that it declares every member of :class:`Study`. ``archived_tables()`` names the long profiles' tables its
report reads, as ``(name, configs, seeds)``: their runs take hours on a CPU and ``results/`` is not committed, so the
run archive (``archive/``, ``python -m fedlib archive``) keeps their records in the repository and
:mod:`fedlib.results` reads them on a fresh clone. This module sits above every study (in the commands layer), so no
study imports it; where one study uses another's figure the import is listed in docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, runtime_checkable

#: every study, in the report's order (REPORT.md's sections; ``python -m fedlib report``)
NAMES = ("benchmark", "fedic", "fedmps", "gfpl", "mpfedcl", "privacy", "protonorm")
#: the order of the archive command's lines (the papers by date of study, then the leakage study and the benchmark)
ARCHIVE_ORDER = ("fedmps", "gfpl", "protonorm", "mpfedcl", "fedic", "privacy", "benchmark")


@runtime_checkable
class Study(Protocol):
    """What a study module declares (module-level functions; ``self`` is the module)."""

    def load_plan(self, profile: str = "quick", **options) -> Any:
        """The plan of ``profile`` (a :class:`fedlib.study.Plan`): its configs' settings, seeds and rounds."""

    def all_jobs(self, plan) -> list[tuple[dict, int]]:
        """Every ``(config, seed)`` the notebook runs under ``plan``."""

    def archived_tables(self) -> list[tuple[str, dict, list[int]]]:
        """The long profiles' tables the report reads: ``(name, {key: config}, seeds)``."""

    def tables(self, plan, res: dict) -> dict:
        """The ledger's named cells (:class:`fedlib.claims.Cells`) from the notebook's results ``res``."""

    def ledger(self, plan, res: dict) -> list:
        """The claims of ``params/<name>/claims.yaml`` judged on :meth:`tables` (:func:`fedlib.claims.ledger`)."""

    def notebook(self, profile: str, **options) -> Any:
        """The notebook's set-up cell: the state (:class:`fedlib.study.notebook.Notebook`) its other cells take."""

    def main(self, argv: list[str] | None = None) -> int:
        """The headless command ``python -m fedlib.papers.<name>``: an exit status."""


#: the members :func:`load` checks
MEMBERS = tuple(name for name in vars(Study) if not name.startswith("_") and callable(vars(Study)[name]))


def load(name: str) -> Study:
    """The study module ``fedlib.papers.<name>``; a name not in :data:`NAMES`, or a module lacking a member of
    :class:`Study`, is a one-line error."""
    if name not in NAMES:
        raise KeyError(f"no study {name!r}: the studies are {', '.join(NAMES)} (fedlib.papers.catalog.NAMES)")
    module = importlib.import_module(f"fedlib.papers.{name}")
    missing = [m for m in MEMBERS if not callable(getattr(module, m, None))]
    if missing:
        raise TypeError(f"fedlib.papers.{name} is not a study: it lacks {', '.join(missing)} "
                        "(fedlib.papers.catalog.Study)")
    return module


def studies(order: tuple[str, ...] = NAMES) -> list[Study]:
    """Every study module, checked (:func:`load`), in ``order``."""
    return [load(name) for name in order]


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """Every study's archived tables, in :data:`ARCHIVE_ORDER`."""
    out = []
    for study in studies(ARCHIVE_ORDER):
        out += study.archived_tables()
    return out
