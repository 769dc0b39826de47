"""The `specgate` command: work on a run's results and on stored baselines without booting engines.

    specgate report RESULTS_DIR            regenerate summary.md, report.html and plots/ of a run
    specgate baselines diff A B            what moved from A to B (baseline files or results dirs)
    specgate matrix DIR                    the vLLM release matrix table (ci/vllm-matrix.sh's results)
    specgate rehearse --from A --to B      two vLLM releases side by side on this machine (exit 1: worse)
    specgate bisect --good A --bad B       the first release between A and B that fails the gate
    specgate history [RESULTS_DIR ...]     every stored update of a baseline file over time (table, plots)
    specgate download --profile NAME       fetch a profile's hub models ahead of the gate
    specgate calibrate --profile NAME      the speed gate's tolerances measured on this machine

Exit codes: 0 done; 2 bad input (a missing or corrupt file; one paragraph on stderr, no traceback).
`baselines diff` exits 0 whether or not values differ, like `diff --stat`; with `--exit-code` it
exits 1 when they differ, like `git diff --exit-code`, for scripts that branch on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specgate import baselines
from specgate.errors import BaselineError, SpecgateError

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgate", description="Reports and baselines of the specgate speculative-decoding gate.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    rep = commands.add_parser("report", help="regenerate summary.md and report.html of a results directory",
                              description="Regenerate summary.md, report.html and plots/ from measurements.json "
                                          "and run.json of a run's results directory.")
    rep.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="e.g. results/20261122-031500")
    rep.add_argument("--no-step-summary", action="store_true",
                     help="do not append summary.md to $GITHUB_STEP_SUMMARY even when it is set")

    base = commands.add_parser("baselines", help="stored baselines")
    base_commands = base.add_subparsers(dest="baselines_command", required=True, metavar="COMMAND")
    diff = base_commands.add_parser(
        "diff", help="old -> new table of every value that differs between A and B",
        description="Compare two baseline files, or a baseline file and a run (a results directory's "
                    "baselines.json). Prints a markdown table of every value that moved, with its relative change.")
    diff.add_argument("old", metavar="A", type=Path, help="baseline JSON file or results directory (old side)")
    diff.add_argument("new", metavar="B", type=Path, help="baseline JSON file or results directory (new side)")
    diff.add_argument("--format", choices=("markdown", "text"), default="markdown",
                      help="markdown table (default; fits a pull-request body) or aligned text")
    diff.add_argument("--exit-code", action="store_true",
                      help="exit 1 when A and B differ, 0 when they do not (default: 0 either way)")
    matrix = commands.add_parser("matrix", help="the vLLM release matrix table of ci/vllm-matrix.sh's results",
                                 description="Print release x gate -> pass / fail / skip with the diagnosis, from "
                                             "the per-release results ci/vllm-matrix.sh writes (default results/matrix).")
    matrix.add_argument("matrix_dir", metavar="DIR", type=Path, nargs="?", default=Path("results/matrix"))
    from specgate import bisect, calibrate, download, history, rehearse

    rehearse.add_parser(commands)
    calibrate.add_parser(commands)
    bisect.add_parser(commands)
    history.add_parser(commands)
    download.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `specgate` console script; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help or a usage error; argparse has printed it
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if args.command == "report":
            return _report(args)
        if args.command == "rehearse":
            from specgate import rehearse

            return rehearse.main(args)
        if args.command in ("bisect", "history", "calibrate"):
            module = __import__(f"specgate.{args.command}", fromlist=["main"])
            return module.main(args)
        if args.command == "download":
            from specgate import download

            return download.main(args)
        if args.command == "matrix":
            from specgate.matrix import markdown

            print(markdown(args.matrix_dir), end="")
            return EXIT_OK
        return _diff(args)
    except SpecgateError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # unreadable or unwritable results: say which file, no traceback
        print(f"specgate: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE


def _report(args: argparse.Namespace) -> int:
    from specgate import report  # pandas and matplotlib only when needed

    table, run = report.load_run(args.results_dir)
    paths = report.write_report(args.results_dir, table, run, step_summary=not args.no_step_summary)
    for path in paths.values():
        print(path)
    return EXIT_OK


def load_any(path: Path) -> baselines.BaselineFile:
    """A baseline file, or a results directory's baselines.json, whatever profile and hardware it is
    for (taken from the file itself); BaselineError naming the path when it is missing or bad."""
    path = Path(path)
    if path.is_dir():
        if not (path / "baselines.json").is_file():
            raise BaselineError(
                f"{path} is a directory without baselines.json; give a baseline file "
                f"(baselines/<profile>/<hardware>.json) or the results directory of a gate run (results/<run-id>/).")
        path = path / "baselines.json"
    elif not path.is_file():
        raise BaselineError(
            f"{path} does not exist; give a baseline file (baselines/<profile>/<hardware>.json) or the results "
            f"directory of a gate run (results/<run-id>/).")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None  # baselines.load says what is wrong, in its own words
    except OSError as exc:
        raise BaselineError(f"baseline file {path} cannot be read ({exc}).") from None
    profile = data.get("profile") if isinstance(data, dict) else None
    hardware = data.get("hardware") if isinstance(data, dict) else None
    return baselines.load(path, str(profile), str(hardware))


def diff_markdown(old: baselines.BaselineFile, new: baselines.BaselineFile) -> str:
    """A markdown old -> new table grouped by gate, then method (one row per value that moved; an
    entry added or removed as a whole is one row), which vLLM measured each side when that changed,
    and the provenance of each method whose source changed."""
    changes = baselines.diff(old, new)
    lines = [f"### Baselines: `{old.path}` → `{new.path}`", ""]
    if (old.profile, old.hardware) != (new.profile, new.hardware):
        lines += [f"Note: A is profile {old.profile} on {old.hardware}, B is profile {new.profile} on "
                  f"{new.hardware}.", ""]
    if moved := baselines.upgrade_line(old, new):
        lines += [f"Measured by: {moved.replace(' -> ', ' → ')}.", ""]
    if not changes:
        return "\n".join(lines + ["No value changed."]) + "\n"
    lines += ["| method | kind | key | value | old | new | change |", "| --- | --- | --- | --- | ---: | ---: | ---: |"]
    for (method, kind, key), group in baselines.grouped(changes):
        if all(c.old is None for c in group) or all(c.new is None for c in group):
            state = "new entry" if group[0].old is None else "removed entry"
            lines.append(f"| {method} | {kind} | {key} | ({len(group)} values) | – | – | {state} |")
            continue
        for c in group:
            rel = ("new" if c.old is None else "removed" if c.new is None
                   else "–" if c.relative is None else f"{c.relative:+.1%}")
            lines.append(f"| {method} | {kind} | {key} | {c.field} | {_num(c.old)} | {_num(c.new)} | {rel} |")
    moved = sorted({c.method for c in changes})
    sources = [(m, old.source(m), new.source(m)) for m in moved
               if m in old.methods and m in new.methods and old.source(m) != new.source(m)]
    if sources:
        lines += ["", "Provenance:", ""] + [f"- {m}: {a} → {b}" for m, a, b in sources]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "–" if x is None else f"{x:.4g}"


def _diff(args: argparse.Namespace) -> int:
    old, new = load_any(args.old), load_any(args.new)
    if args.format == "text":
        print(baselines.format_diff(baselines.diff(old, new), f"baselines {old.path} -> {new.path}"))
    else:
        print(diff_markdown(old, new), end="")
    if args.exit_code and baselines.diff(old, new):
        return EXIT_DIFFERENT
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
