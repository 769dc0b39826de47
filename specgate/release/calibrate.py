"""`specgate calibrate`: the speed gate's tolerances for this machine, measured.

    specgate calibrate --profile P [--runs N] [--methods a,b] [--slowdown 0.074] [--write]

Repeated gate runs (speedup, equivalence, lifecycle) of the profile's methods next to a deliberately slower
copy of each (every drafting call also sleeps `--slowdown` of a step, `canary_of = { speedup = ... }`): the
first run stores baselines in a scratch directory (SPECGATE_BASELINES_DIR: the checkout's baselines are
never touched, whatever happens to the calibration), the next N are judged. From them, per method: the
smallest speedup_rtol, geomean_rtol, draft_cost_tol, acceptance_rtol and load_acceptance_rtol with no false
alarm in the A/A runs
whichever of them had stored the baselines (plus a margin), and how many of the slowed copy's runs each then
catches, per level; for a tie-aware profile (bf16), logprob_margin and max_forgiven_share from the runs'
honest near-ties. A level the machine disturbed in a judged run is dropped from that run; one no judged run
measured, or a storing run without speed figures, stops it, writing nothing. It ends with that table and the
TOML of `baselines/<profile>/<hardware>.tolerance.toml`, which `--write` puts there: a run on this machine then
holds the methods to it (specgate.store.tolerances). First week on a new runner: a gate run that updates
the baselines, `specgate calibrate --write`, commit both.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from specgate.checks.distribution import prompt_of
from specgate.errors import SpecgateError
from specgate.gates import ACCEPTANCE, EQUIVALENCE, LOAD, SPEEDUP, Gate
from specgate.machine import detect_device, hardware_key, this_identity
from specgate.store import tolerances
from specgate.store.baselines import BASELINES_DIR_ENV, baseline_path, baselines_dir, kept_aside

SLOWED = "_slowed"  # the slower copy of method m is m + SLOWED
# the speed tests, the engines' lifecycle, greedy equivalence (its honest near-ties set the tie-aware rule)
# and acceptance (its A/A spread sets acceptance_rtol; the same greedy pass, no extra engine time), and the
# load gate (each level's acceptance: its A/A spread sets load_acceptance_rtol; the same trials)
CALIBRATED_TESTS = (
    "speedup or lifecycle or test_method_reproduces or test_baseline_engine_produces or test_acceptance_holds "
    "or test_outputs_and_acceptance_hold_at_each_concurrency"
)


class CalibrationError(SpecgateError):
    """A calibration run that could not measure: the message names the run and its log."""


def toml_value(value) -> str:
    """A TOML inline value for what a profile's method tables hold (strings, numbers, booleans, lists, tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def calibration_profile(profile, names: list[str], slowdown: float) -> str:
    """The profile's own text with a slower copy of each named method appended."""
    text = Path(profile.path).read_text(encoding="utf-8")
    for name in names:
        m = profile.methods[name]
        table = {"speculative_config": m.speculative_config, "slow_steps": slowdown, "canary_of": {str(SPEEDUP): name}}
        if m.engine_kwargs:
            table["engine"] = {"kwargs": m.engine_kwargs}
        text += f"\n[methods.{name}{SLOWED}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())
    return text


@dataclass
class Cell:
    """One method at one level over the calibration's judged runs."""

    stored: dict = field(default_factory=dict)  # the update run's record
    runs: list[dict] = field(default_factory=list)  # per judged run: metric -> value (speedup, ci_high, draft_cost)


