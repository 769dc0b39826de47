"""The summary's tables: per gate a table of headline figures with each row's verdict and the
messages of what did not pass, the counts, the "what moved" rows, draft-length sweeps, and summary.md
(the same tables in markdown). They are laid out from the verdicts the checks recorded.
"""

from __future__ import annotations

import math
import re

import pandas as pd

from specgate.checks import FAILED, TOLD, Verdict, worst
from specgate.formatting import fmt, present
from specgate.gates import (
    ACCEPTANCE,
    EDGES,
    EQUIVALENCE,
    GATES,
    LOAD,
    MEMORY,
    PREEMPTION,
    PREFIX_SOAK,
    REQUESTS,
    SPEEDUP,
    STRUCTURED,
)
from specgate.machine import Identity
from specgate.report import distribution as distribution_section
from specgate.report import edges as edges_section
from specgate.report import glance
from specgate.report import requests as requests_section
from specgate.report.data import (
    VERDICTS,
    headline,
    metric_label,
    normalized,
    one_line,
    ordered,
    outcome_verdict,
    verdict_label,
)
from specgate.store.run_record import Outcome, RunRecord

# Headline columns per gate: (metric, header). Metrics not listed here still get a column.
_HEADLINES = {
    EQUIVALENCE: [("identical", "identical"), ("compared", "compared"), ("diverged", "diverged")],
    ACCEPTANCE: [("mean_acceptance_length", "mean acceptance length"), ("acceptance_rate", "acceptance rate")],
    SPEEDUP: [
        ("speedup", "speedup [CI]"),
        ("runner", "runner"),
        ("expected_speedup", "expected"),
        ("measured_over_expected", "measured / expected"),
        ("throughput_tok_s", "tok/s"),
        ("baseline_throughput_tok_s", "baseline tok/s"),
        ("ttft_p50_ms", "TTFT p50 ms"),
        ("tpot_p50_ms", "TPOT p50 ms"),
        ("itl_p99_ms", "ITL p99 ms"),
        ("e2e_p50_ms", "E2E p50 ms"),
    ],
    LOAD: [
        ("requests", "requests"),
        ("identical", "identical"),
        ("diverged", "prompts diverged"),
        ("forgiven", "prompts forgiven"),
        ("mean_acceptance_length", "mean acceptance length"),
        ("acceptance_rate", "acceptance rate"),
    ],
    MEMORY: [
        ("static_mib_measured", "drafter weights MiB"),
        ("kv_tokens_lost", "KV tokens lost"),
        ("process_mib", "process MiB"),
        ("kv_capacity_tokens", "KV capacity tokens"),
        ("peak_process_mib", "peak process MiB"),
    ],
    STRUCTURED: [
        ("mean_acceptance_length", "mean acceptance length"),
        ("identical", "identical"),
        ("diverged", "diverged"),
        ("finished", "finished"),
        ("invalid", "invalid"),
    ],
    PREFIX_SOAK: [
        ("mean_acceptance_length", "last round's acceptance length"),
        ("changed_outputs", "outputs changed"),
    ],
    PREEMPTION: [
        ("preemptions", "preemptions"),
        ("identical", "identical"),
        ("diverged", "diverged"),
        ("mean_acceptance_length", "acceptance length"),
        ("kv_usage_after", "KV in use after"),
    ],
    EDGES: [("cases", "cases")],
    REQUESTS: [
        ("cases", "cases"),
        ("sampled.p_value", "T > 0 p-value"),
        ("sampled_repaired.p_value", "T > 0 p-value, repaired"),
    ],
}
# many rows per (method, key): plotted, not a column
_PER_ITEM = ("position_rate", "logprob_gap", "round_acceptance_length", "round_prefix_hit_rate")


# ---------------------------------------------------------------- the summary (markdown and HTML)


class _GateTable:
    """One gate's summary: a header, rows of cells, the verdict of each row, and the messages."""

    def __init__(self, gate: str):
        self.gate = gate
        self.header: list[str] = []
        self.rows: list[list[str]] = []
        self.verdicts: list[str] = []
        self.notes: list[tuple[str, str, list[str]]] = []  # (verdict, message, ["method / key", ...])


def _key_order(by_key: dict[str, list[dict]]) -> list[str]:
    """Keys as measured; concurrency levels (C=1, C=4, C=16) in numeric order."""
    keys = list(by_key)
    conc = {k: [r["concurrency"] for r in rows if present(r["concurrency"])] for k, rows in by_key.items()}
    if all(conc.values()):
        keys.sort(key=lambda k: conc[k][0])
    return keys


