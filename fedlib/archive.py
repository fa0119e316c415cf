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

The archive's index ``INDEX.json`` lists what it holds: for each run id, the SHA-256 of the entry's files hashed
together with that run id (:func:`entry_hash`: summary, config, compressed log and derived values).
:func:`add` updates it with each entry it writes, under a lock on the archive folder (other processes add
concurrently) and atomically. An entry whose files differ from its record there is not served; ``--check`` names
every entry that is missing (listed, no folder), extra (a folder the index does not list), swapped (its config is
another run's) or damaged, one line each. ``python -m fedlib archive --index`` writes the index for the entries
there that pass their checks.

``python -m fedlib archive`` adds every finished run of the long-profile tables the report
reads (:func:`fedlib.papers.catalog.archived_tables`); ``--check`` verifies what is there (exit status 1
when an entry fails) and counts the finished runs of the results folder (how far the paper profile has come).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import re
import threading
import warnings
from pathlib import Path

from fedlib import store
from fedlib.paths import ARCHIVE

LOG_GZ = store.LOG + ".gz"
INDEX = "INDEX.json"
RUN_ID = re.compile(r"^[0-9a-f]{12}$")
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
    config, compressed log) and record it in the index (:data:`INDEX`); ``False`` where the run has not finished
    or is damaged. An entry already there that passes its checks is kept (the committed record a report quotes does
    not change because a run was made again: a rerun's timing, commit and machine differ even where its numbers do
    not), unless ``replace`` or the results folder's run holds more rounds (the run extended towards its plateau,
    :mod:`fedlib.plateau`); a damaged entry is replaced. The entry is written and indexed under the archive's lock
    (:func:`locked`): the index update reads and writes one small file, it does not rescan the archive."""
    from fedlib.config import run_dir, target_rounds

    finished = None if _ONLY else store.verify_finished(run_dir(cfg, seed), cfg["train"]["rounds"], repair=False,
                                                        at_least=target_rounds(cfg))
    if finished is None:
        return False
    root = Path(root or ARCHIVE)
    root.mkdir(parents=True, exist_ok=True)
    with locked(root):
        if not replace and entry(cfg, seed, root).exists():
            kept = summary({**cfg, "train": {**cfg["train"], "extend_to": None}}, seed, root)
            if kept is not None and kept["rounds"] >= finished["rounds"]:
                _copy_derived(cfg, seed, root)
                _record(root, entry(cfg, seed, root))
                return True   # an extension (more rounds, same run id) replaces the shorter record
        src, dest = run_dir(cfg, seed), entry(cfg, seed, root)
        dest.mkdir(parents=True, exist_ok=True)
        store.remove_stale_temporary(dest)
        log = (src / store.LOG).read_bytes()
        store.atomic_write(dest / LOG_GZ, gzip.compress(log, mtime=0))
        store.atomic_write(dest / store.CONFIG, _archived_config((src / store.CONFIG).read_text(), dest))
        record = store.with_hash({k: v for k, v in finished.items() if k not in ("cache_hit", "archived")})
        store.atomic_write(dest / store.SUMMARY, json.dumps(record, indent=1) + "\n")
        _copy_derived(cfg, seed, root)
        _record(root, dest)
    return True


def _archived_config(text: str, dest: Path) -> str:
    """The results folder's ``config.yaml`` as the archive keeps it: the same config under a rerun hint that names
    the archived file, relative to the checkout (:func:`fedlib.store.rerun_hint`; the hint is a comment, so the run
    id does not change)."""
    first, sep, rest = text.partition("\n")
    match = re.match(r"^# run [0-9a-f]{12}, seed (\d+): ", first)
    if not sep or match is None:
        return text
    return store.rerun_hint(dest, int(match.group(1))) + "\n" + rest


def add_derived(cfg: dict, seed: int, root: Path | None = None) -> int:
    """Copy the run's derived values (:func:`fedlib.results.derived`) that belong to its archived record into the
    archive, and record the entry's new content in the index; how many were copied. Nothing is copied into an
    entry that does not pass its checks."""
    root = Path(root or ARCHIVE)
    if not entry(cfg, seed, root).is_dir():
        return 0
    with locked(root):
        if summary({**cfg, "train": {**cfg["train"], "extend_to": None}}, seed, root) is None:
            return 0
        copied = _copy_derived(cfg, seed, root)
        _record(root, entry(cfg, seed, root))
    return copied


def _copy_derived(cfg: dict, seed: int, root: Path | None = None) -> int:
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


# -- the index ---------------------------------------------------------------------------------------------------

_LOCKS: dict[str, list] = {}
_LOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def locked(root: Path):
    """An exclusive lock on the archive folder ``root`` (POSIX ``flock`` on the folder itself, so no lock file is
    left in the committed archive): processes that add entries, or write the index, take turns. Re-entrant within
    a process; dies with its process."""
    import fcntl

    key = os.path.abspath(root)
    with _LOCKS_GUARD:
        held = _LOCKS.get(key)
        if held is not None and held[2] == threading.get_ident():
            held[1] += 1
            mine = False
        else:
            held, mine = None, True
    if not mine:
        try:
            yield
        finally:
            with _LOCKS_GUARD:
                _LOCKS[key][1] -= 1
        return
    fd = os.open(key, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        store.remove_stale_temporary(key)   # an index write cut by kill -9 left its temporary file
        with _LOCKS_GUARD:
            _LOCKS[key] = [fd, 1, threading.get_ident()]
        try:
            yield
        finally:
            with _LOCKS_GUARD:
                _LOCKS.pop(key, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def entry_hash(folder: Path) -> str:
    """SHA-256 of an entry: its run id (the folder's name) with the name and SHA-256 of each file a reader serves
    (summary, config, compressed log, every derived value), so that an edited, damaged, added or removed file, or
    the files of another run id, give another hash. A missing file counts as absent."""
    folder = Path(folder)
    h = hashlib.sha256(f"fedlib archive entry {folder.name}\n".encode())
    names = [store.SUMMARY, store.CONFIG, LOG_GZ]
    if (folder / DERIVED).is_dir():
        names += sorted(f"{DERIVED}/{p.name}" for p in (folder / DERIVED).glob("*.json"))
    for name in names:
        try:
            digest = store.file_record(folder / name)["sha256"]
        except OSError:
            digest = "absent"
        h.update(f"{name} {digest}\n".encode())
    return h.hexdigest()


class BadIndex(ValueError):
    """The archive's index is there but unreadable."""


def read_index(root: Path | None = None) -> dict[str, str] | None:
    """``{run id: entry hash}`` of the archive's index, ``None`` where there is none; :class:`BadIndex` where it
    is unreadable or malformed."""
    path = Path(root or ARCHIVE) / INDEX
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise BadIndex(f"{path}: unreadable ({' '.join(str(exc).split())[:100]})") from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict) or not all(isinstance(k, str) and RUN_ID.match(k) and isinstance(v, str)
                                                and re.fullmatch(r"[0-9a-f]{64}", v) for k, v in entries.items()):
        raise BadIndex(f"{path}: not an archive index (an 'entries' mapping of run ids to SHA-256 hashes)")
    return entries


