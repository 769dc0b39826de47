"""`specgate bisect --good A --bad B`: the first vLLM release (or wheel) between a good and a bad one that fails
the gate (specgate.release.bisect)."""

from __future__ import annotations

import argparse
from pathlib import Path

from specgate.cli import add_methods, add_profile, add_root, chosen, spelling
from specgate.gates import EQUIVALENCE, LIFECYCLE
from specgate.release.bisect.candidates import file_candidates, index_versions, package_of, releases_between
from specgate.release.bisect.steps import CHASEABLE, RUN_GATES, BisectError
from specgate.store import revisions


def main(args: argparse.Namespace) -> int:
    """`specgate bisect ...`: the candidates and gates from the options, then the session
    (specgate.release.bisect.session)."""
    from specgate.profile import find_profile, load_profile
    from specgate.release.bisect.session import bisect

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root, spelling()), root)
    package = package_of(profile.hardware)
    methods = [m.name for m in chosen(profile, args)]
    gates = [g.strip() for g in args.gate.split(",") if g.strip()] if args.gate else []
    unknown = [g for g in gates if g not in CHASEABLE]
    if unknown:
        raise BisectError(f"--gate {','.join(unknown)}: not a gate; choose from {', '.join(CHASEABLE)}.")
    if args.candidates:
        candidates = file_candidates(args.candidates, package)
        good, bad = args.good or candidates[0].label, args.bad or candidates[-1].label
    else:
        if not (args.good and args.bad):
            raise BisectError(
                "give --good RELEASE and --bad RELEASE (releases of the package index), or --candidates FILE."
            )
        candidates = releases_between(index_versions(package, args.pre), args.good, args.bad, package, args.pre)
        good, bad = args.good, args.bad
    run_gates = [g for g in RUN_GATES if not gates or g in gates or g in (EQUIVALENCE, LIFECYCLE)]
    out = Path(args.out or root / "results" / f"bisect-{profile.name}-{good}-{bad}")
    held = revisions.held(profile, profile.select(methods), root)  # the models every step must load
    settings = {
        "package": package,
        "profile": profile.name,
        "methods": methods,
        "gates": gates,
        "run_gates": run_gates,
        "models": held,
    }
    return bisect(
        root,
        out,
        profile,
        methods,
        settings,
        candidates,
        good,
        bad,
        restart=args.restart,
        step_timeout=args.step_timeout,
        lock=args.lock,
    )


def add_parser(commands) -> None:
    p = commands.add_parser(
        "bisect",
        help="find the first vLLM release (or wheel) between a good and a bad one that fails the gate",
        description="Bisect over the vLLM releases between --good and --bad (or the wheels of --candidates): each "
        "step is a gate run from that release's own venv, judged against the good release's figures "
        "measured first in the same session. Ends with the first bad release, the previous good one "
        "and what moved. Resumable: rerun the same command after an interruption.",
    )
    p.add_argument(
        "--good", metavar="RELEASE", help="a release that passes (with --candidates: default the first line)"
    )
    p.add_argument("--bad", metavar="RELEASE", help="a release that fails (with --candidates: default the last line)")
    p.add_argument(
        "--candidates",
        type=Path,
        metavar="FILE",
        help="one wheel file, URL or pip requirement per line, oldest first (e.g. nightly per-commit wheels)",
    )
    p.add_argument("--pre", action="store_true", help="include the index's pre-releases between --good and --bad")
    add_profile(p)
    add_methods(p, "methods of the profile (default: all but its canaries; the baseline engine always runs)")
    p.add_argument(
        "--gate",
        default="",
        metavar="G[,G]",
        help=f"the failure to chase ({', '.join(CHASEABLE)}); default: whatever the bad release fails. "
        "Runs only these gates (and equivalence, lifecycle) in every step",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="session directory with the state file (default results/bisect-<profile>-<good>-<bad>)",
    )
    p.add_argument("--restart", action="store_true", help="discard the state in --out and start over")
    p.add_argument(
        "--step-timeout",
        type=float,
        default=3600.0,
        metavar="S",
        help="stop a step's gate run after S seconds and count it as a skip (default 3600)",
    )
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="FILE",
        help="take this file lock (flock) around each step's gate run, so engine runs on a shared machine "
        "take turns; venv builds do not hold it",
    )
    add_root(p)