def read_runs(update: Path, judged: list[Path], gate: Gate = SPEEDUP) -> dict[tuple[str, str], Cell]:
    """(method, key) -> Cell of one gate from the runs' measurements (speedup: keys C=<level> and
    summary; acceptance: the categories)."""
    cells: dict[tuple[str, str], Cell] = defaultdict(Cell)
    stored = json.loads((update / "baselines.json").read_text(encoding="utf-8"))
    for method, kinds in stored.get("methods", {}).items():
        for key, record in kinds.get(gate, {}).items():
            cells[(method, key)].stored = record
    for run in judged:
        per: dict[tuple[str, str], dict] = defaultdict(dict)
        for row in json.loads((run / "measurements.json").read_text(encoding="utf-8")):
            if row["gate"] == gate and row["value"] is not None:
                per[(row["method"], row["key"])][row["metric"]] = row["value"]
                if row["metric"] in ("speedup", "geomean_speedup") and row.get("ci_high") is not None:
                    per[(row["method"], row["key"])][row["metric"] + "_high"] = row["ci_high"]
        for cell, values in per.items():
            cells[cell].runs.append(values)
    return dict(cells)


def unstored(update: Path, methods: list[str]) -> list[str]:
    """The methods the storing run left without speed figures: a machine disturbed during its speedup
    trials stores none (session.py), and then no judged run has anything to be held to."""
    path = update / "baselines.json"
    stored = json.loads(path.read_text(encoding="utf-8")).get("methods", {}) if path.is_file() else {}
    return [m for m in methods if not stored.get(m, {}).get(SPEEDUP)]


def unjudged(cells: dict[tuple[str, str], Cell]) -> dict[str, list[str]]:
    """Per method, the levels with a stored speedup that no judged run measured: every judged run's trials
    there were disturbed (not judged, not recorded: checks/speedup.py). A level some runs measured keeps
    those (a disturbed cell is dropped); one none measured has no A/A figure to draw a tolerance from."""
    out: dict[str, list[str]] = {}
    for (method, key), cell in sorted(cells.items(), key=lambda item: (item[0][0], _level(item[0][1]) or 0)):
        if _level(key) is not None and cell.stored.get("speedup") and not any(r.get("speedup") for r in cell.runs):
            out.setdefault(method, []).append(key)
    return out


def shortfall(stored: float | None, high: float | None) -> float:
    """How far below the stored value a run's upper bound fell, relative (0 when it did not)."""
    return 0.0 if not stored or high is None else max(0.0, 1 - high / stored)


@dataclass
class Divergences:
    """One method's greedy divergences in the calibration's runs (all honest: nothing changed between them)."""

    compared: int = 0
    gaps: list[list[float]] = field(default_factory=list)  # per run: the baseline's logprob gap at each divergence
    gapless: int = 0  # divergences whose token was not in the baseline's top-k: no margin forgives them


def read_divergences(judged: list[Path]) -> dict[str, Divergences]:
    out: dict[str, Divergences] = defaultdict(Divergences)
    for run in judged:
        rows = [
            r for r in json.loads((run / "measurements.json").read_text(encoding="utf-8")) if r["gate"] == EQUIVALENCE
        ]
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = {r["metric"]: r["value"] for r in rows if r["method"] == method and r["position"] is None}
            if "compared" not in mine or method.endswith(SLOWED):
                continue
            gaps = [r["value"] for r in rows if r["method"] == method and r["metric"] == "logprob_gap"]
            d = out[method]
            d.compared = int(mine["compared"])
            d.gaps.append(gaps)
            d.gapless += int(mine.get("diverged", 0) + mine.get("forgiven", 0)) - len(gaps)
    return dict(out)


def suggest_rule(divergences: dict[str, Divergences]) -> dict[str, float]:
    """The tie-aware rule's margin and forgiven share from the A/A runs' honest divergences."""
    gaps = [g for d in divergences.values() for run in d.gaps for g in run]
    margin = tolerances.suggest_margin(gaps)
    most = max((sum(g <= margin for g in run) for d in divergences.values() for run in d.gaps), default=0)
    compared = min((d.compared for d in divergences.values() if d.compared), default=0)
    return {"logprob_margin": margin, "max_forgiven_share": tolerances.suggest_forgiven_share(most, compared)}


def figures(cell: Cell, metric: str) -> list[float]:
    """`metric` in every A/A run of the cell, the storing run's first (any of them could have stored it)."""
    return [v for v in (cell.stored.get(metric), *(r.get(metric) for r in cell.runs)) if v is not None]


