"""Run folders that never serve wrong numbers: atomic writes and cross-checked records.

A run folder ``<results_dir>/<run id>/`` holds

- ``rounds.jsonl``: one JSON line per round, rewritten whole and atomically each round;
- ``checkpoint.pt``: client and server state after round r (its tensors stacked, :func:`stacked`),
  with r, the run id and the length and SHA-256 of the log up to round r
  (``torch.load(weights_only=True)``);
- ``summary.json``: once finished, the numbers plus the log's and the checkpoint's size
  and SHA-256, the round the checkpoint holds and the SHA-256 of the summary's own content;
- ``config.yaml`` (a config ``python -m fedlib run`` accepts: it reruns exactly this run)
  and ``partition.json`` (the partition's record).

Every file is written to a temporary file, fsynced and renamed, so a kill leaves either the
old or the new version. Before a cache hit or a resume the three records are checked against
each other (:func:`verify_finished`, :func:`resume_point`), and a summary's numbers against
those its log gives (:func:`check_summary`). Any inconsistency or unreadable
file gives one :class:`DamagedRunWarning` line that names the file and what is wrong; the run
then continues from the last consistent point, or from round 1. A stale log is never served
and never appended to. A run made on a Ray worker that does not see the results folder arrives as
its files without the checkpoint (:func:`write_returned`); its summary records that, and it is served
from its log alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from fedlib.logs import bars_shown

LOG, CHECKPOINT, SUMMARY, CONFIG, PARTITION = "rounds.jsonl", "checkpoint.pt", "summary.json", "config.yaml", \
    "partition.json"
SUMMARY_HASH = "summary_sha256"


class DamagedRunWarning(UserWarning):
    """A run folder's file is missing, unreadable or disagrees with the others."""


def warn(folder: Path, name: str, what: str, action: str) -> None:
    warnings.warn(f"{Path(folder) / name}: {what}; {action}", DamagedRunWarning, stacklevel=3)


_FORMAT = warnings.formatwarning


def _one_line(message, category, filename, lineno, line=None) -> str:
    """A :class:`DamagedRunWarning` prints as the one line of its message (no file:line header, no
    source line); every other warning as Python formats it."""
    if isinstance(category, type) and issubclass(category, DamagedRunWarning):
        return f"warning: {message}\n"
    return _FORMAT(message, category, filename, lineno, line)


warnings.formatwarning = _one_line


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    """Print a warning on a line of its own: through tqdm (the bar is cleared, the line printed, the bar drawn again
    below it) while this process draws a bar; in a worker process on a terminal, after a new line, since the
    parent's bar may hold the line. Otherwise as Python prints it."""
    import multiprocessing
    import sys

    file = sys.stderr if file is None else file
    if file is None:
        return
    text = warnings.formatwarning(message, category, filename, lineno, line)
    try:
        if bars_shown():
            from tqdm import tqdm

            tqdm.write(text.rstrip("\n"), file=file)
            return
        if multiprocessing.parent_process() is not None and getattr(file, "isatty", lambda: False)():
            text = "\n" + text
        file.write(text)
    except OSError:   # a closed or broken stream: a warning is not a reason to fail
        pass


warnings.showwarning = _show


@contextlib.contextmanager
def _temporary(path: Path):
    """``.<name>.<pid>.tmp`` beside ``path``, removed when the block does not end in its rename
    (an interrupt, a full disk): nothing temporary outlives a write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _naming(path: Path):
    """An ``OSError`` of a write names the file meant, not its temporary (a full disk: ENOSPC)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None or str(exc.filename).endswith(".tmp"):
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        raise


