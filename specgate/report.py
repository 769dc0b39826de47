"""The measurements table of a run -> files a person reads: summary.md, report.html, plots.

One tidy table (one row per measured number) is the only input, so a report can be regenerated
from `results/<run-id>/measurements.json` + `run.json` long after the engines are gone
(`specgate report RESULTS_DIR`). Columns:

    method  gate  key  concurrency  position  metric  value  baseline  bound  ci_low  ci_high
    unit  verdict  message  basis

`verdict` ("pass" | "fail" | "skip" | "error") sits on each gate's headline row(s); `bound` is the
floor (acceptance, speedup) or ceiling (memory) the verdict was taken against; `basis` says when
that baseline was not this machine's own ("portable": another machine's portable figures;
"coarse": speedups from another machine or load, held to a wider tolerance). Plots are PNGs
rendered with matplotlib's Agg backend, saved under `plots/` and embedded in report.html as data
URIs, so the HTML is one file that opens anywhere (a CI artifact, an e-mail) with no network.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from specgate.checks import GATES, Verdict, worst
from specgate.errors import SpecgateError
from specgate.profile import BASELINE

COLUMNS = ("method", "gate", "key", "concurrency", "position", "metric", "value", "baseline", "bound",
           "ci_low", "ci_high", "unit", "verdict", "message", "basis")
_TEXT = ("method", "gate", "key", "metric", "unit", "verdict", "message", "basis")
_NUMBER = ("concurrency", "position", "value", "baseline", "bound", "ci_low", "ci_high")
BASELINE_METHOD = BASELINE
VERDICTS = tuple(v.value for v in Verdict)
DPI = 110  # 1650 px wide for four panels: sharp in a browser, ~100 KB per plot
_MESSAGE_CHARS = 1000  # per message in summary.md; the full text stays in measurements.json

# Headline columns per gate: (metric, header). Metrics not listed here still get a column.
_HEADLINES = {
    "equivalence": [("identical", "identical"), ("compared", "compared"), ("diverged", "diverged")],
    "acceptance": [("mean_acceptance_length", "mean acceptance length"), ("acceptance_rate", "acceptance rate")],
    "speedup": [("speedup", "speedup [CI]"), ("runner", "runner"), ("expected_speedup", "expected"),
                ("measured_over_expected", "measured / expected"), ("throughput_tok_s", "tok/s"),
                ("baseline_throughput_tok_s", "baseline tok/s"), ("ttft_p50_ms", "TTFT p50 ms"),
                ("tpot_p50_ms", "TPOT p50 ms"), ("itl_p99_ms", "ITL p99 ms"), ("e2e_p50_ms", "E2E p50 ms")],
    "memory": [("static_mib_measured", "drafter weights MiB"), ("kv_tokens_lost", "KV tokens lost"),
               ("process_mib", "process MiB"), ("kv_capacity_tokens", "KV capacity tokens"),
               ("peak_process_mib", "peak process MiB")],
}
_PER_ITEM = ("position_rate", "logprob_gap")  # many rows per (method, key): plotted, not a column
_MEMORY_PANELS = (("static_mib_measured", "drafter weights (MiB)"), ("kv_tokens_lost", "KV-cache tokens lost"),
                  ("process_mib", "process memory over baseline (MiB)"))


class ResultsError(SpecgateError):
    """Raised when a results directory, its measurements table or its run.json is missing or corrupt."""


# ---------------------------------------------------------------- the table on disk


def normalize(table: pd.DataFrame) -> pd.DataFrame:
    """Every column present, text columns "" instead of NaN, number columns float (NaN = null), so
    a table read back from CSV or JSON behaves like the one the run built."""
    table = table.copy()
    for col in _TEXT:
        table[col] = table[col].astype(object).where(table[col].notna(), "").astype(str) if col in table else ""
    for col in _NUMBER:
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float) if col in table else math.nan
    extra = [c for c in table.columns if c not in COLUMNS]
    return table[list(COLUMNS) + extra].reset_index(drop=True)


def write_tables(run_dir: Path, table: pd.DataFrame) -> dict[str, Path]:
    """measurements.csv and measurements.json (records; null where a number does not apply)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = normalize(table)
    paths = {"csv": run_dir / "measurements.csv", "json": run_dir / "measurements.json"}
    table.to_csv(paths["csv"], index=False)
    paths["json"].write_text(table.to_json(orient="records") + "\n", encoding="utf-8")
    return paths


