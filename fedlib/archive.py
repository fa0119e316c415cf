"""The run archive: the records of the long runs a committed REPORT.md quotes, kept in the
repository so that a fresh clone renders the same report.

A paper-profile table takes hours on a CPU (FedMPS Table III: 24 runs of 100 rounds), so a
short profile's report shows it from finished runs only and trains nothing
(:func:`fedlib.results.cached`). Those runs live in ``results/``, which is not committed. The
archive ``archive/<run id>/`` keeps, for each such run,

- ``summary.json``: the run's summary as the results folder has it (numbers, the commit the
  run's process loaded, the machine, when it finished, and the size and SHA-256 of its log);
- ``config.yaml``: the config that reruns exactly this run (``python -m fedlib run``);
- ``rounds.jsonl.gz``: its per-round log, compressed.

No checkpoint is kept (2 MB a run), so an archived run can be read but not resumed or
inspected further; the results folder always wins where both have a run. An entry is served
only if its folder name, the summary's run id and the config's run id agree and its log
matches the size and SHA-256 the summary recorded, the summary matches the hash of its own content
and its numbers are those the log gives (:func:`fedlib.store.check_summary`); otherwise a
:class:`~fedlib.store.DamagedRunWarning` names the file and the entry is not served.

``python -m fedlib archive`` adds every finished run of the long-profile tables the report
reads (:func:`fedlib.papers.catalog.archived_tables`); ``--check`` verifies what is there (exit status 1
when an entry fails) and counts the finished runs of the results folder (how far the paper profile has come).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
from pathlib import Path

from fedlib import store
from fedlib.paths import ARCHIVE

LOG_GZ = store.LOG + ".gz"
_ONLY = False


class NotArchived(LookupError):
    """A run (or what only a trained model gives) that the run archive does not hold, asked for while reading the
    archive alone (:func:`only`): nothing is trained and the results folder is not read."""


@contextlib.contextmanager
def only():
    """Within it every run is read from the run archive only: the results folder is not looked at and nothing
    trains (a run to train raises :class:`NotArchived`). ``python -m fedlib report`` renders REPORT.md this way,
    so that every number in it has an archived run behind it, on any clone (:func:`fedlib.results.archive_only`)."""
    global _ONLY
    before, _ONLY = _ONLY, True
    try:
        yield
    finally:
        _ONLY = before


def reading_only() -> bool:
    """Whether :func:`only` is in force."""
    return _ONLY
#: a run's values derived from its trained model (fedlib.results.derived), kept beside its record
DERIVED = "derived"


def entry(cfg: dict, seed: int, root: Path | None = None) -> Path:
    """``<root>/<run id>``: where the archive keeps the run ``(cfg, seed)``."""
    from fedlib.config import run_id

    return Path(root or ARCHIVE) / run_id(cfg, seed)


def add(cfg: dict, seed: int, root: Path | None = None, replace: bool = False) -> bool:
    """Copy the finished run ``(cfg, seed)`` from the results folder into the archive (summary,
    config, compressed log); ``False`` where the run has not finished or is damaged. An entry already
    there that passes its checks is kept (the committed record a report quotes does not change because a
    run was made again: a rerun's timing, commit and machine differ even where its numbers do not),
    unless ``replace`` or the results folder's run holds more rounds (the run extended towards its plateau,
    :mod:`fedlib.plateau`); a damaged entry is replaced."""
    from fedlib.config import run_dir, target_rounds

    finished = None if _ONLY else store.verify_finished(run_dir(cfg, seed), cfg["train"]["rounds"], repair=False,
                                                        at_least=target_rounds(cfg))
    if finished is None:
        return False
    if not replace and entry(cfg, seed, root).exists():
        kept = summary({**cfg, "train": {**cfg["train"], "extend_to": None}}, seed, root)
        if kept is not None and kept["rounds"] >= finished["rounds"]:
            add_derived(cfg, seed, root)
            return True   # an extension (more rounds, same run id) replaces the shorter record
    src, dest = run_dir(cfg, seed), entry(cfg, seed, root)
    dest.mkdir(parents=True, exist_ok=True)
    log = (src / store.LOG).read_bytes()
    store.atomic_write(dest / LOG_GZ, gzip.compress(log, mtime=0))
    shutil.copyfile(src / store.CONFIG, dest / store.CONFIG)
    record = store.with_hash({k: v for k, v in finished.items() if k not in ("cache_hit", "archived")})
    store.atomic_write(dest / store.SUMMARY, json.dumps(record, indent=1) + "\n")
    add_derived(cfg, seed, root)
    return True


def add_derived(cfg: dict, seed: int, root: Path | None = None) -> int:
    """Copy the run's derived values (:func:`fedlib.results.derived`) that belong to its archived record into the
    archive; how many were copied."""
    import hashlib

    from fedlib.config import run_dir

    src, dest = run_dir(cfg, seed) / DERIVED, entry(cfg, seed, root)
    try:
        logged = json.loads((dest / store.SUMMARY).read_text())["integrity"]["log_sha256"]
    except (OSError, ValueError, KeyError):
        return 0
    copied = 0
    for old in sorted((dest / DERIVED).glob("*.json")) if (dest / DERIVED).is_dir() else ():
        try:
            stale = json.loads(old.read_text()).get("log_sha256") != logged
        except ValueError:
            stale = True
        if stale:   # made from a record this entry no longer holds (the run was extended)
            old.unlink()
    for path in sorted(src.glob("*.json")) if src.is_dir() else ():
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("log_sha256") == logged and record.get("run_id") == dest.name:
            target = dest / DERIVED / path.name
            if not target.is_file() or hashlib.sha256(target.read_bytes()).digest() != \
                    hashlib.sha256(path.read_bytes()).digest():
                (dest / DERIVED).mkdir(exist_ok=True)
                store.atomic_write(target, path.read_bytes())
                copied += 1
    return copied


def _log_bytes(folder: Path) -> bytes | None:
    try:
        return gzip.decompress((folder / LOG_GZ).read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def summary(cfg: dict, seed: int, root: Path | None = None) -> dict | None:
    """The archived summary of ``(cfg, seed)`` (marked ``"archived": True``), or ``None`` where
    the archive has no such run or its entry fails a check (a warning then names the file)."""
    from fedlib.config import run_id, target_rounds

    folder = entry(cfg, seed, root)
    path = folder / store.SUMMARY
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        integrity = record["integrity"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return _reject(folder, store.SUMMARY, "unreadable or without its integrity record")
    if record.get("run_id") != run_id(cfg, seed) or record.get("seed") != seed:
        return _reject(folder, store.SUMMARY, f"is the record of run {record.get('run_id')} seed "
                       f"{record.get('seed')}, not of run {run_id(cfg, seed)} seed {seed}")
    wrong = store.length_problem(record, cfg["train"]["rounds"])
    if wrong:
        return _reject(folder, store.SUMMARY, wrong)
    log = _log_bytes(folder)
    if log is None or len(log) != integrity["log_bytes"] or store.sha256(log) != integrity["log_sha256"]:
        return _reject(folder, LOG_GZ, "missing, unreadable or not the log the summary was written from")
    wrong = store.check_summary(record, store.parse_log(log.decode(errors="replace"))[0], require_hash=True)
    if wrong:
        return _reject(folder, store.SUMMARY, wrong)
    if store.short_of(record, target_rounds(cfg)):   # sound, but shorter than the extension asked for
        return None
    return {**record, "cache_hit": True, "archived": True}


def rounds(cfg: dict, seed: int, root: Path | None = None) -> list[dict]:
    """The per-round records of an archived run (``[]`` where :func:`summary` would not serve it)."""
    if summary(cfg, seed, root) is None:
        return []
    return store.parse_log(_log_bytes(entry(cfg, seed, root)).decode())[0]


def _reject(folder: Path, name: str, what: str) -> None:
    store.warn(folder, name, what, "not served from the archive")
    return None
