"""The edges scenario's section of summary.md and report.html: per method, its traffic classes (KV-block-sized
prompts, the context edge, split prefills, EOS) x (equal / differs / inconsistent), the requests whose counters
count tokens past the end of their output, each class's acceptance (and the stored figure), and the check's
lines: the first difference of each failing class, what each class stood for, where its time went.
"""

from __future__ import annotations

import pandas as pd

from specgate.formatting import fmt, present
from specgate.gates import EDGES
from specgate.report.data import ordered

STATUSES = ("equal", "differs", "inconsistent")
PAST_END, ACCEPTANCE = "counted_past_end", "mean_acceptance_length"
HEADER = ["class", *STATUSES, "counted past the end", "acceptance (stored)"]


def sections(table: pd.DataFrame) -> list[tuple[str, str, list[str], list[list[str]], list[str]]]:
    """(method, verdict, header, rows, lines) per method the edges scenario judged."""
    rows = table[table["gate"] == EDGES]
    out = []
    for method in ordered(rows["method"]):
        mine = rows[rows["method"] == method].to_dict("records")
        figures: dict[str, dict[str, dict]] = {}
        for r in mine:
            klass, _, what = r["metric"].partition(".")
            if what:
                figures.setdefault(klass, {})[what] = r
        body = []
        for klass, got in figures.items():
            count = [fmt(got[s]["value"]) if s in got else "0" for s in (*STATUSES, PAST_END)]
            accepted = got.get(ACCEPTANCE)
            shown = "–"
            if accepted is not None and present(accepted["value"]):
                shown = fmt(accepted["value"])
                if present(accepted["baseline"]):
                    shown += f" ({fmt(accepted['baseline'])})"
            body.append([klass, *count, shown])
        head = next((r for r in mine if r["metric"] == "cases"), None)
        verdict = head["verdict"] if head else ""
        lines = [m for m in str(head["message"]).splitlines() if m.strip()] if head and head["message"] else []
        out.append((method, verdict, list(HEADER), body, lines))
    return out


def markdown(table: pd.DataFrame) -> list[str]:
    """summary.md's lines for the section ([] when the scenario did not run)."""
    lines = []
    for method, verdict, header, body, notes in sections(table):
        lines += [f"## edges: {method} ({verdict or 'not judged'})", ""]
        lines += ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines.append("")
        lines += [f"- {n}" for n in notes]
        lines.append("")
    return lines
