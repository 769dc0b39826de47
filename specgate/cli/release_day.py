"""`specgate release-day R`: a new CUDA vLLM release's sources fetched, the contract and V2 sampler
property suites run against them, and what changed for speculative decoding since the last supported
release, with what a runner's owner must do (specgate.release.release_day). The report is printed as
each part is ready and written to OUT/report.md beside the suites' JUnit files and logs.

Exit codes: 0 every suite that ran passed; 1 a suite failed or could not run; 2 bad input (not a
release number, not on PyPI, a damaged tree, nothing to compare with); 3 PyPI unreachable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specgate.cli import add_root


def add_parser(commands) -> None:
    p = commands.add_parser(
        "release-day",
        help="a new CUDA vLLM release: fetch its sources, run the contract and V2 sampler suites, say what changed",
        description="Fetch CUDA vLLM RELEASE's Python sources (.venvs/vllm-cuda-src/RELEASE), run the contract "
        "suite and the V2 sampler property suite against them, and print what changed for speculative decoding "
        "since the last supported release (methods, config keys, model runners, metric names, sampler "
        "signatures, V2's speculators) and what a runner's owner must do. Exit 0: the suites passed; 1: a suite "
        "failed; 2: bad input (not on PyPI, a damaged tree); 3: PyPI unreachable.",
    )
    p.add_argument("release", metavar="RELEASE", help="the new CUDA vLLM release, e.g. 0.34.0")
    p.add_argument(
        "--since",
        default="",
        metavar="R",
        help="compare with this release (default: the newest supported one before RELEASE)",
    )
    p.add_argument("--no-contract", action="store_true", help="do not run the contract suite (tests/contract)")
    p.add_argument(
        "--no-properties",
        action="store_true",
        help="do not run the V2 sampler property suite (minutes on the interpreter)",
    )
    p.add_argument(
        "--suite-timeout", type=float, default=3600, metavar="S", help="stop a suite after S seconds (default 3600)"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="report, JUnit files and logs (default results/release-day-RELEASE)",
    )
    add_root(p)


def main(args: argparse.Namespace) -> int:
    from specgate.release import day_report, release_day, suites

    root = Path(args.root).resolve()
    out = args.out or root / "results" / f"release-day-{args.release}"
    try:
        day = release_day.prepare(args.release, root, since=args.since)
    except release_day.ReleaseDayError as exc:
        print(f"{exc}", file=sys.stderr)
        return exc.exit_code
    parts = [day_report.header(day, root, bool(args.since)), day_report.changes(day), day_report.suites_heading(day)]
    print("".join(parts), end="", flush=True)
    wanted = [n for n in suites.SUITES if not getattr(args, f"no_{n}")]
    plan = suites.Plan(root, out, args.suite_timeout)
    for name in wanted:
        parts.append(day_report.suite(release_day.run_suite(day, name, plan)))
        print(parts[-1], end="", flush=True)
    parts.append(day_report.verdict(day, [n for n in suites.SUITES if n not in wanted]))
    print(parts[-1], end="")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("".join(parts), encoding="utf-8")
    return day.exit_code
