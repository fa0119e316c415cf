"""fedlib's messages in a notebook: plain lines on standard output (fedlib.logs)."""

import logging
import os
import subprocess
import sys
import warnings

from fedlib import logs


def test_messages_and_warnings_go_to_stdout_as_plain_lines(capsys, monkeypatch):
    monkeypatch.delenv(logs.ENV, raising=False)
    logging.captureWarnings(False)   # an earlier test's to_stdout() in this process may have left it on
    logger = logging.getLogger("fedlib")
    before = list(logger.handlers), logger.level
    try:
        logs.to_stdout()
        logs.to_stdout()  # a second call adds no second handler
        logging.getLogger("fedlib.data.sources").info("MNIST source: a sample")
        logging.getLogger("fedlib.x").debug("not shown")
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("careful", UserWarning, stacklevel=1)
        out, err = capsys.readouterr()
        assert out.splitlines()[0] == "fedlib.data.sources: MNIST source: a sample"
        assert "not shown" not in out and "UserWarning: careful" in out
        assert err == ""
        assert os.environ[logs.ENV] == "INFO"
    finally:
        logging.captureWarnings(False)
        for name in ("fedlib", "py.warnings"):
            lg = logging.getLogger(name)
            lg.handlers = [h for h in lg.handlers if not isinstance(h, logs._Stdout)]
        logger.handlers = before[0]
        logger.setLevel(before[1])


def test_a_worker_logs_as_its_parent_chose():
    code = ("from fedlib import logs; import logging; logs.from_env(); "
            "logging.getLogger('fedlib.runner').info('worker note')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, logs.ENV: "INFO"})
    assert (run.stdout, run.stderr) == ("fedlib.runner: worker note\n", "")
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={k: v for k, v in os.environ.items() if k != logs.ENV})
    assert (quiet.stdout, quiet.stderr) == ("", "")
