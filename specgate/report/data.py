"""The measurements table on disk, and how its values are written as text.

One tidy table (one row per measured number) is a run's only input to its report, so the report can
be regenerated from `results/<run-id>/measurements.json` + `run.json` long after the engines are gone
(`specgate report RESULTS_DIR`). Columns:

    method  gate  key  concurrency  position  metric  value  baseline  bound  ci_low  ci_high
    unit  verdict  message  basis  qualifier

`verdict` (checks.Verdict: "pass" | "fail" | "skip" | "error") sits on each gate's headline row(s);
`bound` is the floor (acceptance, speedup) or ceiling (memory) the verdict was taken against; `basis`
says when that baseline was not this machine's own ("portable": another machine's portable figures;
"coarse": speedups from another machine or load, held to a wider tolerance); `qualifier`
what the verdict says besides: "canary caught", or the basis's label (checks.Basis: "coarse",
"portable", "known issue"). Nothing here judges: the checks did (specgate/checks), and the verdicts
are read as they were recorded, from these two columns only (a table written before `qualifier`
existed gets it once, when it is read: `load_run`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from specgate.checks import CANARY_CAUGHT, Basis, Verdict
from specgate.errors import ResultsError
from specgate.formatting import fmt, present, with_interval
from specgate.gates import MEMORY
from specgate.profile import BASELINE
from specgate.store import run_record
from specgate.store.run_record import Outcome, RunRecord

COLUMNS = (
    "method",
    "gate",
    "key",
    "concurrency",
    "position",
    "metric",
    "value",
    "baseline",
    "bound",
    "ci_low",
    "ci_high",
    "unit",
    "verdict",
    "message",
    "basis",
    "qualifier",
)
_TEXT = ("method", "gate", "key", "metric", "unit", "verdict", "message", "basis", "qualifier")
_NUMBER = ("concurrency", "position", "value", "baseline", "bound", "ci_low", "ci_high")
BASELINE_METHOD = BASELINE
VERDICTS = tuple(v.value for v in Verdict)
_MESSAGE_CHARS = 1000  # per message in summary.md; the full text stays in measurements.json


# ---------------------------------------------------------------- the table on disk


def normalize(table: pd.DataFrame) -> pd.DataFrame:
    """Every column present, text columns "" instead of NaN, number columns float (NaN = null), so
    a table read back from CSV or JSON behaves like the one the run built."""
    table = table.copy()
    for col in _TEXT:
        table[col] = table[col].astype(object).where(table[col].notna(), "").astype(str) if col in table else ""
    for col in _NUMBER:
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float) if col in table else math.nan
    unqualified = table["qualifier"] == ""  # a row built without a judgement: what its basis says
    table.loc[unqualified, "qualifier"] = table.loc[unqualified, "basis"].map(Basis.label_of)
    extra = [c for c in table.columns if c not in COLUMNS]
    return table[list(COLUMNS) + extra].reset_index(drop=True)


def normalized(table: pd.DataFrame) -> pd.DataFrame:
    """`table`, which a report's parts take normalized (write_report normalizes it once for all of them);
    ValueError where it was not."""
    if list(table.columns[: len(COLUMNS)]) != list(COLUMNS):
        raise ValueError("the report's parts take the table normalize() returns (specgate.report.normalize)")
    return table


def write_tables(run_dir: Path, table: pd.DataFrame) -> dict[str, Path]:
    """measurements.csv and measurements.json (records; null where a number does not apply)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = normalize(table)
    paths = {"csv": run_dir / "measurements.csv", "json": run_dir / "measurements.json"}
    table.to_csv(paths["csv"], index=False)
    paths["json"].write_text(table.to_json(orient="records") + "\n", encoding="utf-8")
    return paths