def gate_tables(table: pd.DataFrame, run: RunRecord) -> list[_GateTable]:
    outcomes = run.outcomes
    gates = ordered(list(GATES) + list(table["gate"]) + [o.gate for o in outcomes], first="")
    result = []
    for gate in gates:
        rows = table[table["gate"] == gate]
        gate_outcomes = [o for o in outcomes if o.gate == gate]
        if rows.empty and not gate_outcomes:
            continue
        result.append(_gate_table(gate, rows, gate_outcomes))
    return result


def _gate_table(gate: str, rows: pd.DataFrame, outcomes: list[dict]) -> _GateTable:
    out = _GateTable(gate)
    known = [m for m, _ in _HEADLINES.get(gate, [])]
    labels = dict(_HEADLINES.get(gate, []))
    metrics = [m for m in known if m in set(rows["metric"])]
    metrics += [
        m
        for m in ordered(rows["metric"], first="")
        if m not in known and m not in _PER_ITEM and not (gate in (REQUESTS, EDGES) and "." in m)  # own section
    ]
    has_positions = "position_rate" in set(rows["metric"])
    out.header = ["method", "key", "verdict"] + [_label(rows, m, labels) for m in metrics]
    out.header += ["per-position rates"] if has_positions else []
    out.header += ["message"] if not metrics and not has_positions else []
    notes: dict[tuple[str, str], list[str]] = {}  # (verdict, message) -> where
    noted: set[str] = set()  # methods with a message from the table

    cells: list[tuple[str, str, str, list[str]]] = []
    records: dict[str, dict[str, list[dict]]] = {}  # method -> key -> rows; plain dicts are fast to scan
    for rec in rows.to_dict("records"):
        records.setdefault(rec["method"], {}).setdefault(rec["key"], []).append(rec)
    for method in ordered(records):
        for key in _key_order(records[method]):
            group = records[method][key]
            verdict = worst(r["verdict"] for r in group)
            line = []
            for metric in metrics:
                hit = [r for r in group if r["metric"] == metric]
                hit.sort(key=lambda r: present(r["position"]))  # the row without a position first
                line.append(headline(hit[0]) if hit else "–")
            if has_positions:
                pos = sorted((r for r in group if r["metric"] == "position_rate"), key=lambda r: r["position"])
                line.append(" / ".join(fmt(r["value"]) for r in pos) or "–")
            matching = [o for o in outcomes if o.method == method and o.key == key]
            if not verdict and matching:
                verdict = worst(outcome_verdict(o) for o in matching)
            messages = [r["message"] for r in group if r["verdict"] in TOLD and r["message"]]
            if not messages:
                messages = [o.message for o in matching if outcome_verdict(o) in TOLD]
            if not metrics and not has_positions:
                line.append(one_line(messages[0]) if messages else "")
            for message in dict.fromkeys(m for m in messages if m):
                notes.setdefault((verdict if verdict in TOLD else Verdict.FAIL.value, message), []).append(
                    f"{method} / {key}" if key else method
                )
                noted.add(method)
            cells.append((method, key, verdict, line))
        # a test that covers the whole method (no key): its message only when the table has none
        if method not in noted:
            for o in outcomes:
                verdict = outcome_verdict(o)
                if o.method == method and not o.key and o.message and verdict in TOLD:
                    notes.setdefault((verdict, o.message), []).append(method)

    # tests that produced no measurement at all (an engine that did not boot, a skip before measuring)
    measured = {(m, k) for m, k, _, _ in cells}
    measured_methods = {m for m, _ in measured}
    for o in outcomes:
        method, key = o.method, o.key
        if (method, key) in measured or (not key and method in measured_methods):
            continue
        verdict = outcome_verdict(o)
        message = o.message
        blank = ["–"] * (len(out.header) - 3)
        if blank and not metrics and not has_positions:
            blank[-1] = one_line(message)
        cells.append((method, key, verdict, blank))
        measured.add((method, key))
        if message and verdict in TOLD:
            notes.setdefault((verdict, message), []).append(f"{method} / {key}" if key else method)

    for method, key, verdict, line in cells:
        label = verdict_label(verdict, records.get(method, {}).get(key, []))
        out.rows.append([method, key or "–", label] + line)
        out.verdicts.append(verdict)
    order = {v: i for i, v in enumerate(TOLD)}  # the worst first
    out.notes = sorted(((v, m, where) for (v, m), where in notes.items()), key=lambda n: order.get(n[0], len(TOLD)))
    return out


