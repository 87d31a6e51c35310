"""Checking option values before anything is loaded or trained.

Every configurable thing (the training budget, a suite's data options, a method's options)
has defaults; a value given on the command line or in a profile is checked against

* the type of its default (a number for a number, a bool for a bool, a string for a string, a
  list for a list; numbers must be finite), unless the option declares a constraint, and
* the option's constraint (:class:`Range`, :class:`OneOf`, :class:`ListOf`, :class:`AnyOf`,
  :class:`Check`),
  which is authoritative where declared (it may allow None or several types).

:func:`check_options` collects every problem and raises one :class:`bench.errors.BenchError`
that names the option, the value and what is valid (the CLI turns it into exit code 2).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from bench.errors import BenchError


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Constraint:
    """``problem(value)``: None when the value is valid, else what is wrong."""

    optional: bool = False

    def problem(self, value) -> str | None:
        if value is None:
            return None if self.optional else f"must not be None ({self.describe()})"
        return self._problem(value)

    def _problem(self, value) -> str | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class Range(Constraint):
    """A finite number in ``[lo, hi]`` (``lo_open`` / ``hi_open``: excluded); ``integer``: an int."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    optional: bool = False

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        parts = []
        if self.lo is not None:
            parts.append(f"{'>' if self.lo_open else '>='} {self.lo:g}")
        if self.hi is not None:
            parts.append(f"{'<' if self.hi_open else '<='} {self.hi:g}")
        text = kind + (" " + " and ".join(parts) if parts else "")
        return text + (" or None" if self.optional else "")

    def _problem(self, v) -> str | None:
        if not _is_number(v) or (self.integer and not isinstance(v, int)) or not math.isfinite(v):
            return f"must be {self.describe()}"
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            return f"must be {self.describe()}"
        if self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)):
            return f"must be {self.describe()}"
        return None


@dataclass(frozen=True, init=False)
class OneOf(Constraint):
    """One of the listed values."""

    values: tuple
    optional: bool = False

    def __init__(self, *values, optional: bool = False):
        object.__setattr__(self, "values", tuple(values))
        object.__setattr__(self, "optional", optional)

    def describe(self) -> str:
        return "one of " + ", ".join(map(repr, self.values)) + (" or None" if self.optional else "")

    def _problem(self, v) -> str | None:
        return None if v in self.values else f"must be {self.describe()}"


@dataclass(frozen=True)
class ListOf(Constraint):
    """A list (at least ``min_len`` long) whose every item meets ``item``."""

    item: Constraint
    min_len: int = 1
    optional: bool = False

    def describe(self) -> str:
        return f"a list of at least {self.min_len} item(s), each {self.item.describe()}"

    def _problem(self, v) -> str | None:
        if not isinstance(v, (list, tuple)) or len(v) < self.min_len:
            return f"must be {self.describe()}"
        bad = [x for x in v if self.item.problem(x) is not None]
        return f"has invalid item(s) {bad[:5]}: each {self.item.describe()}" if bad else None


@dataclass(frozen=True, init=False)
class AnyOf(Constraint):
    """Valid when any of the given constraints accepts the value."""

    options: tuple

    def __init__(self, *options: Constraint):
        object.__setattr__(self, "options", tuple(options))

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.options)

    def problem(self, value) -> str | None:
        if any(c.problem(value) is None for c in self.options):
            return None
        return f"must be {self.describe()}"


@dataclass(frozen=True)
class Check(Constraint):
    """A check function: ``check(value)`` raises BenchError / ValueError when invalid (its
    message is the problem), e.g. a parser that already names what is valid."""

    check: Any
    description: str = "valid"
    optional: bool = False

    def describe(self) -> str:
        return self.description

    def _problem(self, v) -> str | None:
        try:
            self.check(v)
        except (BenchError, ValueError, TypeError) as exc:
            return f"is invalid: {exc}"
        return None


def type_problem(default, value) -> str | None:
    """What is wrong with ``value`` for an option whose default is ``default`` (None: nothing)."""
    if default is None:
        return None
    if value is None:
        return f"must not be None (the default is {default!r})"
    if isinstance(default, bool):
        return None if isinstance(value, bool) else "must be true or false"
    if _is_number(default):
        if not _is_number(value):
            return f"must be a number (the default is {default!r})"
        return None if math.isfinite(value) else "must be finite"
    if isinstance(default, str):
        return None if isinstance(value, str) else f"must be a string (the default is {default!r})"
    if isinstance(default, (list, tuple)):
        return None if isinstance(value, (list, tuple)) else f"must be a list (the default is {list(default)!r})"
    return None


def problems(config: Mapping[str, Any], defaults: Mapping[str, Any],
             constraints: Mapping[str, Constraint] | None = None) -> list[str]:
    """``option=value: problem`` for every invalid entry of ``config``."""
    constraints = constraints or {}
    out = []
    for key, value in config.items():
        if key in constraints:
            p = constraints[key].problem(value)
        else:
            p = type_problem(defaults.get(key), value)
        if p:
            out.append(f"{key}={value!r} {p}")
    return out


def check_options(owner: str, config: Mapping[str, Any], defaults: Mapping[str, Any],
                  constraints: Mapping[str, Constraint] | None = None) -> None:
    """Raise one :class:`BenchError` naming every invalid option of ``owner``."""
    found = problems(config, defaults, constraints)
    if found:
        raise BenchError(f"invalid {owner} option(s): " + "; ".join(found))