def spread(cell: Cell, metric: str) -> float | None:
    """How far apart the runs' `metric` lay (largest minus smallest): the drift an A/A run can show over
    its stored figure, whichever run happened to store it."""
    values = figures(cell, metric)
    return max(values) - min(values) if len(values) > 1 else None


def worst_shortfall(cell: Cell, metric: str) -> float:
    """The largest relative shortfall of a run's upper bound under a stored `metric`, whichever run had
    stored it: the lowest upper bound against the highest point figure (0 when none fell short)."""
    points = figures(cell, metric)
    highs = [r[metric + "_high"] for r in cell.runs if r.get(metric + "_high") is not None]
    return shortfall(max(points), min(highs)) if points and highs else 0.0


def suggest(
    cells: dict, names: list[str], acceptance: dict | None = None, load: dict | None = None
) -> dict[str, dict[str, float]]:
    """Per method: speedup_rtol (over its levels), geomean_rtol and draft_cost_tol from the A/A runs, such
    that none of them would have failed whichever run had stored the baselines, acceptance_rtol from the
    largest drop of a category's mean acceptance length below its stored value, request_acceptance_rtol from a
    request's (none collapses at it), and load_acceptance_rtol from the largest drop of a level's (the load gate's
    cells)."""
    out = {}
    for name in names:
        levels = [(k, c) for (m, k), c in cells.items() if m == name and _level(k) is not None]
        summary = cells.get((name, SPEEDUP.key(None)))
        drop = max((worst_shortfall(c, "speedup") for _, c in levels), default=0.0)
        widest = max((d for _, c in levels if (d := spread(c, "draft_cost")) is not None), default=None)
        values = {"speedup_rtol": tolerances.suggest_relative(drop)}
        if summary is not None:
            values["geomean_rtol"] = tolerances.suggest_relative(worst_shortfall(summary, "geomean_speedup"))
        if widest is not None:
            values["draft_cost_tol"] = tolerances.suggest_absolute(widest)
        drops = [
            shortfall(c.stored.get("mean_acceptance_length"), r.get("mean_acceptance_length"))
            for (m, _), c in (acceptance or {}).items()
            if m == name
            for r in c.runs
        ]
        if drops:
            values["acceptance_rtol"] = tolerances.suggest_relative(max(drops), margin=0.005, step=0.005, floor=0.01)
        requests = [  # each request's length in each judged run against the stored one (checks/distribution.py)
            shortfall((c.stored.get("requests", {}).get(prompt) or [None])[0], value)
            for (m, _), c in (acceptance or {}).items()
            if m == name
            for r in c.runs
            for metric, value in r.items()
            if (prompt := prompt_of(metric)) is not None
        ]
        if requests:
            values["request_acceptance_rtol"] = tolerances.suggest_relative(
                max(requests), margin=0.005, step=0.005, floor=0.01
            )
        level_drops = [
            shortfall(c.stored.get("mean_acceptance_length"), r.get("mean_acceptance_length"))
            for (m, _), c in (load or {}).items()
            if m == name
            for r in c.runs
        ]
        if level_drops:
            values["load_acceptance_rtol"] = tolerances.suggest_relative(
                max(level_drops), margin=0.005, step=0.005, floor=0.01
            )
        out[name] = values
    return out


def caught(cells: dict, name: str, key: str, tol: dict[str, float]) -> tuple[int, int, int, int]:
    """The slowed copy's runs at one level held to the original's stored figures with tolerances `tol`:
    (caught by the speedup floor, by the step-cost ceiling, by either, runs)."""
    slowed, original = cells.get((name + SLOWED, key)), cells.get((name, key))
    if slowed is None or original is None:
        return 0, 0, 0, 0
    floor = original.stored.get("speedup", 0) * (1 - tol["speedup_rtol"])
    ceiling = original.stored.get("draft_cost")
    speed = [r.get("speedup_high") is not None and r["speedup_high"] < floor for r in slowed.runs]
    cost = [
        ceiling is not None
        and "draft_cost_tol" in tol
        and r.get("draft_cost") is not None
        and r["draft_cost"] > ceiling + tol["draft_cost_tol"]
        for r in slowed.runs
    ]
    return sum(speed), sum(cost), sum(a or b for a, b in zip(speed, cost)), len(slowed.runs)


