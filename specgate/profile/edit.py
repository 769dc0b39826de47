"""Pins written into a profile's TOML text (`specgate download --pin --write`), or the lines to paste.

    paste_lines(pins)     the TOML lines, grouped by where each goes
    apply(text, pins)     the file's text with every pin set in place, comments and layout kept; the edit is
                          verified (the result must parse as the original document plus exactly the pins),
                          else CannotEdit says why and nothing is written

A pin's key is dotted, as the profile's errors name keys: `target_revision` (a top-level key, written
above the first [table]), `methods.eagle3.speculative_config.revision` (inside that method's inline
speculative_config table, or in a [methods.eagle3.speculative_config] table where the file has one).
"""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass


class CannotEdit(ValueError):
    """The file is laid out in a way this edit does not handle safely: paste the printed lines instead."""


@dataclass(frozen=True)
class Pin:
    key: str  # dotted profile key, e.g. methods.eagle3.speculative_config.revision
    value: str  # a commit
    note: str = ""  # said in the line's comment (the repository)

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(self.key.split("."))

    def line(self) -> str:
        return f'{self.path[-1]} = "{self.value}"' + (f"  # {self.note}" if self.note else "")


def paste_lines(pins: list[Pin]) -> list[str]:
    """Where each pin goes and its line: top-level keys first, then one group per table."""
    groups: dict[tuple[str, ...], list[Pin]] = {}
    for pin in pins:
        groups.setdefault(pin.path[:-1], []).append(pin)
    out = []
    for parent, these in groups.items():
        if not parent:
            out.append("# at the top level, above the first [table]:")
        elif parent[0] == "methods" and len(parent) > 2:
            inner = ".".join(parent[2:])
            out.append(f"# in [methods.{parent[1]}], inside its {inner} = {{ ... }}:")
        else:
            out.append(f"# in [{'.'.join(parent)}]:")
        out += [pin.line() for pin in these]
    return out


def _header(line: str) -> tuple[str, ...] | None:
    """The table path of a `[a.b]` header line, else None."""
    stripped = line.strip()
    if not stripped.startswith("[") or stripped.startswith("[["):
        return None
    try:
        data = tomllib.loads(stripped)
    except tomllib.TOMLDecodeError:
        return None
    path = []
    while isinstance(data, dict) and len(data) == 1:
        key, data = next(iter(data.items()))
        path.append(key)
    return tuple(path) if path and data == {} else None


def _key_of(line: str) -> tuple[str, ...] | None:
    """The dotted key of a `key = value` line, else None."""
    match = re.match(r'^\s*([A-Za-z0-9_\-."\' ]+?)\s*=', line)
    if not match:
        return None
    try:
        data = tomllib.loads(f"{match.group(1)} = 0")
    except tomllib.TOMLDecodeError:
        return None
    path = []
    while isinstance(data, dict):
        key, data = next(iter(data.items()))
        path.append(key)
    return tuple(path)


def _sections(lines: list[str]) -> list[tuple[tuple[str, ...], int, int]]:
    """(table path, first line, end) of the root (path ()) and of every [table] section."""
    starts = [((), 0)] + [(path, i) for i, line in enumerate(lines) if (path := _header(line)) is not None]
    return [
        (path, start, starts[n + 1][1] if n + 1 < len(starts) else len(lines)) for n, (path, start) in enumerate(starts)
    ]


def _content_end(lines: list[str], start: int, end: int) -> int:
    """Where a line added at the end of a section goes: after its last line that is not blank or a comment."""
    at = end
    while at > start and (not lines[at - 1].strip() or lines[at - 1].lstrip().startswith("#")):
        at -= 1
    return max(at, start + (1 if start else 0))


def _closing_brace(line: str, opening: int) -> int:
    """The index of the `}` that closes the inline table opened at `opening` on this line (strings skipped)."""
    depth, i, quote = 0, opening, ""
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        elif ch == "#":
            break
        i += 1
    raise CannotEdit(f"the inline table on line {line.strip()[:60]!r} does not close on its line")


def _set(lines: list[str], pin: Pin) -> None:
    parent, name = pin.path[:-1], pin.path[-1]
    sections = _sections(lines)
    for path, start, end in sections:  # a section of the parent table itself: a line of its own
        if path == parent:
            for i in range(start + (1 if start else 0), end):
                if _key_of(lines[i]) == (name,):
                    lines[i] = pin.line()
                    return
            lines.insert(_content_end(lines, start, end), pin.line())
            return
    for path, start, end in sorted(sections, key=lambda s: -len(s[0])):  # the parent inside a section
        rest = parent[len(path) :]
        if parent[: len(path)] != path or not rest:
            continue
        dotted = None  # the parent written as dotted keys (speculative_config.method = ...): one line more
        for i in range(start + (1 if start else 0), end):
            key = _key_of(lines[i]) or ()
            if key == rest:
                lines[i] = _inline_set(lines[i], i, name, pin.value)
                return
            if key[: len(rest)] == rest and len(key) > len(rest):
                dotted = i
        if dotted is not None:
            lines.insert(dotted + 1, ".".join((*rest, pin.line())))
            return
    raise CannotEdit(f"no table or line of the file sets {'.'.join(parent)}")


def _inline_set(line: str, number: int, name: str, value: str) -> str:
    """`line` (`key = { ... }`) with `name = "value"` set inside its inline table."""
    eq = line.index("=")
    opening = eq + 1 + len(line[eq + 1 :]) - len(line[eq + 1 :].lstrip())
    if opening >= len(line) or line[opening] != "{":
        raise CannotEdit(f"line {number + 1} ({line.strip()[:60]!r}) is not an inline table")
    close = _closing_brace(line, opening)
    inner, quoted = line[opening + 1 : close], f'"{value}"'
    existing = re.search(rf'(?:^|[{{,\s]){re.escape(name)}\s*=\s*("[^"]*"|\'[^\']*\')', inner)
    if existing:
        inner = inner[: existing.start(1)] + quoted + inner[existing.end(1) :]
    elif inner.strip():
        inner = inner.rstrip() + f", {name} = {quoted} "
    else:
        inner = f" {name} = {quoted} "
    return line[: opening + 1] + inner + line[close:]


def apply(text: str, pins: list[Pin]) -> str:
    """`text` with every pin set; CannotEdit when the layout is not one this handles or the result would not
    read as the original document plus exactly the pins."""
    try:
        before = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CannotEdit(f"the file is not valid TOML ({exc})") from None
    lines = text.splitlines()
    expected = copy.deepcopy(before)
    for pin in pins:
        _set(lines, pin)
        table = expected
        for part in pin.path[:-1]:
            table = table.setdefault(part, {})
        table[pin.path[-1]] = pin.value
    edited = "\n".join(lines) + ("\n" if text.endswith("\n") else "")
    try:
        after = tomllib.loads(edited)
    except tomllib.TOMLDecodeError as exc:
        raise CannotEdit(f"the edited file would not parse ({exc})") from None
    if after != expected:
        raise CannotEdit("the edited file would not read as the original plus exactly the pins")
    return edited
