"""`specgate calibrate --profile P`: the speed gate's tolerances measured on this machine
(specgate.release.calibrate)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from specgate.cli import add_methods, add_profile, add_root, chosen, spelling
from specgate.release import calibrate


def main(args: argparse.Namespace) -> int:
    from specgate.profile import find_profile, load_profile

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root, spelling()), root)
    if note := calibrate.restore_kept(root, profile.baselines_name):
        print(note, flush=True)
    names = [m.name for m in chosen(profile, args)]
    if args.runs < 2:
        raise calibrate.CalibrationError(
            f"--runs {args.runs}: the A/A spread needs at least 2 judged runs (10 give a 0-of-10 false-alarm rate)."
        )
    out = Path(args.out or root / "results" / f"calibrate-{profile.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    slowed = names if args.slowed is None else [n.strip() for n in args.slowed.split(",") if n.strip()]
    if unknown := [n for n in slowed if n not in names]:
        raise calibrate.CalibrationError(
            f"--slowed {','.join(unknown)}: not among the calibrated methods ({', '.join(names)})."
        )
    return calibrate.calibrate(root, profile, names, slowed, args.runs, args.slowdown, out, args.write)


def add_parser(commands) -> None:
    p = commands.add_parser(
        "calibrate",
        help="measure the speed gate's tolerances on this machine",
        description=calibrate.__doc__.split("\n\n")[0],
    )
    add_profile(p)
    p.add_argument(
        "--runs", type=int, default=10, metavar="N", help="judged A/A runs after the storing one (default 10)"
    )
    add_methods(p, "methods to calibrate (default: all but canaries)", canaries=False)
    p.add_argument(
        "--slowdown",
        type=float,
        default=0.074,
        metavar="SHARE",
        help="the slowed copies sleep this share of a step per drafting call (default 0.074: about a 10 %% "
        "loss at C = 1 on cpu-tiny's ngram)",
    )
    p.add_argument(
        "--slowed",
        default=None,
        metavar="A,B",
        help="the methods that get a slowed copy (default: every calibrated method; '' for none: A/A only)",
    )
    p.add_argument("--write", action="store_true", help="write the tolerances beside this machine's baselines")
    p.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="results (default results/calibrate-<profile>-<time>)"
    )
    add_root(p)