def report(cells: dict, names: list[str], suggested: dict, runs: int, slowdown: float) -> list[str]:
    lines = [
        f"calibration: {runs} judged runs after the one that stored baselines; the slowed copies sleep "
        f"{slowdown:g} of a step in every drafting call",
        "",
        "| method | level | A/A speedup / stored (min) | A/A draft_cost spread | slowed: caught by speedup | "
        "by step cost | by either |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in names:
        for key in sorted((k for (m, k) in cells if m == name and _level(k) is not None), key=_level):
            cell = cells[(name, key)]
            ratio = min(
                (
                    r["speedup"] / cell.stored["speedup"]
                    for r in cell.runs
                    if r.get("speedup") is not None and cell.stored.get("speedup")
                ),
                default=None,
            )
            apart = spread(cell, "draft_cost")
            speed, cost, either, n = caught(cells, name, key, suggested[name])
            lines.append(
                f"| {name} | {key} | {'–' if ratio is None else f'{ratio:.3f}'} | "
                f"{'–' if apart is None else f'{apart:.4f}'} | {speed}/{n} | {cost}/{n} | {either}/{n} |"
            )
    lines += ["", "suggested (no false alarm in these A/A runs whichever stored the baselines, plus a margin):"]
    lines += [
        f"  {name}: " + ", ".join(f"{k} {v:g}" for k, v in sorted(values.items())) for name, values in suggested.items()
    ]
    return lines


def equivalence_lines(divergences: dict[str, Divergences], rule: dict[str, float]) -> list[str]:
    """Each method's honest greedy divergences in the A/A runs and, for a tie-aware profile, the rule they give."""
    lines = ["", "greedy divergences in the A/A runs (all honest: the same build each run):"]
    for method, d in divergences.items():
        gaps = sorted(g for run in d.gaps for g in run)
        most = max((len(run) for run in d.gaps), default=0)
        lines.append(
            f"  {method}: at most {most} of {d.compared} prompts in a run; gaps (nats) "
            f"{', '.join(f'{g:g}' for g in gaps[:12]) or 'none'}{' ...' if len(gaps) > 12 else ''}"
            + (f"; {d.gapless} outside the baseline's top-k (no margin forgives them)" if d.gapless else "")
        )
    if rule:
        lines.append(
            f"  tie-aware rule: logprob_margin {rule['logprob_margin']:g} (twice the largest gap), "
            f"max_forgiven_share {rule['max_forgiven_share']:g} (one near-tie more than the worst run)"
        )
    return lines


def _level(key: str) -> int | None:
    """The concurrency level a speedup key is of; None for the summary over the levels."""
    return SPEEDUP.parse(key).concurrency


def run_gate(root: Path, profile_path: Path, methods: list[str], out: Path, scratch: Path, update: bool) -> float:
    """One gate run of the speedup and lifecycle tests; its wall time. CalibrationError when it wrote no results."""
    from specgate.plugin.options import SPELLING  # the gate run's own options

    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "-q",
        "-p",
        "no:cacheprovider",
        "-k",
        CALIBRATED_TESTS,
        *SPELLING.args(profile=profile_path, methods=",".join(methods), out=out),
        "--benchmark-disable",
        *SPELLING.args(update_baselines=update),
    ]
    started = time.monotonic()
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, cwd=root, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, BASELINES_DIR_ENV: str(scratch)}
        )
        try:
            proc.wait()
        except BaseException:  # Ctrl-C or SIGTERM: the gate run ends its engines on SIGINT
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
            raise
    if not (out / "measurements.json").is_file():
        raise CalibrationError(f"the gate run {out} wrote no measurements (exit {proc.returncode}); see {log}")
    return time.monotonic() - started


