"""A run's outcome as data: the measurements table, run.json and baselines.json in results/<run-id>/.

The session measures (session.measured: method -> kind -> key -> values), the plugin knows each
test's verdict (outcomes), the stored baseline file knows what they were compared with. This module
joins the three into the tidy table report.py renders, so a report can be rebuilt from disk.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specgate import baselines
from specgate.errors import SpecgateError
from specgate.memory import GATED
from specgate.profile import BASELINE


@dataclass(frozen=True)
class Outcome:
    """One gate test's result as pytest reported it."""

    nodeid: str
    method: str
    gate: str
    key: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""


VERDICT = {"passed": "pass", "failed": "fail", "skipped": "skip", "error": "error"}
_RANK = {"pass": 1, "skip": 2, "fail": 3, "error": 4}


def _row(method, gate, key, metric, value, **extra) -> dict[str, Any]:
    row = dict(method=method, gate=gate, key=key, metric=metric, value=None if value is None else float(value))
    row.update(extra)
    return row


def _verdicts(outcomes: list[Outcome]) -> dict[tuple[str, str, str], tuple[str, str]]:
    """(method, gate, key) -> (worst verdict, its message)."""
    out: dict[tuple[str, str, str], tuple[str, str]] = {}
    for o in outcomes:
        verdict = VERDICT.get(o.outcome, o.outcome)
        current = out.get((o.method, o.gate, o.key))
        if current is None or _RANK.get(verdict, 0) > _RANK.get(current[0], 0):
            out[(o.method, o.gate, o.key)] = (verdict, o.message)
    return out


def measurement_table(session, outcomes: list[Outcome]):
    """One row per measured number, with the baseline and bound it was judged against."""
    import pandas as pd

    try:
        stored = session.baseline_file()
    except SpecgateError:
        stored = None  # a corrupt baseline file failed the gate tests already; report without it
    tol = session.profile.tolerance
    verdicts = _verdicts(outcomes)
    rows: list[dict[str, Any]] = []

    def judged(method, gate, key):
        verdict, message = verdicts.get((method, gate, key), ("", ""))
        return {"verdict": verdict, "message": message}

    def stored_entry(method, kind, key):
        ref = session.method_config(method).canary_of.get(kind, method) if method != BASELINE else method
        return (stored.entry(ref, kind, key) if stored else None) or {}

    for method, kinds in session.measured.items():
        for kind, entries in kinds.items():
            for key, values in entries.items():
                base = stored_entry(method, kind, key)
                verdict = judged(method, kind, key)
                if kind == "acceptance":
                    floors = session.method_config(method).floors
                    for metric, rtol in (("mean_acceptance_length", tol.acceptance_rtol), ("acceptance_rate", None)):
                        if metric not in values:
                            continue
                        b = base.get(metric)
                        bound = b * (1 - rtol) if (b is not None and rtol is not None) else floors.get(metric)
                        rows.append(_row(method, kind, key, metric, values[metric], baseline=b, bound=bound, **verdict))
                    base_pos = base.get("per_position", [])
                    for i, rate in enumerate(values.get("per_position", []), start=1):
                        b = base_pos[i - 1] if i - 1 < len(base_pos) else None
                        bound = None if b is None else b * (1 - tol.position_rtol)
                        failing = bound is not None and rate < bound and verdict["verdict"] == "fail"
                        rows.append(_row(method, kind, key, "position_rate", rate, position=i, baseline=b, bound=bound,
                                         verdict="fail" if failing else ""))
                elif kind == "speedup":
                    concurrency = int(key.split("=", 1)[1])
                    for metric, value in values.items():
                        if value is None or metric == "trials":
                            continue
                        extra: dict[str, Any] = {"concurrency": concurrency, "baseline": base.get(metric)}
                        if metric == "speedup":
                            extra.update(ci_low=values.get("ci_low"), ci_high=values.get("ci_high"), **verdict)
                            if "speedup" in base:
                                extra["bound"] = base["speedup"] * (1 - tol.speedup_rtol)
                        elif metric in ("ci_low", "ci_high"):
                            continue
                        elif metric == "throughput_tok_s" and method == BASELINE:
                            extra.update(verdict)
                        unit = "tok/s" if metric.endswith("tok_s") else ("ms" if metric.endswith("_ms") else "")
                        rows.append(_row(method, kind, key, metric, value, unit=unit, **extra))
                elif kind == "memory":
                    slacks = {"memory": tol.memory_slack_mib, "process": tol.process_slack_mib, None: 0.0}
                    for metric, value in values.items():
                        extra = {"baseline": base.get(metric)}
                        if metric in GATED:
                            what, unit, slack = GATED[metric]
                            extra["unit"] = unit
                            if base.get(metric) is not None:
                                extra["bound"] = max(float(base[metric]), 0.0) * (1 + tol.memory_rtol) + slacks[slack]
                        if metric in GATED or method == BASELINE:
                            extra.update(verdict)
                        rows.append(_row(method, kind, key, metric, value, **extra))
    for name, record in session.records.items():
        if record.compared:
            verdict = judged(name, "equivalence", "greedy")
            for metric in ("identical", "compared", "diverged"):
                rows.append(_row(name, "equivalence", "greedy", metric, getattr(record, metric), **verdict))
    table = pd.DataFrame(rows)
    return table