def load_run(run_dir: Path) -> tuple[pd.DataFrame, RunRecord]:
    """(measurements table, run record) of a results directory; ResultsError naming the file when
    something is missing or unreadable."""
    run_dir = Path(run_dir)
    hint = run_record.HINT
    if not run_dir.is_dir():
        raise ResultsError(f"results directory {run_dir} does not exist or is not a directory; {hint}.")
    records = _read_json(run_dir / "measurements.json", hint)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ResultsError(
            f"{run_dir / 'measurements.json'} is not a list of row objects (pandas to_json(orient='records')); {hint}."
        )
    missing = [c for c in ("method", "gate", "key", "metric", "value") if records and c not in records[0]]
    if missing:
        raise ResultsError(
            f"{run_dir / 'measurements.json'} has rows without {', '.join(missing)}; "
            f"it was not written by specgate's write_tables; {hint}."
        )
    run = run_record.read(run_dir / "run.json", hint)
    if records and "qualifier" not in records[0]:
        records = [qualified(r) for r in records]
    return normalize(pd.DataFrame(records, columns=None if records else list(COLUMNS))), run


def qualified(row: dict[str, Any]) -> dict[str, Any]:
    """A row of a table written before the `qualifier` column, with it: such a table said a caught
    canary only in its message's first words (checks.CANARY_CAUGHT). The one place a message is read."""
    caught = str(row.get("message") or "").startswith(CANARY_CAUGHT)
    qualifier = CANARY_CAUGHT if caught else Basis.label_of(str(row.get("basis") or ""))
    return {**row, "qualifier": qualifier}


def _read_json(path: Path, hint: str) -> Any:
    if not path.is_file():
        raise ResultsError(f"{path} is missing; {hint}.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc}); it may be truncated; {hint}.") from None


# ---------------------------------------------------------------- formatting


def _bound_word(gate: str) -> str:
    return "ceiling" if gate == MEMORY else "floor"


def headline(row: Mapping[str, Any]) -> str:
    """'2.41 [2.30, 2.52] (baseline 2.43, floor 2.31)': the value with what it was judged against."""
    if not present(row["value"]) and row.get("unit") and isinstance(row["unit"], str):
        return row["unit"]  # a figure this run could not take says why; a label (the runner) is its unit
    text = with_interval(row["value"], row["ci_low"], row["ci_high"])
    against = []
    if present(row["baseline"]):
        against.append(f"baseline {fmt(row['baseline'])}")
    if present(row["bound"]):
        against.append(f"{_bound_word(row['gate'])} {fmt(row['bound'])}")
    return text + (f" ({', '.join(against)})" if against else "")


def outcome_verdict(outcome: Outcome) -> str:
    """A test outcome's verdict ('' when pytest reported something else)."""
    verdict = Verdict.from_outcome(outcome.outcome)
    return verdict.value if verdict else ""


def caught(group: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The row of a canary the gate caught, as it must, with its message where one has it (None: no
    row of the group is one)."""
    rows = [r for r in group if r.get("qualifier") == CANARY_CAUGHT]
    return next((r for r in rows if r.get("message")), rows[0] if rows else None)


def verdict_label(verdict: str, group: Iterable[Mapping[str, Any]]) -> str:
    """A row's verdict as the tables print it: 'pass (coarse)' where the figures were held to a wider or
    another machine's baseline, 'pass (canary caught)' where a canary broke its bounds as it must."""
    if not verdict:
        return "–"
    group = list(group)
    if verdict == Verdict.PASS and caught(group):
        return f"{verdict} ({CANARY_CAUGHT})"
    shown = (Basis.COARSE.label, Basis.PORTABLE.label)  # a known issue's pass reads as a pass; its lines say why
    qualifier = next((r["qualifier"] for r in group if r.get("qualifier") in shown), "")
    return verdict + (f" ({qualifier})" if qualifier else "")


def ordered(values: Iterable[str], first: str = BASELINE_METHOD) -> list[str]:
    seen = list(dict.fromkeys(v for v in values if v != ""))
    return ([first] if first in seen else []) + [v for v in seen if v != first]


def one_line(message: str) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


def metric_label(metric: str) -> str:
    """'peak_process_mib' -> 'peak process': the unit is printed after the number."""
    for suffix in ("_mib", "_tokens", "_ms", "_s"):
        metric = metric.removesuffix(suffix)
    return metric.replace("_", " ")