def restore_kept(root: Path, name: str) -> str:
    """An earlier calibration tool moved baselines/<profile> aside as <profile>.kept and was killed before
    it put them back: put them back when nothing took their place, else say where they are."""
    kept = kept_aside(root, name)
    if kept is None:
        return ""
    base = baselines_dir(root) / name
    if not base.exists():
        shutil.move(kept, base)
        return f"calibrate: put back {base} from {kept}, where an interrupted calibration had left it"
    return (
        f"calibrate: {kept} holds baselines an interrupted calibration moved aside, next to {base}; compare them "
        f"(specgate baselines diff) and keep one"
    )


def calibrate(
    root: Path, profile, names: list[str], slowed: list[str], runs: int, slowdown: float, out: Path, write: bool
) -> int:
    """Calibrate `names` of `profile` (`slowed`: those that get a slowed copy) with one storing and `runs`
    judged gate runs into `out`; print the table and the tolerance file, which `write` puts in place."""
    scratch = out / "baselines"  # SPECGATE_BASELINES_DIR for the runs: the checkout's baselines stay as they are
    scratch.mkdir(parents=True, exist_ok=True)
    profile_path = out / f"{profile.name}.toml"
    profile_path.write_text(calibration_profile(profile, slowed, slowdown), encoding="utf-8")
    methods = names + [name + SLOWED for name in slowed]
    wall = run_gate(root, profile_path, methods, out / "update", scratch, update=True)
    if missing := unstored(out / "update", methods):
        raise CalibrationError(
            f"the storing run ({out / 'update'}) kept no speed figures for {', '.join(missing)}: the machine was "
            f"disturbed during its speedup trials (its summary.md names the level), so the {runs} judged runs "
            "would have nothing to be held to. Nothing was written; rerun calibrate when nothing else runs here."
        )
    print(f"calibrate: baselines stored by the first run ({wall:.0f} s)", flush=True)
    judged = []
    for i in range(1, runs + 1):
        wall = run_gate(root, profile_path, methods, out / f"run-{i}", scratch, update=False)
        judged.append(out / f"run-{i}")
        print(f"calibrate: run {i} of {runs} ({wall:.0f} s)", flush=True)
    cells = read_runs(out / "update", judged)
    if missing := unjudged(cells):
        where = "; ".join(f"{m} at {', '.join(levels)}" for m, levels in missing.items())
        raise CalibrationError(
            f"none of the {runs} judged runs ({out}/run-*) kept a speedup for {where}: the machine was disturbed "
            "during every one's speedup trials there (each summary.md names the level and why), so there is no "
            "A/A figure to draw speedup_rtol or draft_cost_tol from. Nothing was written; rerun calibrate when "
            "nothing else runs here."
        )
    suggested = suggest(
        cells, names, read_runs(out / "update", judged, ACCEPTANCE), read_runs(out / "update", judged, LOAD)
    )
    divergences = read_divergences(judged)
    rule = suggest_rule(divergences) if profile.equivalence.mode == "tie-aware" else {}
    hardware, identity = hardware_key(*detect_device(profile.hardware)), this_identity(profile.hardware)
    target = tolerances.path_for(baseline_path(root, profile.baselines_name, hardware, identity))
    text = tolerances.render(
        [
            f"specgate calibrate --profile {profile.name} --runs {runs} --slowdown {slowdown:g} "
            f"on {hardware}, machine {identity.id}, {time.strftime('%Y-%m-%d')}: the smallest tolerances with no "
            f"false alarm in {runs + 1} A/A runs whichever stored the baselines, plus a margin",
            f"(results: {out})",
        ],
        {},
        suggested,
        rule,
    )
    lines = report(cells, names, suggested, runs, slowdown) + equivalence_lines(divergences, rule)
    (out / "calibration.md").write_text("\n".join(lines) + "\n\n```toml\n" + text + "```\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"\n{target}:\n{text}")
    if write:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        print(
            f"calibrate: wrote {target}; a run on this machine ({hardware}, machine {identity.id}) now holds "
            f"{', '.join(names)} to it (commit it with the "
            "baselines)"
        )
    else:
        print(f"calibrate: --write puts this in {target}")
    return 0
