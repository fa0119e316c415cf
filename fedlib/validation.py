"""Parameter validation shared by configs and algorithm hyperparameters.

Every bad value raises :class:`ConfigError` with one message template that names the
field, the value and what is allowed, e.g.::

    FedProto.lam: got -1.0; allowed: a number in [0, inf)
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from typing import Any


class ConfigError(ValueError):
    """A configuration value is invalid; the message names field, value and what is allowed."""

    def __init__(self, field: str, value: Any, allowed: str, message: str | None = None):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(message or f"{field}: got {value!r}; allowed: {allowed}")

    def __reduce__(self):  # picklable, so an error in a worker process reaches the parent intact
        return (type(self), (self.field, self.value, self.allowed, str(self)))


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
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
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