_STAT_CACHE: dict[tuple[str, str], tuple] = {}


def _while_unchanged(kind: str, path: Path, load):
    """``load()`` for ``path``, read again only when the file changed (its inode, modification time and size):
    readers call these for every entry they serve. ``None`` where the file is missing."""
    try:
        st = Path(path).stat()
    except OSError:
        return None
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    cached = _STAT_CACHE.get((kind, str(path)))
    if cached is not None and cached[0] == key:
        return cached[1]
    value = load()
    _STAT_CACHE[(kind, str(path))] = (key, value)
    return value


def _index_now(root: Path) -> dict[str, str] | None:
    """:func:`read_index`, read again only when the file changed; ``None`` where there is none or it is unreadable
    (``--check`` names that)."""
    def load():
        try:
            return read_index(root)
        except BadIndex:
            return None
    return _while_unchanged("index", Path(root) / INDEX, load)


def write_index(root: Path, entries: dict[str, str]) -> None:
    """Write the index atomically (temporary file, fsync, rename): one run id a line, sorted."""
    body = {"about": "what this run archive holds: run id -> SHA-256 of the entry's files hashed with its run id "
                     "(fedlib.archive.entry_hash); written by fedlib.archive.add, checked by python -m fedlib archive "
                     "--check, rebuilt by python -m fedlib archive --index",
            "version": 1, "entries": dict(sorted(entries.items()))}
    store.atomic_write(Path(root) / INDEX, json.dumps(body, indent=1) + "\n")