def load_run(run_dir: Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(measurements table, run.json) of a results directory; ResultsError naming the file when
    something is missing or unreadable."""
    run_dir = Path(run_dir)
    hint = ("a results directory is what a gate run writes (results/<run-id>/ or --specgate-out); "
            "rerun the gate to recreate it")
    if not run_dir.is_dir():
        raise ResultsError(f"results directory {run_dir} does not exist or is not a directory; {hint}.")
    records = _read_json(run_dir / "measurements.json", hint)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ResultsError(f"{run_dir / 'measurements.json'} is not a list of row objects "
                           f"(pandas to_json(orient='records')); {hint}.")
    missing = [c for c in ("method", "gate", "key", "metric", "value") if records and c not in records[0]]
    if missing:
        raise ResultsError(f"{run_dir / 'measurements.json'} has rows without {', '.join(missing)}; "
                           f"it was not written by specgate's write_tables; {hint}.")
    run = _read_json(run_dir / "run.json", hint)
    if not isinstance(run, dict):
        raise ResultsError(f"{run_dir / 'run.json'} is not a JSON object; {hint}.")
    return normalize(pd.DataFrame(records, columns=None if records else list(COLUMNS))), run


def _read_json(path: Path, hint: str) -> Any:
    if not path.is_file():
        raise ResultsError(f"{path} is missing; {hint}.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc}); it may be truncated; {hint}.") from None


# ---------------------------------------------------------------- formatting


def _present(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and math.isnan(x))


def fmt(x: Any) -> str:
    """Three significant digits, thousands grouped, whole numbers (counts) without a decimal point."""
    if not _present(x):
        return "–"
    x = float(x)
    if x == int(x):
        return f"{int(x):,}"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:#.3g}".rstrip(".")  # 2.40, not 2.4: columns of numbers line up by eye


def _bound_word(gate: str) -> str:
    return "ceiling" if gate == "memory" else "floor"


def headline(row: Mapping[str, Any]) -> str:
    """'2.41 [2.30, 2.52] (baseline 2.43, floor 2.31)': the value with what it was judged against."""
    if not _present(row["value"]) and row.get("unit") and isinstance(row["unit"], str):
        return row["unit"]  # a figure this run could not take says why; a label (the runner) is its unit
    text = fmt(row["value"])
    if _present(row["ci_low"]) and _present(row["ci_high"]):
        text += f" [{fmt(row['ci_low'])}, {fmt(row['ci_high'])}]"
    against = []
    if _present(row["baseline"]):
        against.append(f"baseline {fmt(row['baseline'])}")
    if _present(row["bound"]):
        against.append(f"{_bound_word(row['gate'])} {fmt(row['bound'])}")
    return text + (f" ({', '.join(against)})" if against else "")


def _verdict_of(outcome: dict) -> str:
    """A test outcome's verdict ('' when pytest reported something else)."""
    verdict = Verdict.from_outcome(str(outcome.get("outcome")))
    return verdict.value if verdict else ""


def _ordered(values: Iterable[str], first: str = BASELINE_METHOD) -> list[str]:
    seen = list(dict.fromkeys(v for v in values if v != ""))
    return ([first] if first in seen else []) + [v for v in seen if v != first]


def _one_line(message: str) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= _MESSAGE_CHARS else text[: _MESSAGE_CHARS - 1] + "…"


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
    conc = {k: [r["concurrency"] for r in rows if _present(r["concurrency"])] for k, rows in by_key.items()}
    if all(conc.values()):
        keys.sort(key=lambda k: conc[k][0])
    return keys


def _gate_tables(table: pd.DataFrame, run: dict[str, Any]) -> list[_GateTable]:
    outcomes = [o for o in run.get("outcomes", []) if isinstance(o, dict)]
    gates = _ordered(list(GATES) + list(table["gate"]) + [str(o.get("gate", "")) for o in outcomes], first="")
    result = []
    for gate in gates:
        rows = table[table["gate"] == gate]
        gate_outcomes = [o for o in outcomes if o.get("gate") == gate]
        if rows.empty and not gate_outcomes:
            continue
        result.append(_gate_table(gate, rows, gate_outcomes))
    return result


def _gate_table(gate: str, rows: pd.DataFrame, outcomes: list[dict]) -> _GateTable:
    out = _GateTable(gate)
    known = [m for m, _ in _HEADLINES.get(gate, [])]
    labels = dict(_HEADLINES.get(gate, []))
    metrics = [m for m in known if m in set(rows["metric"])]
    metrics += [m for m in _ordered(rows["metric"], first="") if m not in known and m not in _PER_ITEM]
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
    for method in _ordered(records):
        for key in _key_order(records[method]):
            group = records[method][key]
            verdict = worst(r["verdict"] for r in group)
            line = []
            for metric in metrics:
                hit = [r for r in group if r["metric"] == metric]
                hit.sort(key=lambda r: _present(r["position"]))  # the row without a position first
                line.append(headline(hit[0]) if hit else "–")
            if has_positions:
                pos = sorted((r for r in group if r["metric"] == "position_rate"), key=lambda r: r["position"])
                line.append(" / ".join(fmt(r["value"]) for r in pos) or "–")
            matching = [o for o in outcomes if o.get("method") == method and o.get("key") == key]
            if not verdict and matching:
                verdict = worst(_verdict_of(o) for o in matching)
            messages = [r["message"] for r in group if r["verdict"] in ("fail", "error", "skip") and r["message"]]
            if not messages:
                messages = [str(o.get("message") or "") for o in matching
                            if _verdict_of(o) in ("fail", "error", "skip")]
            if not metrics and not has_positions:
                line.append(_one_line(messages[0]) if messages else "")
            for message in dict.fromkeys(m for m in messages if m):
                notes.setdefault((verdict if verdict in ("fail", "error", "skip") else "fail", message), []).append(
                    f"{method} / {key}" if key else method)
                noted.add(method)
            cells.append((method, key, verdict, line))
        # a test that covers the whole method (no key): its message only when the table has none
        if method not in noted:
            for o in outcomes:
                verdict = _verdict_of(o)
                if o.get("method") == method and not o.get("key") and o.get("message") and verdict in (
                        "fail", "error", "skip"):
                    notes.setdefault((verdict, str(o["message"])), []).append(method)

    # tests that produced no measurement at all (an engine that did not boot, a skip before measuring)
    measured = {(m, k) for m, k, _, _ in cells}
    measured_methods = {m for m, _ in measured}
    for o in outcomes:
        method, key = str(o.get("method", "")), str(o.get("key", ""))
        if (method, key) in measured or (not key and method in measured_methods):
            continue
        verdict = _verdict_of(o)
        message = str(o.get("message") or "")
        blank = ["–"] * (len(out.header) - 3)
        if blank and not metrics and not has_positions:
            blank[-1] = _one_line(message)
        cells.append((method, key, verdict, blank))
        measured.add((method, key))
        if message and verdict in ("fail", "error", "skip"):
            notes.setdefault((verdict, message), []).append(f"{method} / {key}" if key else method)

    bases = {(r["method"], r["key"]): r.get("basis", "") for r in rows.to_dict("records")}
    for method, key, verdict, line in cells:
        basis = bases.get((method, key), "")
        label = (verdict or "–") + (f" ({basis})" if basis in ("coarse", "portable") and verdict else "")
        out.rows.append([method, key or "–", label] + line)
        out.verdicts.append(verdict)
    order = {"error": 0, "fail": 1, "skip": 2}
    out.notes = sorted(((v, m, where) for (v, m), where in notes.items()), key=lambda n: order.get(n[0], 3))
    return out


def _label(rows: pd.DataFrame, metric: str, labels: dict[str, str]) -> str:
    if metric in labels:
        return labels[metric]
    units = [u for u in rows.loc[rows["metric"] == metric, "unit"] if u and not u.startswith("not measured")]
    return f"{_short(metric)} ({units[0]})" if units else metric.replace("_", " ")


def totals(table: pd.DataFrame, run: dict[str, Any]) -> dict[str, int]:
    """Counts per verdict: from the test outcomes when run.json has them, else from the table."""
    outcomes = [o for o in run.get("outcomes", []) if isinstance(o, dict)]
    if outcomes:
        verdicts = [_verdict_of(o) for o in outcomes]
    else:
        heads = table[table["verdict"] != ""]
        verdicts = [worst(g["verdict"]) for _, g in heads.groupby(["method", "gate", "key"], sort=False)]
    return {v: sum(1 for x in verdicts if x == v) for v in VERDICTS}


def judged_line(outcomes: list[dict]) -> str:
    """'judged 26 of 127 checks (26 passed, 0 failed); 101 skipped, mostly (88): <reason>' so that a
    mostly-skipped green run cannot be mistaken for a full pass."""
    verdicts = [_verdict_of(o) for o in outcomes]
    judged = sum(v in ("pass", "fail", "error") for v in verdicts)
    skips = [o for o, v in zip(outcomes, verdicts) if v == "skip"]
    skipped = [str(o.get("message") or "") for o in skips]
    text = (f"judged {judged} of {len(outcomes)} checks ({verdicts.count('pass')} passed, "
            f"{verdicts.count('fail') + verdicts.count('error')} failed)")
    if not skipped:
        return text + "; none skipped"

    def shape(o, m: str) -> str:  # the reason without its method, key, names and numbers
        for word in (str(o.get("key") or ""), str(o.get("method") or "")):
            m = m.replace(word, "#") if word else m
        return re.sub(r"'[^']*'|\d+(?:\.\d+)?", "#", m)[:90]

    shapes = [shape(o, m) for o, m in zip(skips, skipped)]
    main = max(set(shapes), key=shapes.count)
    example = skipped[shapes.index(main)]
    return text + f"; {len(skipped)} skipped, mostly ({shapes.count(main)}): {example[:240]}"


def title_line(table: pd.DataFrame, run: dict[str, Any]) -> str:
    counts = totals(table, run)
    words = {"pass": "passed", "fail": "failed", "skip": "skipped",
             "error": "error" if counts["error"] == 1 else "errors"}
    count_text = ", ".join(f"{counts[v]} {words[v]}" for v in VERDICTS)
    about = [f"run {run.get('run_id') or '?'}", f"profile {run.get('profile') or '?'}",
             f"hardware {run.get('hardware') or '?'}", f"vLLM {run.get('vllm') or '?'}"]
    return f"{'FAILED' if counts['fail'] or counts['error'] else 'passed'}: {count_text} · {' · '.join(about)}"


def summary_markdown(table: pd.DataFrame, run: dict[str, Any]) -> str:
    """summary.md: one line of totals, then per gate a table and the messages of what did not pass."""
    table = normalize(table)
    lines = [f"# specgate: {title_line(table, run)}", ""]
    outcomes = [o for o in run.get("outcomes", []) if isinstance(o, dict)]
    if outcomes:
        lines += [f"**{judged_line(outcomes)}**", ""]
    notes = [n for n in run.get("notes", []) if not n.startswith("baselines: ")]  # the upgrade: below
    if notes:
        lines += [f"- {n}" for n in notes] + [""]
    about = [f"{k} {run[k]}" for k in ("torch", "git_revision", "started", "finished") if run.get(k)]
    if about:
        lines += [" · ".join(about), ""]
    upgrade = (run.get("baselines") or {}).get("upgrade")
    if upgrade:
        lines += [f"**{upgrade.replace(' -> ', ' → ')}**", ""]
        moved = moved_rows(table)
        lines += [f"## What moved ({upgrade.removeprefix('baselines: ').replace(' -> this run: ', ' → ')})", ""]
        if moved:
            lines += ["| method | gate | key | figure | baseline | this run | change |", "| --- | --- | --- | --- | ---: | ---: | ---: |"]
            lines += [f"| {m} | {g} | {k} | {f} | {fmt(b)} | {fmt(v)} | {c} |" for m, g, k, f, b, v, c in moved]
        else:
            lines.append("Every figure with a stored baseline came out the same.")
        lines.append("")
    gate_tables = _gate_tables(table, run)
    if not gate_tables:
        lines += ["No measurements were recorded in this run.", ""]
    for gt in gate_tables:
        lines += [f"## {gt.gate}", ""]
        lines.append("| " + " | ".join(gt.header) + " |")
        lines.append("| " + " | ".join("---" for _ in gt.header) + " |")
        for row, verdict in zip(gt.rows, gt.verdicts):
            cells = list(row)
            cells[2] = f"**{cells[2]}**" if verdict in ("fail", "error") else cells[2]
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        lines.append("")
        for verdict, message, where in gt.notes:
            lines.append(f"- **{verdict}** {', '.join(where)}: {_one_line(message)}")
        if gt.notes:
            lines.append("")
    for family, header, body in sweeps(table):
        lines += [f"## draft-length sweep: {family}", "", "| " + " | ".join(header) + " |",
                  "| " + " | ".join("---" for _ in header) + " |", *("| " + " | ".join(r) + " |" for r in body), ""]
    if run.get("summary_lines"):
        lines += ["## session", "", "```", *map(str, run["summary_lines"]), "```", ""]
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
    for method in _ordered(table["method"]):
        if hit := _sweep_family(method):
            families.setdefault(hit[0], {})[hit[1]] = method
    for family, by_k in families.items():
        levels = sorted({int(c) for c in table[(table["gate"] == "speedup") & table["method"].isin(by_k.values())
                                               & (table["metric"] == "speedup")]["concurrency"].dropna()})
        header = ["k", "mean acceptance length", "acceptance rate", *(f"speedup C={c}" for c in levels)]
        body, best = [], {}
        for k in sorted(by_k):
            rows = table[table["method"] == by_k[k]]
            acc = rows[rows["gate"] == "acceptance"]
            length = acc[acc["metric"] == "mean_acceptance_length"]["value"].mean()
            rate = acc[acc["metric"] == "acceptance_rate"]["value"].mean()
            cells = [str(k), fmt(length), fmt(rate)]
            for c in levels:
                hit = rows[(rows["gate"] == "speedup") & (rows["metric"] == "speedup") & (rows["concurrency"] == c)]
                cells.append(headline(hit.iloc[0]) if not hit.empty else "–")
                if not hit.empty:
                    for which, col in (("now", "value"), ("stored", "baseline")):
                        v = hit.iloc[0][col]
                        if _present(v) and v > best.get((which, c), (None, -1.0))[1]:
                            best[(which, c)] = (k, float(v))
            body.append(cells)
        body.append(["best k", "", "", *(f"k={best[('now', c)][0]}" + (f" (stored: k={best[('stored', c)][0]})"
                                                                        if ("stored", c) in best else "")
                                           if ("now", c) in best else "–" for c in levels)])
        out.append((family, header, body))
    return out


def moved_rows(table: pd.DataFrame, rtol: float = 0.005) -> list[tuple]:
    """(method, gate, key, figure, baseline, value, relative change) of every figure that moved from
    its stored baseline by more than `rtol` (per-position rates named by position)."""
    out = []
    for r in table.to_dict("records"):
        if not (_present(r["baseline"]) and _present(r["value"])):
            continue
        base, value = float(r["baseline"]), float(r["value"])
        change = (value - base) / abs(base) if base else (0.0 if value == base else math.inf)
        if abs(change) > rtol:
            figure = r["metric"] + (f"[{int(r['position'])}]" if _present(r["position"]) else "")
            out.append((r["method"], r["gate"], r["key"], figure, base, value, f"{change:+.1%}"))
    return out


# ---------------------------------------------------------------- plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _failing(rows: pd.DataFrame) -> bool:
    return bool(rows["verdict"].isin(("fail", "error")).any())


def plot_acceptance_heatmap(table: pd.DataFrame):
    """Methods x categories, mean acceptance length; each cell with its delta against the stored
    baseline; a red frame where the gate failed. None without acceptance rows."""
    rows = table[(table["gate"] == "acceptance") & (table["metric"] == "mean_acceptance_length")]
    if rows.empty:
        return None
    plt = _pyplot()
    import numpy as np

    methods, cats = _ordered(rows["method"]), _ordered(rows["key"], first="")
    cells = {(r["method"], r["key"]): r for r in rows.to_dict("records")}
    acc = table[(table["gate"] == "acceptance") & table["verdict"].isin(("fail", "error"))]
    failed = set(zip(acc["method"], acc["key"]))  # the mean length or any per-position rate failed
    values = np.array([[cells[m, c]["value"] if (m, c) in cells else np.nan for c in cats] for m in methods])
    fig, ax = plt.subplots(figsize=(1.7 * len(cats) + 2.8, 0.62 * len(methods) + 2.0))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#eeeeee")
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 2.0)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=min(1.0, lo), vmax=max(hi, lo + 1e-9),
                      aspect="auto")
    for i, m in enumerate(methods):
        for j, c in enumerate(cats):
            if (m, c) not in cells:
                ax.text(j, i, "no data", ha="center", va="center", fontsize=8, color="#777777")
                continue
            row = cells[m, c]
            base = row["baseline"]
            delta = f"Δ {row['value'] - base:+.2f}" if _present(base) else "no baseline"
            shade = image.cmap(image.norm(row["value"]))
            ink = "white" if 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.55 else "black"
            ax.text(j, i - 0.13, f"{row['value']:.2f}", ha="center", va="center", fontsize=10, fontweight="bold",
                    color=ink)
            ax.text(j, i + 0.2, delta + (" FAIL" if (m, c) in failed else ""), ha="center", va="center",
                    fontsize=7.5, color=ink)
            if (m, c) in failed:
                ax.add_patch(plt.Rectangle((j - 0.47, i - 0.45), 0.94, 0.9, fill=False, edgecolor="#e41a1c",
                                           linewidth=3))
    ax.set_xticks(range(len(cats)), [c.replace("_", " ") for c in cats], rotation=20, ha="right")
    ax.set_yticks(range(len(methods)), methods)
    ax.set_xlabel("prompt category")
    ax.set_title("Mean acceptance length per method and category\n(Δ vs stored baseline; red frame = gate failed)",
                 fontsize=11)
    fig.colorbar(image, ax=ax, label="mean acceptance length (tokens / step)", shrink=0.9)
    fig.tight_layout()
    return fig


