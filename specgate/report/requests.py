"""The requests scenario's section of summary.md and report.html: per method, its parameter classes x
(equal / differs / inconsistent / refused), the T > 0 test's p-values, and for each failing class the
first difference (case, parameters, position, both tokens and the text around them) as the check wrote it.
"""

from __future__ import annotations

import pandas as pd

from specgate.formatting import fmt, present
from specgate.gates import REQUESTS
from specgate.report.data import ordered

STATUSES = ("equal", "differs", "inconsistent", "refused", "vacuous")
SAMPLED = (("sampled.p_value", "T > 0, as shipped"), ("sampled_repaired.p_value", "T > 0, sampler repaired"))


def sections(table: pd.DataFrame) -> list[tuple[str, str, list[str], list[list[str]], list[str]]]:
    """(method, verdict, header, rows, lines) per method the requests scenario judged: the class table's
    rows, then the p-values, the acceptance at T > 0 and the check's messages as lines."""
    rows = table[table["gate"] == REQUESTS]
    out = []
    for method in ordered(rows["method"]):
        mine = rows[rows["method"] == method].to_dict("records")
        counts: dict[str, dict[str, int]] = {}
        for r in mine:
            klass, _, status = r["metric"].partition(".")
            if status in STATUSES and present(r["value"]):
                counts.setdefault(klass, {})[status] = int(r["value"])
        shown = [s for s in STATUSES if s != "vacuous" or any(c.get(s) for c in counts.values())]
        body = [[klass, *(str(c.get(s, 0)) for s in shown)] for klass, c in counts.items()]
        lines = []
        for metric, label in SAMPLED:
            hit = [r for r in mine if r["metric"] == metric and present(r["value"])]
            if hit:
                r = hit[0]
                rejected = ", rejected" if r["value"] < r["bound"] else ""
                lines.append(f"{label}: p = {fmt(r['value'])} (level {fmt(r['bound'])}{rejected})")
        counters = {r["metric"].split(".", 1)[1]: r["value"] for r in mine if r["metric"].startswith("counters.")}
        if counters:
            lines.append(
                f"counters over the matrix: {fmt(counters.get('accepted'))} accepted of {fmt(counters.get('drafted'))} "
                "drafted"
                + (
                    f"; vLLM's per-request figures sum to {fmt(counters['per_request_accepted'])} of "
                    f"{fmt(counters['per_request_drafted'])}"
                    if "per_request_accepted" in counters
                    else "; no per-request figures from this vLLM"
                )
            )
        acceptance = [r for r in mine if r["metric"].startswith("sampled_acceptance.") and present(r["value"])]
        if acceptance:
            lines.append(
                "acceptance length at T > 0: "
                + ", ".join(
                    f"{r['metric'].split('.', 1)[1]} {fmt(r['value'])}"
                    + (f" (stored {fmt(r['baseline'])})" if present(r["baseline"]) else "")
                    for r in acceptance
                )
            )
        head = next((r for r in mine if r["metric"] == "cases"), None)
        verdict = head["verdict"] if head else ""
        if head and head["message"]:
            lines += [m for m in str(head["message"]).splitlines() if m.strip()]
        out.append((method, verdict, ["class", *shown], body, lines))
    return out


def markdown(table: pd.DataFrame) -> list[str]:
    """summary.md's lines for the section ([] when the scenario did not run)."""
    lines = []
    for method, verdict, header, body, notes in sections(table):
        lines += [f"## requests: {method} ({verdict or 'not judged'})", ""]
        lines += ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        lines.append("")
        lines += [f"- {n}" for n in notes]
        lines.append("")
    return lines
