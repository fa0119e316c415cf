"""fedlib's messages as plain text in a notebook: the ``fedlib`` logger at INFO on standard output.

Without a handler Python prints only warnings, on standard error, which JupyterLab shows in red like an error;
notes such as which MNIST source a run uses are information. :func:`to_stdout` sends every ``fedlib`` message
from INFO up, and Python warnings, to standard output as ``name: message`` lines. The worker processes of
:func:`fedlib.runner.run_many` do the same (they inherit ``FEDLIB_LOG``), so their messages reach the notebook
as plain text too.
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "FEDLIB_LOG"


class _Stdout(logging.StreamHandler):
    """A handler on whatever ``sys.stdout`` is when a record is emitted (a kernel replaces it per cell)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, _value):
        pass


def to_stdout(level: int = logging.INFO) -> None:
    """Show ``fedlib`` messages from ``level`` up, and Python warnings, as plain lines on standard output.
    Calling it again changes nothing; child processes started afterwards do the same (:func:`from_env`)."""
    for name in ("fedlib", "py.warnings"):
        logger = logging.getLogger(name)
        if not any(isinstance(h, _Stdout) for h in logger.handlers):
            logger.addHandler(_Stdout())
        logger.setLevel(level)
    logging.captureWarnings(True)
    os.environ[ENV] = logging.getLevelName(level)


def from_env() -> None:
    """In a worker process: :func:`to_stdout` at the level the parent chose, if it chose one."""
    level = os.environ.get(ENV)
    if level:
        to_stdout(logging.getLevelName(level))
