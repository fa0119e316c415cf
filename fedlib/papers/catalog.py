"""The suite's studies and the runs each keeps in the run archive (``python -m fedlib archive``:
:mod:`fedlib.archive_cli`).

Each study module declares ``archived_tables()``: the long profiles' tables its report reads, as
``(name, configs, seeds)``. Their runs take hours on a CPU and ``results/`` is not committed, so the
archive (:mod:`fedlib.archive`, plain storage) keeps their records in the repository and
:mod:`fedlib.results` reads them on a fresh clone. This module sits above every study (only the
archive command, :mod:`fedlib.archive_cli`, imports it), so no study imports the catalog; where one study
uses another's figure the import is listed in docs/architecture.md.
"""

from __future__ import annotations

from fedlib.papers import benchmark, fedic, fedmps, gfpl, mpfedcl, privacy, protonorm

STUDIES = (fedmps, gfpl, protonorm, mpfedcl, fedic, privacy, benchmark)


def archived_tables() -> list[tuple[str, dict, list[int]]]:
    """Every study's archived tables, in :data:`STUDIES` order."""
    out = []
    for study in STUDIES:
        out += study.archived_tables()
    return out
