"""The gate tables of summary.md (and the GitHub step summary): a verdict at a glance. Per row: the
verdict, each headline figure with its interval and the bound it was held to, and which check decided;
a failing row says in words what moved and by how much. Every other figure (latencies, p95s, the
baseline's own, costs) is in report.html and measurements.csv.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from specgate.checks import FAILED, Verdict, distribution, drafting, worst
from specgate.figures.acceptance import DRAFT_SHARE, DRAFT_TOKENS_PER_TOKEN
from specgate.formatting import fmt, present, with_interval
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
from specgate.report.data import caught, one_line, ordered, outcome_verdict, verdict_label
from specgate.store.run_record import RunRecord

# Per gate: (metric, header) of the figures a row shows; at most five, so a row fits a PR comment.
COMPACT = {
    EQUIVALENCE: [("identical", "identical"), ("diverged", "diverged"), ("forgiven", "forgiven near-ties")],
    ACCEPTANCE: [
        ("mean_acceptance_length", "mean acceptance length"),
        (DRAFT_SHARE, "drafted steps"),
        ("acceptance_rate", "acceptance rate"),
    ],
    SPEEDUP: [
        ("speedup", "speedup [CI]"),
        ("draft_cost", "draft cost"),
        ("expected_speedup", "expected"),
        ("geomean_speedup", "geometric mean [CI]"),
    ],
    LOAD: [
        ("requests", "requests"),
        ("identical", "identical"),
        ("diverged", "prompts diverged"),
        ("mean_acceptance_length", "mean acceptance length"),
        (DRAFT_SHARE, "drafted steps"),
    ],
    MEMORY: [
        ("static_mib_measured", "drafter MiB"),
        ("kv_tokens_lost", "KV tokens lost"),
        ("process_mib", "process MiB"),
    ],
    STRUCTURED: [
        ("mean_acceptance_length", "mean acceptance length"),
        ("diverged", "diverged"),
        ("invalid", "invalid"),
    ],
    PREFIX_SOAK: [("mean_acceptance_length", "last round's acceptance"), ("changed_outputs", "outputs changed")],
    PREEMPTION: [
        ("preemptions", "preemptions"),
        ("diverged", "diverged"),
        ("mean_acceptance_length", "acceptance length"),
    ],
    REQUESTS: [("cases", "cases"), ("sampled.p_value", "T > 0 p-value")],
    EDGES: [("cases", "cases")],
}
# What a bounded figure's check is called, and whether its bound is a ceiling (else a floor).
CHECKS = {
    "speedup": ("speedup floor", False),
    "geomean_speedup": ("geometric-mean floor", False),
    "draft_cost": ("step-cost ceiling", True),
    "verify_cost": ("verification-cost ceiling", True),
    "ttft_p95_ratio": ("TTFT p95 ceiling", True),
    "mean_acceptance_length": ("acceptance floor", False),
    "acceptance_rate": ("acceptance-rate floor", False),
    "position_rate": ("per-position floor", False),
    DRAFT_SHARE: ("drafted-steps floor", False),
    DRAFT_TOKENS_PER_TOKEN: ("draft-tokens floor", False),
    drafting.POLICY: ("drafting-policy ceiling", True),
    "static_mib_measured": ("drafter-weights ceiling", True),
    "static_mib_analytic": ("drafter-weights ceiling", True),
    "kv_tokens_lost": ("KV ceiling", True),
    "process_mib": ("process-memory ceiling", True),
    "device_mib": ("device-memory ceiling", True),
    "diverged": ("greedy match", True),
    "forgiven": ("near-tie cap", True),
    "invalid": ("schema", True),
    "changed_outputs": ("unchanged outputs", True),
    "preemptions": ("preempted at least once", False),
    "kv_usage_after": ("KV freed", True),
    "drift": ("drift floor", False),
    "sampled.p_value": ("two-sample test at T > 0", False),
    "sampled_repaired.p_value": ("two-sample test, sampler repaired", False),
    "counted_past_end": ("counters within the output", True),
    distribution.BELOW_FLOOR: ("requests below their floors", True),
    distribution.LOW_END: ("10 % quantile floor", False),
    distribution.WINDOW: ("per-window floor", False),
}


# Figures named by a prefix: one request's (checks.distribution.request_metric), a drift figure's (`drift_<metric>`,
# a floor or a ceiling as the metric is)
PER_REQUEST = ("per-request floor", False)
DRIFT = "drift_"


def _check(metric: str) -> tuple[str, bool] | None:
    """CHECKS of a metric, or of its last part (`block.counted_past_end`: a class's figure), or of its
    prefix (PER_REQUEST, DRIFT)."""
    if distribution.prompt_of(metric) is not None:
        return PER_REQUEST
    if metric.startswith(DRIFT) and (of := _check(metric[len(DRIFT) :])):
        return ("drift ceiling" if of[1] else "drift floor", of[1])
    return CHECKS.get(metric) or CHECKS.get(metric.rpartition(".")[2])


def is_ceiling(metric: str, gate: str) -> bool:
    return (_check(metric) or ("", gate == MEMORY))[1]


def cell(row: dict[str, Any]) -> str:
    """'1.09 [0.81, 1.53] ≥ 0.79': a figure, its interval and the bound it was held to."""
    if not present(row["value"]):
        return row["unit"] if isinstance(row.get("unit"), str) and row["unit"] else "–"
    text = with_interval(row["value"], row["ci_low"], row["ci_high"])
    if present(row["bound"]):
        text += f" {'≤' if is_ceiling(row['metric'], row['gate']) else '≥'} {fmt(row['bound'])}"
    return text


def moved_words(row: dict[str, Any]) -> str:
    """'speedup floor: 1.22 → 0.89 (-27.0 %), floor 1.04': what a failing figure did."""
    name, ceiling = _check(row["metric"]) or (row["metric"].replace("_", " "), is_ceiling(row["metric"], row["gate"]))
    if (prompt := distribution.prompt_of(row["metric"])) is not None:
        name += f" ({prompt})"  # which request
    elif (part := row["metric"].rpartition(".")[0]) and row["metric"] not in CHECKS and _check(row["metric"]):
        name += f" ({part})"  # a class's figure: which class
    what = f"{fmt(row['value'])}"
    if present(row["baseline"]) and present(row["value"]):
        change = f" ({(row['value'] - row['baseline']) / row['baseline']:+.1%})" if row["baseline"] else ""
        what = f"{fmt(row['baseline'])} → {fmt(row['value'])}{change}"
    where = f" at position {int(row['position'])}" if present(row["position"]) else ""
    return f"{name}{where}: {what}, {'ceiling' if ceiling else 'floor'} {fmt(row['bound'])}"


def decided(group: list[dict], verdict: str) -> str:
    """Which check decided a row: the failing figures in words; for a pass, the checks that held."""
    failing = [r for r in group if present(r["bound"]) and present(r["value"]) and _broke(r)]
    moved = "; ".join(moved_words(r) for r in failing[:3]) + (
        f"; and {len(failing) - 3} more" if len(failing) > 3 else ""
    )
    if verdict in FAILED:
        return moved or "see below"
    if verdict == Verdict.SKIP:
        return "not judged: see below"
    if catch := caught(group):  # a canary's figures broke their bounds, as they must
        return f"caught: {moved}" if moved else one_line(catch.get("message") or "")
    held = list(dict.fromkeys((_check(r["metric"]) or (r["metric"],))[0] for r in group if present(r["bound"])))
    return ", ".join(held) if held else "–"


def _broke(row: dict) -> bool:
    if is_ceiling(row["metric"], row["gate"]):
        return row["value"] > row["bound"] + 1e-6
    limit = (
        row["ci_high"]
        if present(row.get("ci_high")) and row["metric"] in ("speedup", "geomean_speedup")
        else row["value"]
    )
    return limit < row["bound"] - 1e-6


def tables(table: pd.DataFrame, run: RunRecord) -> list[tuple[str, list[str], list[tuple[str, list[str]]]]]:
    """(gate, header, [(verdict, cells)]) for summary.md: one row per method and key."""
    outcomes = run.outcomes
    out = []
    for gate in ordered(list(GATES) + list(table["gate"]), first=""):
        rows = table[table["gate"] == gate]
        gate_outcomes = [o for o in outcomes if o.gate == gate]
        if rows.empty and not gate_outcomes:
            continue
        shown = [(m, h) for m, h in COMPACT.get(gate, []) if m in set(rows["metric"])]
        header = ["method", "key", "verdict", *(h for _, h in shown), "decided by"]
        body = []
        groups: dict[tuple[str, str], list[dict]] = {}
        for rec in rows.to_dict("records"):
            groups.setdefault((rec["method"], rec["key"]), []).append(rec)
        for o in gate_outcomes:  # a test that measured nothing (a boot failure, a skip) still has its row
            groups.setdefault((o.method, o.key), [])
        for (method, key), group in groups.items():
            verdict = worst(r["verdict"] for r in group) or worst(
                outcome_verdict(o) for o in gate_outcomes if o.method == method and o.key == key
            )
            cells = []
            for metric, _ in shown:
                hit = sorted((r for r in group if r["metric"] == metric), key=lambda r: present(r["position"]))
                cells.append(cell(hit[0]) if hit else "–")
            own = next((r for r in group if r["metric"] == "throughput_tok_s"), None)
            if gate == SPEEDUP and cells and cells[0] == "–" and own is not None:
                cells[0] = f"{fmt(own['value'])} tok/s (the baseline engine's own)"
            label = verdict_label(verdict, group)
            body.append((verdict, [method, key or "–", label, *cells, decided(group, verdict)]))
        out.append((gate, header, body))
    return out