def atomic_write(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` through a temporary file, fsync and rename."""
    path = Path(path)
    with _naming(path), _temporary(path) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True   # another user's process (or no such number): left alone
    return True


def remove_stale_temporary(folder: Path) -> int:
    """Remove the temporary files (``.<name>.<pid>.tmp``) in ``folder`` whose process has ended (one killed with
    SIGKILL mid-write leaves its file behind); how many. Called by a process that has just taken the run's lock,
    so no live writer of this folder is left out of account: a file of a live pid (another process writing,
    or the number reused) is kept."""
    stale = 0
    for tmp in Path(folder).glob(".*.tmp"):
        pid = tmp.name[:-len(".tmp")].rsplit(".", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            tmp.unlink(missing_ok=True)
            stale += 1
    return stale


def remove_temporary(folder: Path, pids=None) -> int:
    """Remove the temporary files the stopped processes ``pids`` left in ``folder``; how many
    (another process's files are left alone: it may still rename them). ``pids=None``: every
    process's, for a folder whose writers are all known to have ended."""
    patterns = ["*"] if pids is None else pids
    found = [p for pid in patterns for p in Path(folder).glob(f".*.{pid}.tmp")]
    for tmp in found:
        tmp.unlink(missing_ok=True)
    return len(found)


def rerun_hint(folder: Path, seed: int) -> str:
    """``# run <id>, seed <s>: `python -m fedlib run results/<id>/config.yaml` reruns it``: one comment line. The
    path is relative to the checkout where the folder lies inside it (so the hint serves every clone; run it from
    the checkout), else absolute, and quoted for a POSIX shell (:func:`shell_word`): a ``$(...)``, a quote, a space
    or a newline in ``results_dir`` is text, never a command, and never a second YAML line."""
    return f"# run {shell_word(Path(folder).name)}, seed {seed}: `python -m fedlib run " \
           f"{shell_word(str(checkout_relative(Path(folder) / CONFIG)))}` reruns it"


def checkout_relative(path: Path) -> Path:
    """``path`` relative to the checkout where it lies inside it, else absolute (normalised, links kept)."""
    from fedlib.paths import CHECKOUT

    absolute = Path(os.path.abspath(path))
    for base in (CHECKOUT, Path(os.path.abspath(CHECKOUT))):
        try:
            return absolute.relative_to(base)
        except ValueError:
            continue
    try:
        return absolute.resolve().relative_to(CHECKOUT)
    except (ValueError, OSError, RuntimeError):
        return absolute


def shell_word(text: str) -> str:
    """``text`` as one word of a POSIX shell command (:func:`shlex.quote`); where it holds a character that is not
    printable (a newline, a tab, a line separator, a control character), bash's ``$'...'`` form with that character
    escaped, so that the word stays on one line."""
    import shlex

    if text.isprintable():
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in ("\\", "'"):
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ord(ch) < 0x80:   # a byte; above it the character (bash writes it in UTF-8)
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "$'" + "".join(out) + "'"


def log_text(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def sha256(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def file_record(path: Path) -> dict:
    """``{"bytes", "sha256"}`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return {"bytes": size, "sha256": h.hexdigest()}


def write_log(folder: Path, records: list[dict]) -> str:
    """Rewrite ``rounds.jsonl`` with ``records``; return its text."""
    text = log_text(records)
    atomic_write(Path(folder) / LOG, text)
    return text


def stacked(state: Any) -> tuple[Any, int]:
    """``state`` with every tensor replaced by a view of one flat buffer per (dtype, device), and the
    number of buffers. ``torch.save`` writes each buffer once (one device-to-host copy each on a GPU,
    instead of one per tensor) and ``torch.load`` gives the views back, with the same values."""
    found: dict = {}

    def collect(obj):
        if isinstance(obj, torch.Tensor):
            if obj.layout == torch.strided:
                found.setdefault((obj.dtype, obj.device), {}).setdefault(id(obj), obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                collect(v)
        elif isinstance(obj, (list, tuple)):
            for v in obj:
                collect(v)

    collect(state)
    views: dict = {}
    with torch.no_grad():
        for group in found.values():
            tensors = list(group.values())
            buf = torch.cat([t.reshape(-1) for t in tensors])
            for t, part in zip(tensors, torch.split(buf, [t.numel() for t in tensors]), strict=True):
                views[id(t)] = part.view(t.shape)

    def rebuild(obj):
        if isinstance(obj, torch.Tensor):
            return views.get(id(obj), obj)
        if isinstance(obj, dict):
            return {k: rebuild(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [rebuild(v) for v in obj]
        if isinstance(obj, tuple):
            return type(obj)(*map(rebuild, obj)) if hasattr(obj, "_fields") else tuple(map(rebuild, obj))
        return obj

    return rebuild(state), len(found)


def save_checkpoint(folder: Path, round_idx: int, clients: dict, server: Any, log: str) -> None:
    """``checkpoint.pt`` holding the state after ``round_idx`` and the log it belongs to, its tensors
    stacked into one buffer per dtype and device (:func:`stacked`)."""
    state, _ = stacked({"clients": clients, "server": server})
    path = Path(folder) / CHECKPOINT
    with _naming(path), _temporary(path) as tmp:
        try:
            torch.save({"round": round_idx, "run_id": Path(folder).name, "log_bytes": len(log.encode()),
                        "log_sha256": sha256(log), **state}, tmp)
        except RuntimeError as exc:   # torch's stream writer says neither the file nor the reason
            raise write_failed(path, exc) from None
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)


TORCH_WRITE_FAILED = ("PytorchStreamWriter failed", "file write failed", "inline_container", "unexpected pos")


def write_failed(path: Path, exc: BaseException) -> BaseException:
    """The error to raise for ``exc`` raised while writing ``path``: an :class:`OSError` naming the file for
    torch's writer failing (a full disk, most often: its text says neither), ``exc`` itself otherwise."""
    import errno

    text = " ".join(str(exc).split())
    if not isinstance(exc, RuntimeError) or not any(t in text for t in TORCH_WRITE_FAILED):
        return exc
    try:
        stat = os.statvfs(Path(path).parent)
        free = stat.f_bavail * stat.f_frsize
    except OSError:
        free = None
    code = errno.ENOSPC if free is None or free < (64 << 20) else errno.EIO
    return OSError(code, "disk full or the write failed (torch: " + text[:120] + ")", str(path))


def parse_log(text: str) -> tuple[list[dict], str | None]:
    """Records of a log text and what is wrong with it (``None``: rounds 1..n, all readable)."""
    records = []
    for i, line in enumerate(text.splitlines(), 1):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return records, f"line {i} is not JSON"
        if not isinstance(rec, dict) or rec.get("round") != i:
            return records, f"line {i} is not round {i}"
        records.append(rec)
    if text and not text.endswith("\n"):
        return records, "the last line is cut"
    return records, None


@dataclass
class Resume:
    """Where a run continues: after round ``done`` with these states and log records."""

    done: int
    clients: dict | None
    server: Any
    records: list[dict]


FRESH = Resume(0, None, None, [])


def load_checkpoint(folder: Path) -> tuple[dict | None, str | None]:
    """The checkpoint and what is wrong with it (``None``, ``"missing"`` or the reason)."""
    path = Path(folder) / CHECKPOINT
    if not path.exists():
        return None, "missing"
    try:
        ckpt = torch.load(path, weights_only=True)
    except Exception as exc:  # truncated zip, foreign pickle, ...: unreadable whatever the cause
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"unreadable ({first[:120]})"
    if not isinstance(ckpt, dict) or not {"round", "log_sha256", "log_bytes", "clients", "server"} <= set(ckpt):
        return None, "written by an older fedlib (no log record)"
    if ckpt.get("run_id") != Path(folder).name:
        return None, f"belongs to run {ckpt.get('run_id')!r}"
    return ckpt, None


def resume_point(folder: Path, rounds: int) -> Resume:
    """The last consistent point of an unfinished (or damaged) run folder.

    The checkpoint must be readable and belong to this run, and the log's first
    ``log_bytes`` bytes must hash to the checkpoint's record. Log lines after the
    checkpoint's round are dropped: silently when they are the next rounds of a run killed
    between writing its log and its checkpoint, with a warning when they are anything else.
    Otherwise the run starts again from round 1 (a warning says why) and the old log goes.
    """
    folder = Path(folder)
    log_path = folder / LOG
    text = log_path.read_bytes().decode(errors="replace") if log_path.exists() else ""
    ckpt, problem = load_checkpoint(folder)
    if ckpt is None:
        if problem != "missing":
            warn(folder, CHECKPOINT, problem, "recomputing the run from round 1")
        elif text:
            warn(folder, LOG, f"{len(text.splitlines())} logged rounds but no {CHECKPOINT}",
                 "recomputing the run from round 1")
        return _fresh(folder)
    done, n = int(ckpt["round"]), int(ckpt["log_bytes"])
    raw = text.encode()
    if len(raw) < n or sha256(raw[:n]) != ckpt["log_sha256"]:
        what = (f"holds {len(raw)} bytes, the checkpoint of round {done} {n}" if len(raw) < n
                else f"differs from the log the checkpoint of round {done} was saved with")
        warn(folder, LOG, what, "recomputing the run from round 1")
        return _fresh(folder)
    records, bad = parse_log(raw[:n].decode())
    if bad or len(records) != done:
        warn(folder, LOG, bad or f"{len(records)} rounds, the checkpoint {done}", "recomputing the run from round 1")
        return _fresh(folder)
    if done > rounds:
        warn(folder, CHECKPOINT, f"holds round {done} of a run of {rounds} rounds", "recomputing the run from round 1")
        return _fresh(folder)
    extra = raw[n:].decode(errors="replace")
    if extra:
        tail, bad = parse_log(log_text(records) + extra)
        if bad or len(tail) > rounds:
            warn(folder, LOG, f"{bad or 'more rounds than the run has'} after round {done}",
                 f"dropped; resuming after round {done} from {CHECKPOINT}")
        write_log(folder, records)
    return Resume(done, ckpt["clients"], ckpt["server"], records)


def _fresh(folder: Path) -> Resume:
    for name in (LOG, CHECKPOINT, SUMMARY):
        (Path(folder) / name).unlink(missing_ok=True)
    return FRESH


def summary_hash(summary: dict) -> str:
    """SHA-256 of a summary's own content: every field (``cache_hit`` and ``archived``, which a reader
    adds, left out) with the integrity record less this hash, as sorted JSON."""
    body = {k: v for k, v in summary.items() if k not in ("cache_hit", "archived")}
    body["integrity"] = {k: v for k, v in body.get("integrity", {}).items() if k != SUMMARY_HASH}
    return sha256(json.dumps(body, sort_keys=True))


def with_hash(summary: dict) -> dict:
    """``summary`` with :func:`summary_hash` in its integrity record."""
    return {**summary, "integrity": {**summary["integrity"], SUMMARY_HASH: summary_hash(summary)}}


def check_summary(summary: dict, records: list[dict], require_hash: bool = False) -> str | None:
    """What is wrong with a summary beside its verified log records (``None``: nothing). Its numbers
    must be those the log gives (:func:`fedlib.metrics.run_numbers`) and its hash (required with
    ``require_hash``; summaries written before hashes existed have none) must match its content."""
    from fedlib.metrics import run_numbers

    rec = summary["integrity"]
    if SUMMARY_HASH not in rec:
        if require_hash:
            return "has no hash of its own content"
    elif rec[SUMMARY_HASH] != summary_hash(summary):
        return "was changed after it was written (its content differs from its hash)"
    derived = run_numbers(records)
    wrong = [k for k, v in derived.items()
             if json.dumps(summary.get(k), sort_keys=True) != json.dumps(v, sort_keys=True)]
    return f"{', '.join(wrong)} differ from what its log gives" if wrong else None


def write_summary(folder: Path, summary: dict, log: str, checkpoint_round: int) -> dict:
    """``summary.json`` with the records that tie it to the log and the checkpoint, and its own hash."""
    summary = with_hash({**summary, "integrity": {"log_bytes": len(log.encode()), "log_sha256": sha256(log),
                                                  "checkpoint": file_record(Path(folder) / CHECKPOINT),
                                                  "checkpoint_round": checkpoint_round}})
    atomic_write(Path(folder) / SUMMARY, json.dumps(summary, indent=1))
    return summary


def length_problem(summary: dict, rounds: int) -> str | None:
    """What is wrong with the length a finished run's summary states for a config of ``rounds`` rounds
    (``None``: nothing). A run holds ``rounds`` rounds, fewer where it diverged (``diverged_at``), or more where it
    was extended past them (``train.extend_to``; its summary then says ``extended_from: rounds``)."""
    done, extended = summary.get("rounds"), summary.get("extended_from")
    if extended is not None and extended != rounds:
        return f"says it was extended from {extended} rounds, the config has {rounds}"
    if summary.get("diverged_at"):
        return None if done == summary["diverged_at"] else f"says {done} rounds, diverged at {summary['diverged_at']}"
    if done == rounds or (extended == rounds and isinstance(done, int) and done > rounds):
        return None
    return f"says {done} rounds, the config {rounds}"


def short_of(summary: dict, at_least: int | None) -> bool:
    """Whether a finished run (not diverged) holds fewer than the ``at_least`` rounds asked for: not damaged, but
    not what the caller wants (a run to extend, from its checkpoint where it has one)."""
    return bool(at_least) and not summary.get("diverged_at") and summary.get("rounds", 0) < at_least


def verify_finished(folder: Path, rounds: int, repair: bool = True, at_least: int | None = None) -> dict | None:
    """The summary of a finished run whose files agree; ``None`` when there is none or it
    cannot be trusted. With ``repair`` (the caller holds the run's lock) a warning then says
    which file and why, and the summary is removed so that the run is rebuilt from its last
    consistent point; without, the check is silent and changes nothing. ``rounds`` is the config's
    ``train.rounds`` (:func:`length_problem`); a sound run shorter than ``at_least`` rounds is ``None`` without a
    warning (:func:`short_of`: it is extended, not rebuilt)."""
    folder = Path(folder)
    path = folder / SUMMARY
    if not path.exists():
        return None
    try:
        summary = json.loads(path.read_text())
        rec = summary["integrity"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        what = "written by an older fedlib (no integrity record)" if isinstance(exc, KeyError) else "unreadable"
        return _distrust(folder, SUMMARY, what, repair)
    wrong = length_problem(summary, rounds)
    if wrong or rec.get("checkpoint_round") != summary.get("rounds"):
        return _distrust(folder, SUMMARY, wrong or f"says {summary.get('rounds')} rounds, its checkpoint "
                         f"{rec.get('checkpoint_round')}", repair)
    log = folder / LOG
    data = log.read_bytes() if log.exists() else b""
    if len(data) != rec["log_bytes"] or sha256(data) != rec["log_sha256"]:
        return _distrust(folder, LOG, "differs from the log the summary was written from", repair)
    wrong = check_summary(summary, parse_log(data.decode(errors="replace"))[0])
    if wrong:
        return _distrust(folder, SUMMARY, wrong, repair)
    ckpt = folder / CHECKPOINT
    if rec["checkpoint"] is not None and (not ckpt.exists() or file_record(ckpt) != rec["checkpoint"]):
        return _distrust(folder, CHECKPOINT, "missing or differs from the checkpoint the summary was written with",
                         repair)
    # rec["checkpoint"] None: finished elsewhere, its files returned without the checkpoint
    return None if short_of(summary, at_least) else summary


def _distrust(folder: Path, name: str, what: str, repair: bool) -> None:
    if repair:
        warn(folder, name, what, "not served; checking the run from its checkpoint")
        (Path(folder) / SUMMARY).unlink(missing_ok=True)
    return None


def write_returned(folder: Path, files: dict[str, str]) -> dict:
    """Write a run that finished in another place (a Ray worker without the results folder) from its
    returned files (``config.yaml``, ``partition.json``, ``rounds.jsonl``, ``summary.json``), each atomically
    and the summary last, so a kill leaves the run unfinished, never half-written. The log must be the one
    the summary was written from (else :class:`ValueError`, nothing written). The checkpoint stays behind:
    the summary's integrity record says so (``checkpoint: None``), :func:`verify_finished` then serves the
    run from its log, and :func:`fedlib.runner.load_state` remakes the checkpoint when asked for it."""
    folder = Path(folder)
    summary = json.loads(files[SUMMARY])
    rec = summary["integrity"]
    log = files[LOG].encode()
    if len(log) != rec["log_bytes"] or sha256(log) != rec["log_sha256"]:
        raise ValueError(f"{folder.name}: the returned {LOG} differs from the log its summary was written from")
    folder.mkdir(parents=True, exist_ok=True)
    for name in (CONFIG, PARTITION, LOG):
        atomic_write(folder / name, files[name])
    (folder / CHECKPOINT).unlink(missing_ok=True)  # an older checkpoint would not belong to this log
    # the record now says "no checkpoint here", so the summary's own hash is made again over that content
    summary = with_hash({**summary, "integrity": {**rec, "checkpoint": None}})
    atomic_write(folder / SUMMARY, json.dumps(summary, indent=1))
    return summary


def left_checkpoint_behind(folder: Path) -> bool:
    """Whether the finished run in ``folder`` was written from returned files, without its checkpoint."""
    try:
        return json.loads((Path(folder) / SUMMARY).read_text())["integrity"]["checkpoint"] is None
    except (OSError, ValueError, KeyError, TypeError):
        return False


def forget(folder: Path) -> None:
    """Remove a run's log, checkpoint and summary (it trains again from round 1); config and partition stay."""
    _fresh(folder)


def read_log(folder: Path) -> list[dict]:
    """The readable consecutive rounds at the start of ``rounds.jsonl`` (a run in progress)."""
    path = Path(folder) / LOG
    return parse_log(path.read_text())[0] if path.exists() else []
