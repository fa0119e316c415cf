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
        super().__init__(message or f"{field}: got {value!r}; allowed: {allowed}")

    def __reduce__(self):  # picklable, so an error in a worker process reaches the parent intact
        return (type(self), (self.field, self.value, self.allowed, str(self)))


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


def check_writable(path: str | Path, field: str = "results_dir") -> None:
    """A folder this process can create and write in: ``path`` itself if it exists, else its
    nearest existing parent. Checked before any data is loaded, so a run never fails at its first
    write after minutes of work."""
    path = Path(path).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise ConfigError(field, str(path), "a folder (this is a file)")
    probe = path
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(field, str(path), f"a folder that can be created ({probe} is a file)")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(field, str(path), f"a folder this user can write in ({probe} is not writable)")


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
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


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