def _grid(plt, n: int, width: float = 3.6, height: float = 2.9):
    """Small multiples, four per row, sharing the y axis; the slots left over hold the legend."""
    cols = min(n, 4)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(width * cols + 0.6, height * nrows + 1.0), sharey=True,
                             squeeze=False)
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat[:n], flat[n:]


def _legend(fig, spare: list, handles: list, ncol: int) -> float:
    """The legend in a free grid slot when there is one, else under the plots; returns the share of
    the figure's height to keep free at the bottom for it."""
    if spare:
        spare[0].legend(handles=handles, loc="center", fontsize=9, frameon=False)
        return 0.0
    ncol = max(1, min(ncol, int(fig.get_figwidth() // 2.2)))  # ~2.2 inches per legend entry
    legend_h = 0.3 * math.ceil(len(handles) / ncol) + 0.15
    fig.set_figheight(fig.get_figheight() + legend_h)  # room below the plots, not on top of them
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    return legend_h / fig.get_figheight()


def plot_position_curves(table: pd.DataFrame):
    """Per method, the acceptance rate at each draft position, one line per category; the stored
    baseline dashed in the same colour. None without per-position rows."""
    rows = table[(table["gate"] == "acceptance") & (table["metric"] == "position_rate")].dropna(subset=["position"])
    if rows.empty:
        return None
    plt = _pyplot()
    methods, cats = _ordered(rows["method"]), _ordered(rows["key"], first="")
    palette = plt.get_cmap("tab10" if len(cats) <= 10 else "tab20")  # SPEED-Bench has 11 categories
    colors = {c: palette(i % palette.N) for i, c in enumerate(cats)}
    fig, axes, spare = _grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        mrows = rows[rows["method"] == method]
        positions = sorted(int(p) for p in mrows["position"].unique())
        for cat in cats:
            crow = mrows[mrows["key"] == cat].sort_values("position")
            if crow.empty:
                continue
            ax.plot(crow["position"], crow["value"], marker="o", color=colors[cat], linewidth=1.6, markersize=4)
            base = crow.dropna(subset=["baseline"])
            if not base.empty:
                ax.plot(base["position"], base["baseline"], linestyle="--", color=colors[cat], linewidth=1,
                        alpha=0.8)
            bad = crow[crow["verdict"].isin(("fail", "error"))]
            if not bad.empty:
                ax.scatter(bad["position"], bad["value"], s=90, facecolors="none", edgecolors="#e41a1c",
                           linewidths=2, zorder=5)
        failed = _failing(table[(table["gate"] == "acceptance") & (table["method"] == method)])
        ax.set_title(method, fontsize=10, color="#c00000" if failed else "black")
        ax.set_xticks(positions)
        ax.set_xlim(positions[0] - 0.4, positions[-1] + 0.4)
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.set_xlabel("draft position")
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("acceptance rate")
    handles = [plt.Line2D([], [], color=colors[c], marker="o", label=c.replace("_", " ")) for c in cats]
    handles += [plt.Line2D([], [], color="gray", linestyle="--", label="stored baseline"),
                plt.Line2D([], [], color="#e41a1c", marker="o", markerfacecolor="none", linestyle="none",
                           label="below floor")]
    bottom = _legend(fig, spare, handles, ncol=4)
    fig.suptitle("Per-position acceptance rate (solid = this run, dashed = stored baseline)", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def _concurrency(rows: pd.DataFrame) -> pd.Series:
    parsed = pd.to_numeric(rows["key"].str.extract(r"(\d+)", expand=False), errors="coerce")
    return rows["concurrency"].fillna(parsed)


def plot_speedup(table: pd.DataFrame):
    """Per method, the measured speedup at each concurrency with its confidence interval, the floor
    it is held to, the stored baseline and the analytic expectation. None without speedup rows."""
    rows = table[(table["gate"] == "speedup") & (table["method"] != BASELINE_METHOD)].copy()
    rows["c"] = _concurrency(rows)
    speed = rows[rows["metric"] == "speedup"].dropna(subset=["c"])
    if speed.empty:
        return None
    plt = _pyplot()
    methods = _ordered(speed["method"])
    fig, axes, spare = _grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        s = speed[speed["method"] == method].sort_values("c")
        low = (s["value"] - s["ci_low"]).clip(lower=0).fillna(0)
        high = (s["ci_high"] - s["value"]).clip(lower=0).fillna(0)
        bad = s["verdict"].isin(("fail", "error"))
        for mask, color in ((~bad, "#1f77b4"), (bad, "#e41a1c")):
            if mask.any():
                ax.errorbar(s["c"][mask], s["value"][mask], yerr=[low[mask], high[mask]], fmt="o", color=color,
                            capsize=4, markersize=6, zorder=4)
        ax.plot(s["c"], s["value"], color="#1f77b4", linewidth=1, alpha=0.6)
        floor = s.dropna(subset=["bound"])
        if not floor.empty:
            ax.plot(floor["c"], floor["bound"], color="#e41a1c", linestyle="--", linewidth=1.2, marker="_",
                    markersize=12)
        base = s.dropna(subset=["baseline"])
        if not base.empty:
            ax.scatter(base["c"], base["baseline"], marker="x", color="#444444", zorder=3)
        else:
            ax.text(0.5, 0.04, "no stored baseline: not gated", transform=ax.transAxes, ha="center", fontsize=8,
                    color="#777777")
        exp = rows[(rows["method"] == method) & (rows["metric"] == "expected_speedup")].dropna(subset=["c"])
        if not exp.empty:
            exp = exp.sort_values("c")
            ax.plot(exp["c"], exp["value"], color="#2ca02c", linestyle=":", linewidth=1.4)
        ax.axhline(1.0, color="black", linewidth=0.8, alpha=0.5)
        cross = table[(table["gate"] == "speedup") & (table["method"] == method) & (table["metric"] == "crossover_concurrency")]
        if not cross.empty and _present(cross.iloc[0]["value"]):
            ax.axvline(float(cross.iloc[0]["value"]), color="#ff7f00", linestyle="-.", linewidth=1.2)
            ax.text(float(cross.iloc[0]["value"]), ax.get_ylim()[1], " crossover", color="#ff7f00", fontsize=8, va="top")
        ax.set_xscale("log", base=2)
        levels = sorted(s["c"].unique())
        ax.set_xticks(levels, [str(int(c)) for c in levels])
        ax.minorticks_off()
        ax.set_title(method, fontsize=10, color="#c00000" if bad.any() else "black")
        ax.set_xlabel("concurrency")
        ax.grid(alpha=0.3)
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("speedup over baseline (×)")
    handles = [plt.Line2D([], [], color="#1f77b4", marker="o", label="measured (median, CI)"),
               plt.Line2D([], [], color="#e41a1c", marker="o", linestyle="none", label="below floor"),
               plt.Line2D([], [], color="#e41a1c", linestyle="--", label="floor"),
               plt.Line2D([], [], color="#444444", marker="x", linestyle="none", label="stored baseline"),
               plt.Line2D([], [], color="#2ca02c", linestyle=":", label="expected (acceptance model)")]
    bottom = _legend(fig, spare, handles, ncol=5)
    fig.suptitle("Speedup vs concurrency (throughput ratio to the baseline engine)", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def plot_memory(table: pd.DataFrame):
    """Per method, each memory figure measured against its stored baseline and ceiling. None
    without memory overhead rows."""
    rows = table[(table["gate"] == "memory") & (table["method"] != BASELINE_METHOD)]
    panels = [(m, label) for m, label in _MEMORY_PANELS if (rows["metric"] == m).any()]
    if not panels:
        return None
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter

    methods = _ordered(rows[rows["metric"].isin([m for m, _ in panels])]["method"])
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.2, 0.42 * len(methods) + 1.9),
                             sharey=True, squeeze=False)
    for ax, (metric, label) in zip(axes[0], panels):
        top = 0.0
        for i, method in enumerate(methods):
            hit = rows[(rows["method"] == method) & (rows["metric"] == metric)]
            if hit.empty:
                continue
            row = hit.iloc[0]
            failed = row["verdict"] in ("fail", "error")
            ax.barh(i, row["value"], color="#fc9272" if failed else "#6baed6", height=0.6)
            right = max(float(row[c]) for c in ("value", "bound") if _present(row[c]))  # label clear of the ceiling
            ax.text(right, i, f"  {fmt(row['value'])}", va="center", fontsize=8,
                    color="#b00000" if failed else "#333333", fontweight="bold" if failed else "normal")
            if _present(row["baseline"]):
                ax.plot([row["baseline"]] * 2, [i - 0.38, i + 0.38], color="black", linewidth=2, zorder=4)
            if _present(row["bound"]):
                ax.plot([row["bound"]] * 2, [i - 0.42, i + 0.42], color="#b2182b", linewidth=2, linestyle=(0, (2, 1)),
                        zorder=5)
            top = max([top] + [float(row[c]) for c in ("value", "baseline", "bound") if _present(row[c])])
        ax.set_title(label, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, top * 1.25 or 1.0)
        if top >= 10000:  # 200k, not 200,000: tick labels of a narrow panel must not run together
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:,.0f}k" if x else "0"))
        ax.set_yticks(range(len(methods)), methods)
    axes[0][0].invert_yaxis()  # first method on top; the axes share y
    handles = [plt.Rectangle((0, 0), 1, 1, color="#6baed6", label="measured"),
               plt.Rectangle((0, 0), 1, 1, color="#fc9272", label="over ceiling"),
               plt.Line2D([], [], color="black", linewidth=2, label="stored baseline"),
               plt.Line2D([], [], color="#b2182b", linewidth=2, linestyle=(0, (2, 1)), label="ceiling")]
    bottom = _legend(fig, [], handles, ncol=4)
    engine = table[(table["gate"] == "memory") & (table["method"] == BASELINE_METHOD)]
    sub = ", ".join(f"{_short(r['metric'])} {fmt(r['value'])} {r['unit']}".strip() for _, r in engine.iterrows())
    fig.suptitle("Memory overhead per method vs the baseline engine" + (f"\n(baseline engine: {sub})" if sub else ""),
                 fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def _short(metric: str) -> str:
    """'peak_process_mib' -> 'peak process': the unit is printed after the number."""
    for suffix in ("_mib", "_tokens", "_ms", "_s"):
        metric = metric.removesuffix(suffix)
    return metric.replace("_", " ")


def plot_divergence_gaps(table: pd.DataFrame):
    """Per method, the baseline's logprob gap (nats) between its token and the method's at each first
    divergence, with the tie-aware margin: where to set `logprob_margin`. None without divergences."""
    rows = table[(table["gate"] == "equivalence") & (table["metric"] == "logprob_gap")].dropna(subset=["value"])
    if rows.empty:
        return None
    plt = _pyplot()
    methods = _ordered(rows["method"])
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(methods) + 1.8))
    for i, method in enumerate(methods):
        gaps = rows[rows["method"] == method]["value"]
        ax.scatter(gaps, [i] * len(gaps), alpha=0.6, s=22, color="#1f77b4")
        ax.text(float(gaps.max()), i + 0.25, f" {len(gaps)} divergences, p50 {gaps.median():.3g}, max {gaps.max():.3g}",
                fontsize=8, va="center")
    margins = rows.dropna(subset=["bound"])["bound"]
    if not margins.empty:
        ax.axvline(float(margins.iloc[0]), color="#e41a1c", linestyle="--", label=f"logprob_margin {margins.iloc[0]:g}")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_yticks(range(len(methods)), methods)
    ax.set_ylim(-0.6, len(methods) - 0.4)
    ax.set_xlabel("baseline logprob gap at the first divergence (nats)")
    ax.set_title("Greedy divergences: how close the two tokens were in the baseline's own logprobs", fontsize=11)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


PLOTS: dict[str, tuple[str, Callable]] = {
    "acceptance_heatmap": ("Acceptance by category", plot_acceptance_heatmap),
    "acceptance_positions": ("Per-position acceptance", plot_position_curves),
    "speedup": ("Speedup vs concurrency", plot_speedup),
    "memory": ("Memory overhead", plot_memory),
    "divergence_gaps": ("Greedy divergences", plot_divergence_gaps),
}
_NO_DATA = {
    "acceptance_heatmap": "No acceptance measurements in this run, so there is no acceptance heatmap.",
    "acceptance_positions": "No per-position acceptance rates in this run, so there are no position curves.",
    "speedup": "No speedup measurements in this run, so there is no speedup plot.",
    "memory": "No memory overhead measurements in this run, so there is no memory plot.",
    "divergence_gaps": "No greedy output diverged from the baseline's in this run.",
}


def render_plots(table: pd.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Every plot the table has data for, as PNG files in out_dir (name -> path)."""
    out_dir = Path(out_dir)
    table = normalize(table)
    paths = {}
    plt = None
    for name, (_, plot) in PLOTS.items():
        fig = plot(table)
        if fig is None:
            continue
        plt = plt or _pyplot()
        out_dir.mkdir(parents=True, exist_ok=True)
        paths[name] = out_dir / f"{name}.png"
        fig.savefig(paths[name], format="png", dpi=DPI)
        plt.close(fig)
    return paths


# ---------------------------------------------------------------- report.html

_CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 2em auto; max-width: 1400px;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.4em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h1.fail { color: #b00000; } h1.pass { color: #1a7f37; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0 1em; }
th, td { border: 1px solid #d0d7de; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.v-pass { background: #dafbe1; } td.v-fail, td.v-error { background: #ffd7d5; font-weight: bold; }
td.v-skip { background: #fff8c5; }
img { max-width: 100%; border: 1px solid #eee; }
ul.notes li { margin: .3em 0; white-space: pre-wrap; font-size: .9em; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .85em; }
.meta { color: #555; } .none { color: #777; font-style: italic; }
"""


def _png_uri(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def report_html(table: pd.DataFrame, run: dict[str, Any], plot_files: dict[str, Path] | None = None) -> str:
    """The self-contained report: title, plots (embedded PNGs), the summary tables and messages."""
    table = normalize(table)
    esc = html.escape
    counts = totals(table, run)
    state = "fail" if counts["fail"] or counts["error"] else "pass"
    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             f"<title>specgate {esc(str(run.get('run_id') or ''))}</title><style>{_CSS}</style></head><body>",
             f"<h1 class='{state}'>specgate: {esc(title_line(table, run))}</h1>"]
    about = [f"{k} {run[k]}" for k in ("torch", "git_revision", "started", "finished", "profile_path") if run.get(k)]
    if about:
        parts.append(f"<p class='meta'>{esc(' · '.join(map(str, about)))}</p>")
    if upgrade := (run.get("baselines") or {}).get("upgrade"):
        moved = moved_rows(table)
        parts.append(f"<h2>{esc(upgrade.replace(' -> ', ' → '))}</h2>")
        parts.append("<table><tr>" + "".join(f"<th>{h}</th>" for h in ("method", "gate", "key", "figure", "baseline",
                                                                        "this run", "change")) + "</tr>" + "".join(
            "<tr>" + "".join(f"<td>{esc(fmt(c) if isinstance(c, float) else str(c))}</td>" for c in row) + "</tr>"
            for row in moved) + "</table>" if moved else "<p class='none'>Every figure with a stored baseline came out the same.</p>")
    gate_tables = _gate_tables(table, run)
    failures = [(gt.gate, v, m, where) for gt in gate_tables for v, m, where in gt.notes if v in ("fail", "error")]
    if failures:  # what a reader opened the report for, before any plot
        parts.append("<h2>What did not pass</h2><ul class='notes'>" + "".join(
            f"<li><b>{esc(v)}</b> {esc(gate)} · {esc(', '.join(where))}: {esc(m)}</li>"
            for gate, v, m, where in failures) + "</ul>")
    plt = None
    for name, (heading, plot) in PLOTS.items():
        parts.append(f"<h2>{esc(heading)}</h2>")
        if plot_files and name in plot_files:
            data = Path(plot_files[name]).read_bytes()
            uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
        else:
            fig = plot(table)
            if fig is None:
                parts.append(f"<p class='none'>{esc(_NO_DATA[name])}</p>")
                continue
            plt = plt or _pyplot()
            uri = _png_uri(fig)
            plt.close(fig)
        parts.append(f"<img alt='{esc(heading)}' src='{uri}'>")
    parts.append("<h2>Results per gate</h2>")
    if not gate_tables:
        parts.append("<p class='none'>No measurements were recorded in this run.</p>")
    for gt in gate_tables:
        parts.append(f"<h3>{esc(gt.gate)}</h3><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in gt.header)
                     + "</tr>")
        for row, verdict in zip(gt.rows, gt.verdicts):
            cells = [f"<td class='v-{esc(verdict)}'>{esc(c)}</td>" if i == 2 else f"<td>{esc(c)}</td>"
                     for i, c in enumerate(row)]
            parts.append("<tr>" + "".join(cells) + "</tr>")
        parts.append("</table>")
        if gt.notes:
            parts.append("<ul class='notes'>" + "".join(
                f"<li><b>{esc(v)}</b> {esc(', '.join(where))}: {esc(m)}</li>" for v, m, where in gt.notes) + "</ul>")
    for family, header, body in sweeps(table):
        parts.append(f"<h2>Draft-length sweep: {esc(family)}</h2><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header)
                     + "</tr>" + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in body) + "</table>")
    if run.get("summary_lines"):
        parts.append("<h2>Session</h2><pre>" + esc("\n".join(map(str, run["summary_lines"]))) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# ---------------------------------------------------------------- entry point


def write_report(run_dir: Path, table: pd.DataFrame, run: dict[str, Any], *, step_summary: bool = True
                 ) -> dict[str, Path]:
    """summary.md, report.html and plots/*.png in run_dir; summary.md is appended to
    $GITHUB_STEP_SUMMARY when that is set (and step_summary is true), so Actions shows it on the
    run's page. Returns name -> path of everything written."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = normalize(table)
    paths = {"summary": run_dir / "summary.md", "html": run_dir / "report.html"}
    markdown = summary_markdown(table, run)
    paths["summary"].write_text(markdown, encoding="utf-8")
    plot_files = render_plots(table, run_dir / "plots")
    paths["html"].write_text(report_html(table, run, plot_files), encoding="utf-8")
    paths.update({f"plot:{name}": path for name, path in plot_files.items()})
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and target:
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(markdown + "\n")
        except OSError as exc:
            warnings.warn(f"could not append the summary to $GITHUB_STEP_SUMMARY ({target}): {exc}", stacklevel=2)
    return paths
