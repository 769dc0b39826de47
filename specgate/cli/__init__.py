"""The `specgate` command: work on a run's results and on stored baselines without booting engines.

    specgate report RESULTS_DIR            regenerate summary.md, report.html and plots/ of a run
    specgate baselines diff A B            what moved from A to B (baseline files or results dirs)
    specgate matrix DIR                    the vLLM release matrix table (ci/vllm-matrix.sh's results)
    specgate rehearse --from A --to B      two vLLM releases side by side on this machine (exit 1: worse)
    specgate calibrate --profile NAME      the speed gate's tolerances measured on this machine
    specgate bisect --good A --bad B       the first release between A and B that fails the gate
    specgate history [RESULTS_DIR ...]     every stored update of a baseline file over time (table, plots)
    specgate download --profile NAME       fetch a profile's hub models ahead of the gate
    specgate release-day RELEASE           a new CUDA vLLM: its sources, the contract and V2 sampler suites on
                                           them, what changed for speculative decoding (exit 1: a suite failed)

Each command is one module with `add_parser(commands)` and `main(args) -> exit code`, named in
`COMMANDS`; importing them is cheap (pandas, matplotlib, torch and vLLM load inside `main`).

Exit codes: 0 done; 2 bad input (a missing or corrupt file; one paragraph on stderr, no traceback);
release-day adds 1 (a suite failed on the release) and 3 (PyPI unreachable).
`baselines diff` exits 0 whether or not values differ, like `diff --stat`; with `--exit-code` it
exits 1 when they differ, like `git diff --exit-code`, for scripts that branch on it.

Neighbours: every command is a thin layer over the package that does its work (report/, store/,
release/, profile/); nothing imports cli/ but `python -m specgate.cli` and the `specgate` script.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from specgate.errors import SpecgateError

EXIT_OK, EXIT_DIFFERENT, EXIT_USAGE = 0, 1, 2
# command -> the module that defines it, in the order `specgate --help` lists them
COMMANDS = {
    "report": "specgate.cli.report",
    "baselines": "specgate.cli.baselines",
    "matrix": "specgate.cli.matrix",
    "rehearse": "specgate.cli.rehearse",
    "calibrate": "specgate.cli.calibrate",
    "bisect": "specgate.cli.bisect",
    "history": "specgate.cli.history",
    "download": "specgate.cli.download",
    "release-day": "specgate.cli.release_day",
}


def add_profile(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="cpu-tiny", metavar="NAME|PATH", help="profile (default cpu-tiny)")


def add_methods(p: argparse.ArgumentParser, what: str, canaries: bool = True) -> None:
    """--methods (and --canaries): which of the profile's methods a command runs."""
    p.add_argument("--methods", default="", metavar="A,B", help=what)
    if canaries:
        p.add_argument("--canaries", action="store_true", help="include the profile's canaries in the default methods")


def add_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=".", type=Path, metavar="DIR", help="the specgate checkout (default: .)")


def chosen(profile, args: argparse.Namespace) -> list:
    """The methods --methods names, else every method of the profile but its canaries (deliberately worse
    configurations for the stored-baseline gates), which --canaries adds."""
    names = [n.strip() for n in args.methods.split(",") if n.strip()] if args.methods else None
    selected = profile.select(names, spelling())
    return [m for m in selected if names or getattr(args, "canaries", False) or not m.canary_of]


def spelling():
    """How a command's user spells a gate run's settings in what the layers below say (specgate.settings): the
    commands' own --profile and --methods; the others as the gate run, pytest, spells them."""
    from specgate.plugin.options import SPELLING

    return SPELLING.but(profile="--profile", methods="--methods")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specgate", description="Reports and baselines of the specgate speculative-decoding gate."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `specgate` console script; returns the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help or a usage error; argparse has printed it
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return importlib.import_module(COMMANDS[args.command]).main(args)
    except SpecgateError as exc:
        print(f"specgate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # unreadable or unwritable results: say which file, no traceback
        print(f"specgate: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