def run_metadata(session, outcomes: list[Outcome], started: float, summary_lines: list[str]) -> dict[str, Any]:
    device, count = baselines.detect_device(session.profile.hardware)
    prov = baselines.provenance(session.root, device, count)
    now = _dt.datetime.now(_dt.timezone.utc)
    return {
        "run_id": session.out_dir.name,
        "profile": session.profile.name,
        "profile_path": str(session.profile.path),
        "hardware": session.hardware,
        "started": _dt.datetime.fromtimestamp(started, _dt.timezone.utc).isoformat(timespec="seconds"),
        "finished": now.isoformat(timespec="seconds"),
        "vllm": prov["vllm"],
        "torch": prov["torch"],
        "git_revision": prov["git_revision"],
        "outcomes": [asdict(o) for o in outcomes],
        "summary_lines": summary_lines,
    }


def write_run(session, outcomes: list[Outcome], started: float, summary_lines: list[str]) -> dict[str, Path]:
    """measurements.csv/.json, run.json, baselines.json (this run alone, in the stored format, for
    `specgate baselines diff`), summary.md and report.html in the session's output directory."""
    table = measurement_table(session, outcomes)
    return _write(session, table, run_metadata(session, outcomes, started, summary_lines), session.measured)


def write_combined(session, workers: list[dict], outcomes: list[Outcome], summary_lines: list[str]) -> dict[str, Path]:
    """The same files for a pytest-xdist run, from every worker's table and measurements."""
    import pandas as pd

    tables = [pd.read_json(io.StringIO(w["table"]), orient="records") for w in workers if w["table"] != "[]"]
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    measured: dict = {}
    for w in workers:
        for method, kinds in w["measured"].items():
            for kind, entries in kinds.items():
                measured.setdefault(method, {}).setdefault(kind, {}).update(entries)
    started = min(w["started"] for w in workers)
    return _write(session, table, run_metadata(session, outcomes, started, summary_lines), measured)


def _write(session, table, run: dict[str, Any], measured: dict) -> dict[str, Path]:
    from specgate import report

    out = session.out_dir
    out.mkdir(parents=True, exist_ok=True)
    paths = report.write_tables(out, table)
    paths["run"] = out / "run.json"
    paths["run"].write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")
    if measured:
        device, count = baselines.detect_device(session.profile.hardware)
        empty = baselines.BaselineFile(out / "baselines.json", session.profile.name, session.hardware, {})
        baselines.write_atomic(baselines.merge(empty, measured, baselines.provenance(session.root, device, count)))
        paths["baselines"] = out / "baselines.json"
    paths.update(report.write_report(out, table, run))
    return paths
