"""One step of a bisection: a gate run's results directory judged good, bad or skip, and the figures
that moved. A bad step's reason leads with what its run record's verdict leads with (the first
correctness failure or engine death); the gate run's own checks and tolerances decided every figure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from specgate.checks import FAILED
from specgate.errors import SpecgateError
from specgate.formatting import num
from specgate.gates import ACCEPTANCE, EQUIVALENCE, LIFECYCLE, MEMORY, SPEEDUP
from specgate.store.revisions import not_held
from specgate.store.run_record import DIED, Engine, Outcome, read

GOOD, BAD, SKIP = "good", "bad", "skip"
RUN_GATES = (EQUIVALENCE, ACCEPTANCE, SPEEDUP, MEMORY, LIFECYCLE)
CHASEABLE = RUN_GATES


class BisectError(SpecgateError):
    """Raised when a bisection cannot start or go on: the message names the option or file and the fix."""


@dataclass
class Step:
    label: str
    verdict: str  # good | bad | skip
    reason: str
    wall_s: float = 0.0  # the step's own time: venv build (when new) and gate run, not waiting for --lock
    waited_s: float = 0.0  # waiting for --lock
    role: str = ""  # 'reference' (the good release, whose figures every step is judged against), 'bad', ''
    results: str = ""
    figures: list[dict] = field(
        default_factory=list
    )  # the figures that failed: method gate key metric value baseline bound
    failed_gates: list[str] = field(default_factory=list)
    diagnosis: str = ""  # a step whose engine died after it booted: the run's diagnosis, or which engine died how
    known: dict[str, str] = field(default_factory=dict)  # the profile's known issues: issue -> "present" | "gone"


def known_of(run) -> dict[str, str]:
    """Per known issue the run's checks met: present where any method still showed it, else gone."""
    out: dict[str, str] = {}
    for seen in run.known_issues:
        out[seen.issue] = "present" if seen.status == "present" or out.get(seen.issue) == "present" else seen.status
    return out


def moved(row: dict) -> bool:
    """Whether a failing row's own figure is past its bound (a judgement's other figures share its verdict)."""
    bound, value = row.get("bound"), row.get("value")
    if bound is None or value is None:  # a figure without a bound of its own (acceptance rate) did not break one
        return row.get("gate") == EQUIVALENCE
    if row.get("gate") == MEMORY:
        return value > bound
    if row.get("gate") == SPEEDUP:
        high = row.get("ci_high")
        return (high if high is not None else value) < bound
    return value < bound


def figure_name(row: dict) -> str:
    """'ngram acceptance/doc_prose mean_acceptance_length' ('position_rate[2]' for a per-position rate)."""
    position = f"[{int(row['position'])}]" if row.get("position") is not None else ""
    return f"{row['method']} {row['gate']}/{row['key']} {row['metric']}{position}"


def describe_figure(row: dict) -> str:
    bound = row.get("bound")
    word = "ceiling" if row.get("gate") == MEMORY else "floor"
    return f"{figure_name(row)}: {num(row.get('baseline'))} -> {num(row.get('value'))}" + (
        f" ({word} {num(bound)})" if bound is not None else ""
    )


def _tail(path: Path, n: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def classify(
    out: Path, methods: list[str], chase: list[str] | None, log: Path | None = None, held: dict | None = None
) -> Step:
    """Good, bad or skip for one gate run's results directory (its run record, measurements.json). A bad
    step's reason leads with what the run record's verdict leads with: the first correctness failure or
    engine death, in the order they happened (an engine that died after greedy outputs had already
    changed is the second thing said, not the first)."""
    out = Path(out)
    label = out.name
    if not (out / "run.json").is_file():
        return Step(
            label,
            SKIP,
            f"the gate run wrote no run.json (it crashed before the end); its log {log} ends: "
            + " / ".join(_tail(log, 4).splitlines())
            if log
            else "the gate run wrote no run.json",
        )
    run = read(out)
    if held and (changed := not_held(held, run.models)):
        return Step(
            label,
            SKIP,
            f"its models are not the ones this bisection holds fixed ({'; '.join(changed)}): what moved cannot be "
            "told from the weights. Pin them (`specgate download --pin`) and run the bisection again (--restart)",
        )
    step = _classify(out, run, methods, chase, label)
    step.known = known_of(run)
    return step


def _classify(out: Path, run, methods: list[str], chase: list[str] | None, label: str) -> Step:
    base = run.engines.get("baseline") or Engine()
    if base.boot_error or base.died:
        how = "did not boot" if base.boot_error else "died"
        return Step(label, SKIP, f"vLLM's baseline engine (no speculation) {how}: {base.boot_error or base.died}")
    no_boot = {m: e.boot_error for m, e in run.engines.items() if m in methods and e.boot_error and not e.skipped}
    gates = set(chase or RUN_GATES) | {EQUIVALENCE}
    outcomes = [o for o in run.outcomes if o.method in methods and o.gate in gates]
    failed = [o for o in run.failures(methods, gates) if o.method not in no_boot]
    died = run.death_line(methods)
    if died or failed:
        figures = _failed_figures(out, failed)
        lead = run.lead(methods, gates)
        diagnosis = run.diagnosis or died
        if lead is None or lead.cause == DIED:
            reason = f"broken: {diagnosis}"
        else:
            said = "; ".join(describe_figure(f) for f in figures[:3]) or lead.line()
            reason = said + (f" (and {len(figures) - 3} more)" if len(figures) > 3 else "")
            reason += f"; after that, broken: {diagnosis}" if died else ""
        failed_gates = list(RUN_GATES) if died else sorted({o.gate for o in failed})
        return Step(label, BAD, reason, figures=figures, failed_gates=failed_gates, diagnosis=diagnosis if died else "")
    if no_boot:
        return Step(label, SKIP, "; ".join(f"method {m}'s engine did not boot: {why}" for m, why in no_boot.items()))
    if any(o.outcome == "passed" for o in outcomes if o.gate in (chase or RUN_GATES)):
        judged = sum(o.outcome == "passed" for o in outcomes)
        return Step(
            label, GOOD, f"{judged} checks of {', '.join(sorted(gates))} passed against the reference's figures"
        )
    skipped = [o.message.splitlines()[0] for o in outcomes if o.outcome == "skipped" and o.message]
    return Step(label, SKIP, "nothing judged: " + (skipped[0][:300] if skipped else "no test of the chased gates ran"))


def _failed_figures(out: Path, failed: list[Outcome]) -> list[dict]:
    """The figures past their bounds of the failed (method, gate)s, from the step's measurements.json:
    those of correctness failures first, headline figures before per-position rates."""
    rows = []
    if (out / "measurements.json").is_file():
        rows = json.loads((out / "measurements.json").read_text(encoding="utf-8"))
    bad = {(o.method, o.gate) for o in failed if not o.cause}
    correctness = {(o.method, o.gate) for o in failed if o.correctness}
    figures = [r for r in rows if r.get("verdict") in FAILED and (r.get("method"), r.get("gate")) in bad and moved(r)]
    figures.sort(key=lambda r: ((r.get("method"), r.get("gate")) not in correctness, r.get("position") is not None))
    return [
        {
            k: r.get(k)
            for k in ("method", "gate", "key", "metric", "position", "value", "baseline", "bound", "ci_low", "ci_high")
        }
        for r in figures
    ]