def _record(root: Path, folder: Path) -> None:
    """Record the entry ``folder``'s hash in the index (the caller holds :func:`locked`). An unreadable index is left
    as it is (``--check`` names it; ``--index`` rewrites it) with a warning, never overwritten with one entry."""
    try:
        entries = read_index(root) or {}
    except BadIndex as exc:
        warnings.warn(f"{exc}; {folder.name} not recorded in it: python -m fedlib archive --index rewrites it",
                      store.DamagedRunWarning, stacklevel=3)
        return
    digest = entry_hash(folder)
    if entries.get(folder.name) != digest:
        entries[folder.name] = digest
        write_index(root, entries)


def entry_config(folder: Path) -> tuple[dict, int]:
    """The validated config and the seed an entry's ``config.yaml`` holds (the config of one run: exactly one seed),
    read as a run config is (:func:`fedlib.config.load_yaml`, aliases bounded), its ``device`` kept as written (a
    CUDA run's config is read on a machine without CUDA). :class:`ValueError` with the reason otherwise."""
    from fedlib.config import load_yaml, validate
    from fedlib.validation import ConfigError

    path = Path(folder) / store.CONFIG
    try:
        raw = load_yaml(path.read_text(), str(path))
        if not isinstance(raw, dict):
            raise ValueError("not a mapping")
        device = raw.get("device")
        cfg = validate({**raw, "device": "cpu"} if device in ("cuda", "auto") else raw, source=str(path))
        if device in ("cuda", "auto"):
            cfg["device"] = device
        if len(cfg["seeds"]) != 1:
            raise ValueError(f"{len(cfg['seeds'])} seeds, not the one of its run")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"unreadable ({exc.strerror or exc})") from None
    except ConfigError as exc:
        raise ValueError(f"not a valid run config ({' '.join(str(exc).split())[:160]})") from None
    return cfg, cfg["seeds"][0]


def config_run_id(folder: Path) -> str | None:
    """The run id of an entry's ``config.yaml`` (read again only when the file changed); ``None`` where it is not the
    readable config of one run."""
    from fedlib.config import run_id

    def load():
        try:
            cfg, seed = entry_config(folder)
            return run_id(cfg, seed)
        except ValueError:
            return None
    return _while_unchanged("config", Path(folder) / store.CONFIG, load)


