"""Parameter validation shared by configs and algorithm hyperparameters.

Every bad value raises :class:`ConfigError` with one message template that names the
field, the value and what is allowed, e.g.::

    FedProto.lam: got -1.0; allowed: a number in [0, inf)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import math
import os
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names field, value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str, message: str | None = None):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(message or f"{field}: got {shown(value)}; allowed: {allowed}{did_you_mean(value, allowed)}")

    def __reduce__(self):  # picklable, so an error in a worker process reaches the parent intact
        return (type(self), (self.field, self.value, self.allowed, str(self)))


SHOWN_VALUES = 1000


def shown(value: Any) -> str:
    """``repr(value)``, except for a container that stands for more than :data:`SHOWN_VALUES` values (a YAML document
    whose aliases share one list many times over would expand into gigabytes): then what it is and that it is too
    large to show. The count stops at the limit, so it costs little whatever the value."""
    seen, stack = 0, [value]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > SHOWN_VALUES:
            return f"<a {type(value).__name__} of more than {SHOWN_VALUES} values, not shown>"
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, (str, bytes)) and len(item) > 10 * SHOWN_VALUES:
            return f"<a {type(value).__name__} of {len(item):,} characters, not shown>" if item is value else \
                f"<a {type(value).__name__} holding a text of {len(item):,} characters, not shown>"
    return repr(value)


def did_you_mean(value: Any, allowed: str) -> str:
    """`` (did you mean 'fedproto'?)`` when ``allowed`` lists names (``one of a, b, c``) and ``value`` is a name
    close to one of them (:func:`difflib.get_close_matches`); ``''`` otherwise."""
    if not isinstance(value, str) or not allowed.startswith("one of "):
        return ""
    names = [item.split(" (")[0].strip().strip("'\"") for item in allowed[len("one of "):].split(", ")]
    close = difflib.get_close_matches(value, [n for n in names if n and n != value], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(v: float) -> str:
    """``4294967295`` or ``0.001``: integers in full (``:g`` would round 2**32 - 1), others short."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e16 else f"{v:g}"


@dataclasses.dataclass(frozen=True)
class Interval:
    """A numeric range; ``None`` bounds are open-ended. ``integer`` requires an int."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False
    allow_none: bool = False  # ``null`` is a valid value (e.g. "switched off")

    def describe(self) -> str:
        lo = "-inf" if self.low is None else _number(self.low)
        hi = "inf" if self.high is None else _number(self.high)
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        kind = "an integer" if self.integer else "a number"
        return f"{kind} in {left}{lo}, {hi}{right}" + (" or null" if self.allow_none else "")

    def ok(self, v: Any) -> bool:
        if v is None:
            return self.allow_none
        if isinstance(v, bool):
            return False
        if self.integer and not isinstance(v, int):
            return False
        if not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            return False  # nan and +-inf are never valid settings
        if self.low is not None and (v < self.low or (self.low_open and v == self.low)):
            return False
        if self.high is not None and (v > self.high or (self.high_open and v == self.high)):
            return False
        return True

    def invalid_example(self) -> Any:
        if self.low is not None:
            return self.low - 1
        return self.high + 1  # type: ignore[operator]


@dataclasses.dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple

    def describe(self) -> str:
        if self.values == (True, False):
            return "true or false"
        return "one of " + ", ".join(repr(v) for v in self.values)

    def ok(self, v: Any) -> bool:
        return any(v == x and type(v) is type(x) for x in self.values)

    def invalid_example(self) -> Any:
        return "__not_an_option__"


BOOL = Options((True, False))
# What numpy's and torch's generators accept as a seed (numpy's legacy RandomState: below 2**32).
SEED = Interval(0, 2**32 - 1, integer=True)
POSITIVE_INT = Interval(1, None, integer=True)


def check_value(field: str, value: Any, rule: Interval | Options) -> Any:
    """``value`` if ``rule`` allows it, else :class:`ConfigError` naming ``field``."""
    if not rule.ok(value):
        raise ConfigError(field, value, rule.describe())
    return value


def check_file_name(field: str, value: Any) -> str:
    """``value`` where it can become one file name inside an output folder: a non-empty string without a path
    separator, ``..`` or control characters (nor ``.`` alone) (else :class:`ConfigError`). A config's
    ``name`` is checked so before it names a file (``figures/partition_<name>.png``): a name such as
    ``x/../../escape`` must not write outside the output folder."""
    if not isinstance(value, str) or not value or value in (".", "..") or ".." in value or \
            any(sep in value for sep in ("/", "\\", os.sep)) or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ConfigError(field, value, "a file name: no '/' or '\\', no '..', no control characters")
    if len(os.fsencode(value)) > 200:
        raise ConfigError(field, value[:40] + "...", "a file name of at most 200 bytes")
    return value


def check_writable(path: str | Path, field: str = "results_dir") -> None:
    """A folder this process can create and write in: ``path`` itself if it exists, else its
    nearest existing parent, which must take a new file (a test file is created and removed there, so a
    read-only or immutable folder, ``/proc`` or ``/sys`` are refused, whoever the user is). Checked before any
    data is loaded, so a run never fails at its first write after minutes of work."""
    import errno
    import tempfile

    try:
        path = Path(path).expanduser().absolute()
        if path.exists() and not path.is_dir():
            raise ConfigError(field, str(path), "a folder (this is a file)")
        probe = path
        while not probe.exists():   # a symlink to nowhere does not exist either: its parent is probed
            probe = probe.parent
    except ConfigError:
        raise
    except (OSError, ValueError, RuntimeError) as exc:   # a name too long, a NUL byte, a loop of links
        raise ConfigError(field, str(path), f"a folder path this system takes ({_os_reason(exc)})") from None
    if not probe.is_dir():
        raise ConfigError(field, str(path), f"a folder that can be created ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(field, str(path), f"a folder this user can write in ({probe} is not writable)")
    try:
        fd, name = tempfile.mkstemp(prefix=".fedlib-write-check.", suffix=".tmp", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        why = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EROFS: "a read-only file system", errno.ENOENT: "a system folder that takes no new files",
               errno.EPERM: "not permitted: an immutable or system folder",
               errno.EACCES: "permission denied"}.get(exc.errno) or _os_reason(exc)
        raise ConfigError(field, str(path), f"a folder this user can write in ({probe}: {why})") from None
    try:   # each folder still to create must be a name this file system takes
        limit = os.pathconf(probe, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    too_long = [part for part in path.relative_to(probe).parts if len(os.fsencode(part)) > limit]
    if too_long:
        raise ConfigError(field, str(path), f"a folder path this system takes ({too_long[0][:40]}...: a name "
                          f"longer than {limit} bytes)")


def _os_reason(exc: BaseException) -> str:
    """An OS error's reason in a few words (``Permission denied``, ``Read-only file system``)."""
    return getattr(exc, "strerror", None) or " ".join(str(exc).split()) or type(exc).__name__