def _label(rows: pd.DataFrame, metric: str, labels: dict[str, str]) -> str:
    if metric in labels:
        return labels[metric]
    units = [u for u in rows.loc[rows["metric"] == metric, "unit"] if u and not u.startswith("not measured")]
    return f"{metric_label(metric)} ({units[0]})" if units else metric.replace("_", " ")


def totals(table: pd.DataFrame, run: RunRecord) -> dict[str, int]:
    """Counts per verdict: from the test outcomes when run.json has them, else from the table."""
    outcomes = run.outcomes
    if outcomes:
        verdicts = [outcome_verdict(o) for o in outcomes]
    else:
        heads = table[table["verdict"] != ""]
        verdicts = [worst(g["verdict"]) for _, g in heads.groupby(["method", "gate", "key"], sort=False)]
    return {v: sum(1 for x in verdicts if x == v) for v in VERDICTS}


def judged_line(outcomes: list[Outcome]) -> str:
    """'judged 26 of 127 checks (26 passed, 0 failed); 101 skipped, mostly (88): <reason>' so that a
    mostly-skipped green run cannot be mistaken for a full pass."""
    verdicts = [outcome_verdict(o) for o in outcomes]
    judged = sum(v in (Verdict.PASS, *FAILED) for v in verdicts)
    skips = [o for o, v in zip(outcomes, verdicts) if v == Verdict.SKIP]
    skipped = [o.message for o in skips]
    text = (
        f"judged {judged} of {len(outcomes)} checks ({verdicts.count(Verdict.PASS)} passed, "
        f"{sum(v in FAILED for v in verdicts)} failed)"
    )
    if not skipped:
        return text + "; none skipped"

    def shape(o, m: str) -> str:  # the reason without its method, key, names and numbers
        for word in (o.key, o.method):
            m = m.replace(word, "#") if word else m
        return re.sub(r"'[^']*'|\d+(?:\.\d+)?", "#", m)[:90]

    shapes = [shape(o, m) for o, m in zip(skips, skipped)]
    main = max(set(shapes), key=shapes.count)
    example = skipped[shapes.index(main)]
    return text + f"; {len(skipped)} skipped, mostly ({shapes.count(main)}): {example[:240]}"


def title_line(table: pd.DataFrame, run: RunRecord) -> str:
    counts = totals(table, run)
    words = {v.value: v.word for v in Verdict} | {
        Verdict.ERROR.value: "error" if counts[Verdict.ERROR] == 1 else "errors"
    }
    count_text = ", ".join(f"{counts[v]} {words[v]}" for v in VERDICTS)
    about = [
        f"run {run.run_id or '?'}",
        f"profile {run.profile or '?'}",
        f"hardware {run.hardware or '?'}" + (f" (machine {run.identity['id']})" if run.identity.get("id") else ""),
        f"vLLM {run.vllm or '?'}",
    ]
    return f"{'FAILED' if failed(counts) else 'passed'}: {count_text} · {' · '.join(about)}"


def failed(counts: dict[str, int]) -> bool:
    """Whether the counts of `totals` hold a failure (or an error)."""
    return any(counts[v.value] for v in FAILED)


def summary_markdown(table: pd.DataFrame, run: RunRecord) -> str:
    """summary.md: one line of totals, then per gate a table and the messages of what did not pass (of a
    normalized table)."""
    table = normalized(table)
    lines = [f"# specgate: {title_line(table, run)}", ""]
    outcomes = run.outcomes
    if outcomes:
        lines += [f"**{judged_line(outcomes)}**", ""]
    notes = [n for n in run.notes if n != run.upgrade]  # the upgrade: below
    if notes:
        lines += [f"- {n}" for n in notes] + [""]
    about = [f"{k} {getattr(run, k)}" for k in ("torch", "git_revision", "started", "finished") if getattr(run, k)]
    if identity := Identity.from_json(run.identity):
        about.insert(0, f"machine {identity.describe()}")
    if about:
        lines += [" · ".join(about), ""]
    upgrade = run.upgrade
    if upgrade:
        lines += [f"**{upgrade.replace(' -> ', ' → ')}**", ""]
        moved = moved_rows(table)
        lines += [f"## What moved ({upgrade.removeprefix('baselines: ').replace(' -> this run: ', ' → ')})", ""]
        if moved:
            lines += [
                "| method | gate | key | figure | baseline | this run | change |",
                "| --- | --- | --- | --- | ---: | ---: | ---: |",
            ]
            lines += [f"| {m} | {g} | {k} | {f} | {fmt(b)} | {fmt(v)} | {c} |" for m, g, k, f, b, v, c in moved]
        else:
            lines.append("Every figure with a stored baseline came out the same.")
        lines.append("")
    notes = {gt.gate: gt.notes for gt in gate_tables(table, run)}
    compact = glance.tables(table, run)
    if not compact:
        lines += ["No measurements were recorded in this run.", ""]
    else:
        lines += [
            "Each figure with the bound it was held to (≥ floor, ≤ ceiling); every other figure is in "
            "report.html and measurements.csv.",
            "",
        ]
    for gate, header, body in compact:
        lines += [f"## {gate}", ""]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("| " + " | ".join("---" for _ in header) + " |")
        for verdict, row in body:
            cells = list(row)
            cells[2] = f"**{cells[2]}**" if verdict in FAILED else cells[2]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
        gate_notes = notes.get(gate, [])
        for verdict, message, where in gate_notes:
            lines.append(f"- **{verdict}** {', '.join(where)}: {one_line(message)}")
        if gate_notes:
            lines.append("")
    lines += distribution_section.markdown(table)
    lines += requests_section.markdown(table)
    lines += edges_section.markdown(table)
    for family, header, body in sweeps(table):
        lines += [
            f"## draft-length sweep: {family}",
            "",
            "| " + " | ".join(header) + " |",
            "| " + " | ".join("---" for _ in header) + " |",
            *("| " + " | ".join(r) + " |" for r in body),
            "",
        ]
    if run.summary_lines:
        lines += ["## session", "", "```", *map(str, run.summary_lines), "```", ""]
    return "\n".join(lines)