def check_entry(folder: Path, root: Path, index: dict | None = None) -> tuple[str, str] | None:
    """What is wrong with the entry ``folder`` as ``(file, reason)`` (``None``: nothing): its name is not a run id,
    its config is not the config of its run (swapped or edited), it fails :func:`summary`'s checks, or (with
    ``index``) the index does not list it or lists other content."""
    folder = Path(folder)
    if not RUN_ID.match(folder.name):
        return "", "not an archive entry (its name is not a run id)"
    try:
        cfg, seed = entry_config(folder)
    except ValueError as exc:
        return store.CONFIG, str(exc)
    from fedlib.config import run_id

    rid = run_id(cfg, seed)
    if rid != folder.name:
        return store.CONFIG, f"is the config of run {rid}, not of run {folder.name} (swapped or edited)"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = summary({**cfg, "train": {**cfg["train"], "extend_to": None}}, seed, root, use_index=False)
    if got is None:
        said = next((str(w.message) for w in caught if issubclass(w.category, store.DamagedRunWarning)), None)
        if said is None:
            return store.SUMMARY, "missing"
        path, _, what = said.partition(": ")
        return Path(path).name, what.removesuffix("; not served from the archive")
    if index is not None:
        if folder.name not in index:
            return "", f"not in {INDEX} (added without the index, or by hand): python -m fedlib archive --index " \
                       "records it once it is known good"
        if index[folder.name] != entry_hash(folder):
            return "", f"its files differ from their record in {INDEX} (edited or damaged after it was archived)"
    return None


def check(root: Path | None = None) -> list[str]:
    """One line for each thing wrong with the archive ``root``: the index missing or unreadable, every entry it
    lists that has no folder (missing), every folder it does not list (extra), and every entry that is swapped,
    edited or damaged (:func:`check_entry`). ``[]``: everything passes."""
    root = Path(root or ARCHIVE)
    lines = []
    try:
        index = read_index(root)
        if index is None:
            lines.append(f"{root / INDEX}: missing, so nothing says what the archive holds: python -m fedlib archive "
                         "--index writes it for the entries that pass their checks")
    except BadIndex as exc:
        index = None
        lines.append(str(exc))
    folders = sorted(p for p in root.iterdir() if not p.name.startswith(".") and p.name != INDEX)
    names = {p.name for p in folders if p.is_dir()}
    for rid in sorted(set(index or ()) - names):
        lines.append(f"{root / rid}: missing (listed in {INDEX}; its folder is gone)")
    for path in folders:
        if not path.is_dir():
            lines.append(f"{path}: extra (a file where the archive holds only entry folders)")
            continue
        wrong = check_entry(path, root, index)
        if wrong is not None:
            name, what = wrong
            lines.append(f"{path / name if name else path}: {what}")
    return lines


def build_index(root: Path | None = None) -> tuple[int, list[str]]:
    """Write the index of the archive ``root`` for its entries that pass their checks (:func:`check_entry`), under
    the archive's lock; the number indexed and one line for each entry left out."""
    root = Path(root or ARCHIVE)
    with locked(root):
        entries, refused = {}, []
        for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            wrong = check_entry(path, root)
            if wrong is None:
                entries[path.name] = entry_hash(path)
            else:
                refused.append(f"{path / wrong[0] if wrong[0] else path}: {wrong[1]}; not indexed")
        write_index(root, entries)
    return len(entries), refused


def _log_bytes(folder: Path) -> bytes | None:
    try:
        return gzip.decompress((folder / LOG_GZ).read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile):
        return None


def summary(cfg: dict, seed: int, root: Path | None = None, use_index: bool = True) -> dict | None:
    """The archived summary of ``(cfg, seed)`` (marked ``"archived": True``), or ``None`` where
    the archive has no such run or its entry fails a check (a warning then names the file): its summary, log and
    config must be those of this run (a config swapped with another seed's entry is refused), and where the index
    lists the entry (``use_index``) its files must be those it recorded."""
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
    config_id = config_run_id(folder)
    if config_id != record["run_id"]:
        return _reject(folder, store.CONFIG, "unreadable or not a run config" if config_id is None else
                       f"is the config of run {config_id}, not of run {record['run_id']} (swapped or edited)")
    if use_index:
        index = _index_now(folder.parent)
        if index is not None and folder.name in index and index[folder.name] != entry_hash(folder):
            return _reject(folder, "", f"its files differ from their record in "
                           f"{folder.parent / INDEX} (edited or damaged after it was archived)")
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
