"""A run spread over pytest-xdist workers (`pytest -n N`): what each worker hands the controller when
it ends (its summary lines, outcomes, measurements table, what it measured, its baseline update),
and what the controller makes of them all (every worker's lines, one combined results directory)."""

from __future__ import annotations

import json
from dataclasses import asdict


def payload(session, outcomes, correctness_failures: list[str], worker: str) -> str:
    """A worker's hand-over (JSON): its engines are down and its baselines written (file lock) by now."""
    from specgate.run.results import measurement_table, summary_lines

    try:
        lines = summary_lines(session, outcomes)
    except Exception as exc:  # as in the controller's summary: never a crash of the run
        lines = [f"specgate: the summary could not be built ({type(exc).__name__}: {exc})"]
    out = {
        "worker": worker,
        "lines": lines,
        "outcomes": [asdict(o) for o in outcomes],
        "table": measurement_table(session.judgements.values()).to_json(orient="records"),
        "measured": session.measured,
        "started": session.started_wall,
    }
    if session.plan.update_baselines:
        out["update"] = session.write_baselines(correctness_failures)
    return json.dumps(out)


def summary(workers: list[dict]) -> list[str]:
    """The controller's terminal lines: each worker's summary and baseline update, by worker."""
    lines = []
    for w in sorted(workers, key=lambda w: w["worker"]):
        lines += [f"[{w['worker']}]", *w["lines"]] + ([w["update"]] if "update" in w else [])
    return lines


def write_combined(session, workers: list[dict]) -> dict:
    """One results directory for the whole run, from every worker's outcomes, table and measurements
    (`session` gives the profile and paths; it boots nothing)."""
    from specgate.run.results import write_combined as write
    from specgate.store.run_record import Outcome

    outcomes = [Outcome(**o) for w in workers for o in w["outcomes"]]
    lines = [f"[{w['worker']}] {line}" for w in workers for line in w["lines"]]
    return write(session, workers, outcomes, lines)
