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


def bars_shown() -> bool:
    """Whether this process draws a progress bar now (a tqdm bar that is not disabled)."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return False
    try:
        return any(not getattr(bar, "disable", True) for bar in list(getattr(std.tqdm, "_instances", ())))
    except (TypeError, RuntimeError):   # the set changed while it was read: say yes, a new line costs nothing
        return True


class BarSafeHandler(logging.StreamHandler):
    """A command line's handler (``LEVEL name: message`` on standard error) whose lines start on a line of their
    own: while this process draws a progress bar, through ``tqdm.write`` (the bar is cleared, the line printed and
    the bar drawn again below it), else as a plain stream handler."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass

    def emit(self, record: logging.LogRecord) -> None:
        if not bars_shown():
            super().emit(record)
            return
        try:
            from tqdm import tqdm

            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # noqa: BLE001 - logging's own contract: a failing handler reports, never raises
            self.handleError(record)