def _sweep_family(method: str) -> tuple[str, int] | None:
    """'eagle3@k3' -> ('eagle3', 3): a draft-length sweep's variant."""
    m = re.fullmatch(r"(.+)@k(\d+)", method)
    return (m.group(1), int(m.group(2))) if m else None


def sweeps(table: pd.DataFrame) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per swept method: a row per k (mean acceptance length and acceptance rate over the categories,
    speedup per level) and a last row naming the best k per level, this run's and the stored one's."""
    out = []
    families: dict[str, dict[int, str]] = {}
    for method in ordered(table["method"]):
        if hit := _sweep_family(method):
            families.setdefault(hit[0], {})[hit[1]] = method
    for family, by_k in families.items():
        levels = sorted(
            {
                int(c)
                for c in table[
                    (table["gate"] == SPEEDUP) & table["method"].isin(by_k.values()) & (table["metric"] == "speedup")
                ]["concurrency"].dropna()
            }
        )
        header = ["k", "mean acceptance length", "acceptance rate", *(f"speedup C={c}" for c in levels)]
        body, best = [], {}
        for k in sorted(by_k):
            rows = table[table["method"] == by_k[k]]
            acc = rows[rows["gate"] == ACCEPTANCE]
            length = acc[acc["metric"] == "mean_acceptance_length"]["value"].mean()
            rate = acc[acc["metric"] == "acceptance_rate"]["value"].mean()
            cells = [str(k), fmt(length), fmt(rate)]
            for c in levels:
                hit = rows[(rows["gate"] == SPEEDUP) & (rows["metric"] == "speedup") & (rows["concurrency"] == c)]
                cells.append(headline(hit.iloc[0]) if not hit.empty else "–")
                if not hit.empty:
                    for which, col in (("now", "value"), ("stored", "baseline")):
                        v = hit.iloc[0][col]
                        if present(v) and v > best.get((which, c), (None, -1.0))[1]:
                            best[(which, c)] = (k, float(v))
            body.append(cells)
        body.append(
            [
                "best k",
                "",
                "",
                *(
                    f"k={best[('now', c)][0]}"
                    + (f" (stored: k={best[('stored', c)][0]})" if ("stored", c) in best else "")
                    if ("now", c) in best
                    else "–"
                    for c in levels
                ),
            ]
        )
        out.append((family, header, body))
    return out


def moved_rows(table: pd.DataFrame, rtol: float = 0.005) -> list[tuple]:
    """(method, gate, key, figure, baseline, value, relative change) of every figure that moved from
    its stored baseline by more than `rtol` (per-position rates named by position)."""
    out = []
    for r in table.to_dict("records"):
        if not (present(r["baseline"]) and present(r["value"])):
            continue
        base, value = float(r["baseline"]), float(r["value"])
        change = (value - base) / abs(base) if base else (0.0 if value == base else math.inf)
        if abs(change) > rtol:
            figure = r["metric"] + (f"[{int(r['position'])}]" if present(r["position"]) else "")
            out.append((r["method"], r["gate"], r["key"], figure, base, value, f"{change:+.1%}"))
    return out
