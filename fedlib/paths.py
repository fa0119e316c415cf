"""Where things are: the checkout and its folders, the output root, and the commit of the code.

Everything else imports its roots from here, so that no module has to import the report (or the
study layer) to find a folder.
"""

from __future__ import annotations

import os
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
PARAMS = CHECKOUT / "params"
ARCHIVE = CHECKOUT / "archive"


def output_root() -> Path:
    """The folder holding ``figures/``, ``results/`` and REPORT.md.

    ``$FEDLIB_ROOT`` when set (the runner sets it for the notebooks it executes), else the
    checkout, so a notebook opened in JupyterLab (whose working directory is ``notebooks/``)
    writes to the same place as a headless run.
    """
    return Path(os.environ.get("FEDLIB_ROOT") or CHECKOUT)


def results_dir() -> Path:
    """``<output root>/results``: pass it as an experiment's ``results_dir`` so that the run cache is
    the same whether the notebook runs under the runner, nbval or JupyterLab (working directory
    ``notebooks/``)."""
    return output_root() / "results"


# What the runs themselves write: a change there does not mark the code that made a run as changed.
RUN_OUTPUTS = ("REPORT.md", "figures", "results", "archive")


def git_commit() -> str:
    """The checkout's short commit, marked when tracked files other than the runs' own outputs (``RUN_OUTPUTS``;
    archive/ included, which the evidence planner writes while it runs) changed."""
    import subprocess

    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=CHECKOUT, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                *(f":(exclude){p}" for p in RUN_OUTPUTS)], cwd=CHECKOUT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
