"""`specgate report RESULTS_DIR`: summary.md, report.html and plots/ rebuilt from a run's results directory."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(commands) -> None:
    p = commands.add_parser(
        "report",
        help="regenerate summary.md and report.html of a results directory",
        description="Regenerate summary.md, report.html and plots/ from measurements.json "
        "and run.json of a run's results directory.",
    )
    p.add_argument("results_dir", metavar="RESULTS_DIR", type=Path, help="e.g. results/20261122-031500")
    p.add_argument(
        "--no-step-summary",
        action="store_true",
        help="do not append summary.md to $GITHUB_STEP_SUMMARY even when it is set",
    )


def main(args: argparse.Namespace) -> int:
    from specgate import report  # pandas and matplotlib only when needed

    table, run = report.load_run(args.results_dir)
    paths = report.write_report(args.results_dir, table, run, step_summary=not args.no_step_summary)
    for path in paths.values():
        print(path)
    return 0
