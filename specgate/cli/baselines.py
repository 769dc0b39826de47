"""`specgate baselines diff A B`: every stored value that moved from A to B (baseline files or results
directories), as a markdown table for a pull request or as aligned text."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from specgate.cli import spelling
from specgate.errors import BaselineError
from specgate.formatting import num
from specgate.store import baselines


def add_parser(commands) -> None:
    base = commands.add_parser("baselines", help="stored baselines")
    base_commands = base.add_subparsers(dest="baselines_command", required=True, metavar="COMMAND")
    diff = base_commands.add_parser(
        "diff",
        help="old -> new table of every value that differs between A and B",
        description="Compare two baseline files, or a baseline file and a run (a results directory's "
        "baselines.json). Prints a markdown table of every value that moved, with its relative change.",
    )
    diff.add_argument("old", metavar="A", type=Path, help="baseline JSON file or results directory (old side)")
    diff.add_argument("new", metavar="B", type=Path, help="baseline JSON file or results directory (new side)")
    diff.add_argument(
        "--format",
        choices=("markdown", "text"),
        default="markdown",
        help="markdown table (default; fits a pull-request body) or aligned text",
    )
    diff.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when A and B differ, 0 when they do not (default: 0 either way)",
    )


def main(args: argparse.Namespace) -> int:
    old, new = load_any(args.old), load_any(args.new)
    if args.format == "text":
        print(baselines.format_diff(baselines.diff(old, new), f"baselines {old.path} -> {new.path}", old, new))
    else:
        print(diff_markdown(old, new), end="")
    return 1 if args.exit_code and (baselines.diff(old, new) or baselines.model_lines(old, new)) else 0


def load_any(path: Path) -> baselines.BaselineFile:
    """A baseline file, or a results directory's baselines.json, whatever profile and hardware it is
    for (taken from the file itself); BaselineError naming the path when it is missing or bad."""
    path = Path(path)
    if path.is_dir():
        if not (path / "baselines.json").is_file():
            raise BaselineError(
                f"{path} is a directory without baselines.json; give a baseline file "
                f"(baselines/<profile>/<hardware>.json) or the results directory of a gate run (results/<run-id>/)."
            )
        path = path / "baselines.json"
    elif not path.is_file():
        raise BaselineError(
            f"{path} does not exist; give a baseline file (baselines/<profile>/<hardware>.json) or the results "
            f"directory of a gate run (results/<run-id>/)."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None  # baselines.load says what is wrong, in its own words
    except OSError as exc:
        raise BaselineError(f"baseline file {path} cannot be read ({exc}).") from None
    profile = data.get("profile") if isinstance(data, dict) else None
    hardware = data.get("hardware") if isinstance(data, dict) else None
    return baselines.load(path, str(profile), str(hardware), spelling())


def diff_markdown(old: baselines.BaselineFile, new: baselines.BaselineFile) -> str:
    """A markdown old -> new table grouped by gate, then method (one row per value that moved; an
    entry added or removed as a whole is one row), which vLLM measured each side when that changed, the
    models (revisions) that changed, and the provenance of each method whose source changed."""
    changes = baselines.diff(old, new)
    lines = [f"### Baselines: `{old.path}` → `{new.path}`", ""]
    if (old.profile, old.hardware, old.identity) != (new.profile, new.hardware, new.identity):
        a, b = (f.machine if f.identity else f.hardware for f in (old, new))
        lines += [f"Note: A is profile {old.profile} on {a}, B is profile {new.profile} on {b}."]
        if old.identity != new.identity:
            lines += [f"A's machine: {old.describe_machine()}; B's: {new.describe_machine()}."]
        lines += [""]
    if moved := baselines.upgrade_line(old, new):
        lines += [f"Measured by: {moved.replace(' -> ', ' → ')}.", ""]
    if models := baselines.model_lines(old, new):
        lines += ["Models that changed (a figure that moved may be the weights, not vLLM):", ""]
        lines += [f"- {line.replace(' -> ', ' → ')}" for line in models] + [""]
    if not changes:
        return "\n".join(lines + ["No value changed."]) + "\n"
    lines += ["| method | kind | key | value | old | new | change |", "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for (method, kind, key), group in baselines.grouped(changes):
        if all(c.old is None for c in group) or all(c.new is None for c in group):
            state = "new entry" if group[0].old is None else "removed entry"
            lines.append(f"| {method} | {kind} | {key} | ({len(group)} values) | – | – | {state} |")
            continue
        for c in group:
            rel = (
                "new"
                if c.old is None
                else "removed"
                if c.new is None
                else "–"
                if c.relative is None
                else f"{c.relative:+.1%}"
            )
            lines.append(f"| {method} | {kind} | {key} | {c.field} | {num(c.old, '–')} | {num(c.new, '–')} | {rel} |")
    moved = sorted({c.method for c in changes})
    sources = [
        (m, old.source(m), new.source(m))
        for m in moved
        if m in old.methods and m in new.methods and old.source(m) != new.source(m)
    ]
    if sources:
        lines += ["", "Provenance:", ""] + [f"- {m}: {a} → {b}" for m, a, b in sources]
    return "\n".join(lines) + "\n"
