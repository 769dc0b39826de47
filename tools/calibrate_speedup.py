"""How small a speedup loss the gate detects, measured: repeated gate runs of a calibration profile.

    python -m tools.calibrate_speedup [--profile cpu-tiny-calibration] [--runs 10] [--out results/calibration]

The profile has a method judged against its own stored speedups (A/A: every run must pass) and a
deliberately slower copy of it marked `canary_of = { speedup = ... }` (must fail the original's
floor). The first run stores the baselines (--update-baselines, in a scratch copy of the checkout's
baselines directory, so committed files stay as they are); every later run is judged. Printed per
concurrency level: A/A false alarms, detections of the slowed copy, the measured ratio of the two,
the interval's upper half-width and the trials the sequential decision used; the same counts for each
check on its own (the speedup floor, the step-cost ceiling), from the values and bounds in each run's
measurements; and each run's wall time.

The step-cost check beside it (the worker's timers: draft_cost, a drafting call over a verification
forward of the same engine) is reported per level the same way, whatever the profile's tolerance:
how far the A/A method's draft_cost moved from the update run's (the smallest `draft_cost_tol` with
no false alarm), how much the slowed copy's exceeded the original's in the same run (the injected
cost), and how many slowed runs a tolerance at that A/A limit would catch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def run_gate(root: Path, profile: str, out: Path, update: bool) -> tuple[dict, list[dict], float]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:randomly", "-k", "speedup or lifecycle",
           "--specgate-profile", profile, "--specgate-out", str(out), "--benchmark-disable"]
    if update:
        cmd.append("--update-baselines")
    start = time.monotonic()
    subprocess.run(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - start
    run = json.loads((out / "run.json").read_text())
    table = json.loads((out / "measurements.json").read_text())
    return run, table, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.calibrate_speedup", description=__doc__.split("\n")[0])
    parser.add_argument("--profile", default="cpu-tiny-calibration")
    parser.add_argument("--runs", type=int, default=10, help="judged runs after the one that stores baselines")
    parser.add_argument("--out", type=Path, default=Path("results/calibration"))
    args = parser.parse_args(argv)
    # A SIGTERM (a cancelled job, `kill`) ends the calibration as Ctrl-C does: the gate run in progress
    # is stopped and the checkout's baselines are put back.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    root = Path.cwd()
    base_dir = root / "baselines" / args.profile
    kept = base_dir.with_name(base_dir.name + ".kept")
    had_baselines = base_dir.exists()
    if had_baselines:
        shutil.move(base_dir, kept)  # the calibration stores and judges its own, then puts these back
    try:
        _, stored, wall = run_gate(root, args.profile, args.out / "update", update=True)
        print(f"update run: {wall:.0f} s")
        cells = defaultdict(list)  # (method, key) -> [(outcome, value, ci_high, bound, run)]
        verdicts: dict[tuple[str, str], list[dict[str, bool]]] = defaultdict(list)  # per run: check -> failed
        costs: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)  # (method, key) -> run -> draft_cost
        costs.update({(r["method"], r["key"]): {0: r["value"]} for r in stored if _is_draft_cost(r)})
        walls = []
        for i in range(args.runs):
            run, table, wall = run_gate(root, args.profile, args.out / f"run-{i + 1}", update=False)
            walls.append(wall)
            outcomes = {(o["method"], o["key"]): o["outcome"] for o in run["outcomes"] if o["gate"] == "speedup"}
            for r in table:
                if r["gate"] == "speedup" and r["metric"] == "speedup":
                    cells[(r["method"], r["key"])].append((outcomes.get((r["method"], r["key"])), r["value"], r["ci_high"],
                                                           r["bound"], i))
                elif _is_draft_cost(r):
                    costs[(r["method"], r["key"])][i + 1] = r["value"]
            for cell, failed in check_verdicts(table).items():
                verdicts[cell].append(failed)
            print(f"run {i + 1}: {wall:.0f} s", flush=True)
    finally:  # the checkout ends as it began: its own baselines back, or none where it had none
        shutil.rmtree(base_dir, ignore_errors=True)
        if had_baselines:
            shutil.move(kept, base_dir)
    print("\nmethod / level: outcomes (passed = A/A held, or the canary was caught); median speedup; "
          "upper half-width of the interval (median)")
    for (method, key), rows in sorted(cells.items()):
        passed = sum(o == "passed" for o, *_ in rows)
        halfwidth = sorted((hi - v) / v for _, v, hi, _, _ in rows if hi is not None and v)
        median = sorted(v for _, v, *_ in rows)[len(rows) // 2]
        print(f"  {method:<14} {key:<6} {passed}/{len(rows)} passed; speedup {median:.3f}; upper half-width "
              f"{halfwidth[len(halfwidth) // 2]:.1%} (max {halfwidth[-1]:.1%}); floor {rows[0][3]}")
    print("\nthe slowed copy's speedup over the original's in the same run (the loss actually injected):")
    for (method, key), rows in sorted(cells.items()):
        original = next((m for (m, k) in cells if k == key and m != method and method.startswith(m)), None)
        if original is None:
            continue
        theirs = {run: v for _, v, _, _, run in cells[(original, key)]}
        ratios = sorted(v / theirs[run] for _, v, _, _, run in rows if v and theirs.get(run))
        if ratios:
            print(f"  {method:<14} {key:<6} median {ratios[len(ratios) // 2]:.3f} ({ratios[0]:.3f}-{ratios[-1]:.3f})")
    report_checks(verdicts)
    report_step_costs(cells, costs)
    print(f"\nwall time per judged run: {min(walls):.0f}-{max(walls):.0f} s")
    return 0


def _is_draft_cost(row: dict) -> bool:
    return row["gate"] == "speedup" and row["metric"] == "draft_cost" and row["value"] is not None


def check_verdicts(table: list[dict]) -> dict[tuple[str, str], dict[str, bool]]:
    """Per method and level of one run: which check failed on its own, from the measured values and
    their bounds (the gate's outcome merges them): the speedup's upper bound under its floor, the
    draft_cost over its ceiling. A check without a bound (not judged, or not gated) is left out."""
    out: dict[tuple[str, str], dict[str, bool]] = defaultdict(dict)
    for r in table:
        if r["gate"] != "speedup" or r["bound"] is None or r["value"] is None:
            continue
        if r["metric"] == "speedup" and r["ci_high"] is not None:
            out[(r["method"], r["key"])]["speedup"] = r["ci_high"] < r["bound"]
        elif r["metric"] == "draft_cost":
            out[(r["method"], r["key"])]["step cost"] = r["value"] > r["bound"]
    return dict(out)


def report_checks(verdicts: dict) -> None:
    """Each check on its own, per level: A/A false alarms (a method that is no canary failed it) and
    catches of the slowed copy (a canary failed it), out of the runs where the check judged."""
    if not verdicts:
        return
    print("\neach check on its own (A/A: false alarms; slowed copy: caught), of the runs it judged:")
    for (method, key), runs in sorted(verdicts.items()):
        slowed = any(m != method and method.startswith(m) for m, _ in verdicts)
        parts = []
        for check in ("speedup", "step cost"):
            judged = [run[check] for run in runs if check in run]
            if judged:
                parts.append(f"{check} {'caught' if slowed else 'false alarms'} {sum(judged)}/{len(judged)}")
        print(f"  {method:<14} {key:<6} " + ("; ".join(parts) or "no check judged"))


def report_step_costs(cells: dict, costs: dict) -> None:
    """The step-cost check's power from the same runs: A/A drift of draft_cost from the update run's
    value, the slowed copy's excess over the original in the same run, and what a ceiling at the A/A
    limit catches."""
    if not costs:
        print("\nstep costs: none measured (this vLLM's runner lacks the timers, or measure_step_costs = false)")
        return
    print("\nstep cost (draft_cost: a drafting call over a verification forward, same engine, same trial):")
    for (method, key), by_run in sorted(costs.items()):
        original = next((m for (m, k) in costs if k == key and m != method and method.startswith(m)), None)
        if original is not None:
            continue
        judged = [v for run, v in by_run.items() if run]
        if 0 not in by_run or not judged:
            continue
        drift = max(abs(v - by_run[0]) for v in judged)
        line = (f"  {method:<14} {key:<6} stored {by_run[0]:.3f}; A/A runs {min(judged):.3f}-{max(judged):.3f}: "
                f"no false alarm with draft_cost_tol >= {drift:.3f}")
        for slowed in sorted(m for (m, k) in costs if k == key and m != method and m.startswith(method)):
            excess = sorted(v - by_run[r] for r, v in costs[(slowed, key)].items() if r and r in by_run)
            if excess:
                caught = sum(e > drift for e in excess)
                line += (f"; {slowed} exceeds it in the same run by {excess[len(excess) // 2]:.3f} "
                         f"({excess[0]:.3f}-{excess[-1]:.3f}): caught {caught}/{len(excess)} at that tolerance")
        print(line)


if __name__ == "__main__":
    raise SystemExit(main())
