"""Declared settings: a TOML table's keys, types, bounds and defaults written once, on the dataclass
fields that hold them, and the reader that holds a table to them.

    @dataclass(frozen=True)
    class Speedup:
        trials: int = setting(5, int, bound=at_least_2, doc="paired trials per engine and level")
        prompts: tuple = setting((), list, parse=..., doc="the load's own prompts")

`setting(default, kind, ...)` is a `dataclasses.field` whose metadata says how the key is written in
TOML (`kind`: the TOML type; `key`: a dotted path when the value sits in a shared table, e.g.
"engine.boot_timeout_s"), what bounds it (`bound(value) -> problem or None`), whether it changes what
a run measures (`measures`: the baseline history's fingerprint leaves out what does not) and what it
means (`doc`). A field that is a table of its own names its dataclass (`table=`). A field without a
setting is derived (a path, a name), never read from the file.

`Checker` says every problem in one located paragraph, `profile FILE: key 'speedup.trials' must be
>= 2 (...)`, with a suggestion where a key or name is close to a known one. Nothing here reads a file.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specgate.errors import ProfileError

Bound = Callable[[Any], "str | None"]


def setting(
    default: Any = dataclasses.MISSING,
    kind: type = object,
    *,
    key: str = "",
    bound: Bound | None = None,
    doc: str = "",
    measures: bool = True,
    table: type | None = None,
    required: bool | str = False,
    parse: Callable | None = None,
    factory: Callable | None = None,
) -> Any:
    """A dataclass field read from TOML: see the module's docstring. A mutable default (a dict, a table's
    dataclass) is given as `factory`; `required` may be the problem to say when the key is missing."""
    metadata = {
        "kind": kind,
        "key": key,
        "bound": bound,
        "doc": doc,
        "measures": measures,
        "table": table,
        "required": required,
        "parse": parse,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def settings(cls) -> list[dataclasses.Field]:
    """The fields of `cls` read from TOML, in declaration order."""
    return [f for f in dataclasses.fields(cls) if "kind" in f.metadata]


def key_of(f: dataclasses.Field) -> str:
    """The dotted TOML key of a setting, relative to its table."""
    return f.metadata["key"] or f.name


def allowed(cls, group: str = "") -> dict[str, type]:
    """The keys of `cls`'s table (or of its shared sub-table `group`, e.g. 'engine') and their TOML types."""
    out: dict[str, type] = {}
    for f in settings(cls):
        head, _, rest = key_of(f).partition(".")
        if group:
            if head == group and rest:
                out[rest] = f.metadata["kind"]
        else:
            out[head] = dict if rest or f.metadata["table"] else f.metadata["kind"]
    return out


def not_measuring(cls) -> set[str]:
    """The top-level keys of `cls`'s table none of whose settings changes what a run measures."""
    heads: dict[str, bool] = {}
    for f in settings(cls):
        head = key_of(f).partition(".")[0]
        heads[head] = heads.get(head, False) or f.metadata["measures"]
    return {head for head, measures in heads.items() if not measures}


def did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Checker:
    """Raises ProfileError messages that name the file and the dotted key."""

    def __init__(self, path: Path, what: str = "profile"):
        self.path, self.what = path, what

    def fail(self, key: str, problem: str) -> ProfileError:
        where = f"key '{key}'" if key else "the file"
        return ProfileError(f"{self.what} {self.path}: {where} {problem}")

    def table(self, data: dict, allowed: dict[str, type], prefix: str) -> None:
        """Every key of `data` is one of `allowed` and of its type (a float may be written as an int)."""
        for key, value in data.items():
            dotted = f"{prefix}{key}"
            if key not in allowed:
                raise self.fail(
                    dotted,
                    f"is not a known key{did_you_mean(key, allowed)}; allowed here: {', '.join(sorted(allowed))}.",
                )
            want = allowed[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if want is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise self.fail(dotted, f"must be a {want.__name__}, got {type(value).__name__} {value!r}.")

    def positive(self, key: str, value: int | float, allow_zero: bool = False) -> None:
        if problem := (non_negative if allow_zero else positive)(value):
            raise self.fail(key, problem)

    def bounded(self, key: str, value: Any, bound: Bound | None) -> None:
        if bound is not None and (problem := bound(value)):
            raise self.fail(key, problem)

    def read(self, cls, data: dict, prefix: str, done: dict[str, Any] | None = None) -> dict[str, Any]:
        """The values of `cls`'s settings found in its table `data` (keys and types checked, bounds held,
        floats converted; a table of its own read into its dataclass), as keyword arguments for `cls`.
        A setting with a `parse` hook is handed `(checker, dotted key, value, values read so far)` and
        returns the value to hold. Absent settings are left out: the dataclass's default stands."""
        self.table(data, allowed(cls), prefix)
        for f in settings(cls):
            if (required := f.metadata["required"]) and key_of(f) not in data:
                raise self.fail(
                    prefix + key_of(f), required if isinstance(required, str) else "is required but missing."
                )
        for group in dict.fromkeys(key_of(f).partition(".")[0] for f in settings(cls) if "." in key_of(f)):
            if isinstance(data.get(group), dict):
                self.table(data[group], allowed(cls, group), f"{prefix}{group}.")
        values = dict(done or {})
        for f in settings(cls):
            head, _, rest = key_of(f).partition(".")
            table = data.get(head, {}) if rest else data
            name = rest or head
            if name not in table:
                continue
            value, dotted = table[name], prefix + key_of(f)
            if f.metadata["parse"] is not None:
                values[f.name] = f.metadata["parse"](self, dotted, value, values)
            elif f.metadata["table"] is not None:
                values[f.name] = f.metadata["table"](**self.read(f.metadata["table"], value, dotted + "."))
            else:
                self.bounded(dotted, value, f.metadata["bound"])
                values[f.name] = float(value) if f.metadata["kind"] is float else value
        return values


def held_as_float(bound: Bound) -> Callable:
    """A `parse` hook for a float setting bounded as the float it is held as (a deadline written `0`
    is said as 0.0)."""

    def parse(check: Checker, key: str, value, values) -> float:
        check.bounded(key, float(value), bound)
        return float(value)

    return parse


# -- bounds ------------------------------------------------------------------------------------------
def positive(value) -> str | None:
    return None if value > 0 else f"must be > 0, got {value!r}."


def non_negative(value) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value!r}."


def relative(value) -> str | None:
    """A relative tolerance: >= 0 and < 1."""
    if problem := non_negative(value):
        return problem
    return None if value < 1 else f"is a relative tolerance and must be < 1, got {value!r}."


def rule(test: Callable[[Any], Any], problem: str) -> Bound:
    """A bound that says its rule: `problem` with the value after 'got' ('must be >= 2 (...), got 1.')."""
    return lambda value: None if test(value) else f"{problem}, got {value!r}."


def share(what: str) -> Bound:
    """A share in [0, 1] ('is a share of the prompts in [0, 1], got 1.5.')."""
    return lambda value: None if 0 <= value <= 1 else f"is a share of {what} in [0, 1], got {value!r}."


def one_of(choices, said: str = "") -> Bound:
    """One of `choices` ('must be one of [...], got 'x'.', or `said` in place of the list)."""
    return lambda value: None if value in choices else f"must be {said or f'one of {sorted(choices)}'}, got {value!r}."
