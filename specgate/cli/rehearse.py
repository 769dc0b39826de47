"""`specgate rehearse --from A --to B`: two vLLM releases side by side on this machine (specgate.release.rehearse)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specgate.cli import add_methods, add_profile, add_root, chosen, spelling


def main(args: argparse.Namespace) -> int:
    from specgate.profile import find_profile, load_profile
    from specgate.release import rehearse, venvs

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root, spelling()), root)
    methods = [profile.baseline, *chosen(profile, args)]
    old = (args.old, venvs.release_python(root, args.old, profile.hardware, args.from_python))
    new = (args.new, venvs.release_python(root, args.new, profile.hardware, args.to_python))
    out = Path(args.out or root / "results" / f"rehearse-{args.old}-to-{args.new}-{time.strftime('%Y%m%d-%H%M%S')}")
    started = time.time()
    rehearsal = rehearse.run(profile, root, out, old, new, methods)
    for line in rehearsal.lines():
        print(line)
    print(f"results: {rehearsal.paths['summary']}, {rehearsal.paths['html']} ({time.time() - started:.0f} s)")
    return 1 if rehearse.worse(rehearsal) else 0


def add_parser(commands) -> None:
    p = commands.add_parser(
        "rehearse",
        help="run two vLLM releases side by side and compare them directly",
        description="Boot the old and the new vLLM release on this machine in one run (each from "
        "its own virtualenv, as servers) and compare them paired: greedy outputs, acceptance per "
        "category, throughput, memory. Exit 1 when something got worse.",
    )
    p.add_argument(
        "--from", dest="old", required=True, metavar="RELEASE", help="the release you run today, e.g. 0.31.0"
    )
    p.add_argument("--to", dest="new", required=True, metavar="RELEASE", help="the release you move to, e.g. 0.32.0")
    add_profile(p)
    add_methods(p, "methods of the profile (default: all but its canaries); the baseline always runs")
    p.add_argument(
        "--out",
        default=None,
        type=Path,
        metavar="DIR",
        help="results directory (default results/rehearse-A-to-B-<time>)",
    )
    p.add_argument(
        "--from-python",
        type=Path,
        default=None,
        metavar="PATH",
        help="the old release's python (default: its .venvs/ venv)",
    )
    p.add_argument(
        "--to-python",
        type=Path,
        default=None,
        metavar="PATH",
        help="the new release's python (default: its .venvs/ venv)",
    )
    add_root(p)
