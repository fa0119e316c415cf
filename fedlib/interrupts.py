"""Stopping on request: Ctrl-C (SIGINT) and SIGTERM end the work in progress within seconds, keep
what has finished and leave what has started resumable.

A command line calls :func:`stop_on_signals`: both signals then raise ``KeyboardInterrupt`` in its
main thread and set :data:`STOP`, which the round loop checks after every round (a
``KeyboardInterrupt`` raised inside a finaliser is printed and dropped by Python; the event is not).
:func:`fedlib.runner.run_many` answers the interrupt by cancelling its queued runs and stopping its
workers. This module imports no torch, so ``python -m fedlib reproduce`` starts fast.
"""

from __future__ import annotations

import signal
import threading

STOP = threading.Event()


def stop_on_signals() -> None:
    """SIGINT and SIGTERM stop this process's work as Ctrl-C does (call from the main thread)."""

    def stop(signum, frame):
        STOP.set()
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