def check_fields(obj: Any, constraints: dict, prefix: str | None = None) -> None:
    """Check ``obj``'s fields against ``constraints`` ({field: Interval | Options})."""
    owner = prefix or type(obj).__name__
    for name, rule in constraints.items():
        value = getattr(obj, name)
        if not rule.ok(value):
            raise ConfigError(f"{owner}.{name}", value, rule.describe())


def unknown_key_error(owner: str, key: str, known: list[str]) -> ConfigError:
    """Error for a key that is not a field, with the closest known name as a hint."""
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    allowed = "one of " + ", ".join(sorted(known))
    return ConfigError(f"{owner}.{key}", key, allowed,
                       message=f"{owner}: unknown field {key!r}{hint}; allowed: {allowed}")


def from_dict(cls: type, data: dict | None, owner: str | None = None):
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys with a suggestion."""
    data = dict(data or {})
    owner = owner or cls.__name__
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in data:
        if key not in names:
            raise unknown_key_error(owner, key, names)
    return cls(**data)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``prog: error: ...``, no usage block) with exit
    status 2, as every other bad input gets."""

    def error(self, message: str):
        import re

        message = " ".join(message.split())
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:   # argparse lists the choices; say which one was meant
            names = [n.strip().strip("'\"") for n in choice.group(2).split(",")]
            close = difflib.get_close_matches(choice.group(1), names, n=1)
            message += f" (did you mean {close[0]!r}?)" if close else ""
        self.exit(2, f"{self.prog}: error: {message}\n")


def arg_type(rule: Interval | Options, convert=int):
    """An argparse ``type`` that converts with ``convert`` and checks ``rule``, in the one-line format."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}; allowed: {rule.describe()}") from None
        if not rule.ok(value):
            raise argparse.ArgumentTypeError(f"got {value!r}; allowed: {rule.describe()}")
        return value

    return parse


def os_error(exc: OSError) -> str:
    """One line for an error of the file system met while working: a full disk says so, and that nothing finished
    is lost (every round is checkpointed: the same command resumes once there is room)."""
    import errno

    where = exc.filename or ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"disk full: could not write {where or 'a file'}; finished runs and checkpointed rounds are kept: "
                "free some space and run the same command to resume")
    reason = exc.strerror or " ".join(str(exc).split()) or type(exc).__name__
    return (f"{where}: {reason}" if where else reason) + "; finished runs and checkpointed rounds are kept: run the " \
        "same command to resume once it can be written"
