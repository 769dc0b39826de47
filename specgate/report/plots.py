"""The run's plots: PNGs rendered with matplotlib's Agg backend. Every marker and colour follows a
verdict the checks recorded (a point is red because its check failed, never because the plot compared
numbers itself).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from specgate.checks import FAILED, Verdict
from specgate.formatting import fmt, present
from specgate.gates import ACCEPTANCE, EQUIVALENCE, MEMORY, PREFIX_SOAK, SPEEDUP
from specgate.report.data import BASELINE_METHOD, metric_label, normalized, ordered
from specgate.report.distribution import plot_request_histograms, plot_windows
from specgate.report.figure import concurrency_of, failing, grid, legend, pyplot

DPI = 110  # 1650 px wide for four panels: sharp in a browser, ~100 KB per plot
_MEMORY_PANELS = (
    ("static_mib_measured", "drafter weights (MiB)"),
    ("kv_tokens_lost", "KV-cache tokens lost"),
    ("process_mib", "process memory over baseline (MiB)"),
)


def plot_acceptance_heatmap(table: pd.DataFrame):
    """Methods x categories, mean acceptance length; each cell with its delta against the stored
    baseline; a red frame where the gate failed. None without acceptance rows."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["metric"] == "mean_acceptance_length")]
    if rows.empty:
        return None
    plt = pyplot()
    import numpy as np

    methods, cats = ordered(rows["method"]), ordered(rows["key"], first="")
    cells = {(r["method"], r["key"]): r for r in rows.to_dict("records")}
    acc = table[(table["gate"] == ACCEPTANCE) & table["verdict"].isin(FAILED)]
    failed = set(zip(acc["method"], acc["key"]))  # the mean length or any per-position rate failed
    values = np.array([[cells[m, c]["value"] if (m, c) in cells else np.nan for c in cats] for m in methods])
    fig, ax = plt.subplots(figsize=(1.7 * len(cats) + 2.8, 0.62 * len(methods) + 2.0))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#eeeeee")
    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (1.0, 2.0)
    image = ax.imshow(
        np.ma.masked_invalid(values), cmap=cmap, vmin=min(1.0, lo), vmax=max(hi, lo + 1e-9), aspect="auto"
    )
    for i, m in enumerate(methods):
        for j, c in enumerate(cats):
            if (m, c) not in cells:
                ax.text(j, i, "no data", ha="center", va="center", fontsize=8, color="#777777")
                continue
            row = cells[m, c]
            base = row["baseline"]
            delta = f"Δ {row['value'] - base:+.2f}" if present(base) else "no baseline"
            shade = image.cmap(image.norm(row["value"]))
            ink = "white" if 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.55 else "black"
            ax.text(
                j, i - 0.13, f"{row['value']:.2f}", ha="center", va="center", fontsize=10, fontweight="bold", color=ink
            )
            ax.text(
                j,
                i + 0.2,
                delta + (" FAIL" if (m, c) in failed else ""),
                ha="center",
                va="center",
                fontsize=7.5,
                color=ink,
            )
            if (m, c) in failed:
                ax.add_patch(
                    plt.Rectangle((j - 0.47, i - 0.45), 0.94, 0.9, fill=False, edgecolor="#e41a1c", linewidth=3)
                )
    ax.set_xticks(range(len(cats)), [c.replace("_", " ") for c in cats], rotation=20, ha="right")
    ax.set_yticks(range(len(methods)), methods)
    ax.set_xlabel("prompt category")
    ax.set_title(
        "Mean acceptance length per method and category\n(Δ vs stored baseline; red frame = gate failed)", fontsize=11
    )
    fig.colorbar(image, ax=ax, label="mean acceptance length (tokens / step)", shrink=0.9)
    fig.tight_layout()
    return fig


def plot_position_curves(table: pd.DataFrame):
    """Per method, the acceptance rate at each draft position, one line per category; the stored
    baseline dashed in the same colour. None without per-position rows."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["metric"] == "position_rate")].dropna(subset=["position"])
    if rows.empty:
        return None
    plt = pyplot()
    methods, cats = ordered(rows["method"]), ordered(rows["key"], first="")
    palette = plt.get_cmap("tab10" if len(cats) <= 10 else "tab20")  # SPEED-Bench has 11 categories
    colors = {c: palette(i % palette.N) for i, c in enumerate(cats)}
    fig, axes, spare = grid(plt, len(methods))
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
                ax.plot(base["position"], base["baseline"], linestyle="--", color=colors[cat], linewidth=1, alpha=0.8)
            bad = crow[crow["verdict"].isin(FAILED)]
            if not bad.empty:
                ax.scatter(
                    bad["position"], bad["value"], s=90, facecolors="none", edgecolors="#e41a1c", linewidths=2, zorder=5
                )
        failed = failing(table[(table["gate"] == ACCEPTANCE) & (table["method"] == method)])
        ax.set_title(method, fontsize=10, color="#c00000" if failed else "black")
        ax.set_xticks(positions)
        ax.set_xlim(positions[0] - 0.4, positions[-1] + 0.4)
        ax.set_ylim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.set_xlabel("draft position")
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("acceptance rate")
    handles = [plt.Line2D([], [], color=colors[c], marker="o", label=c.replace("_", " ")) for c in cats]
    handles += [
        plt.Line2D([], [], color="gray", linestyle="--", label="stored baseline"),
        plt.Line2D([], [], color="#e41a1c", marker="o", markerfacecolor="none", linestyle="none", label="below floor"),
    ]
    bottom = legend(fig, spare, handles, ncol=4)
    fig.suptitle("Per-position acceptance rate (solid = this run, dashed = stored baseline)", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


# A level's marker says its verdict, never the plot's own comparison: a canary whose interval straddles
# its floor failed (it was NOT caught) with its median below the floor, and is drawn as failed.
_SPEEDUP_MARKERS = {  # verdict -> (colour, face colour, legend)
    Verdict.PASS.value: ("#1f77b4", None, "measured (median, CI): passed"),
    Verdict.FAIL.value: ("#e41a1c", None, "failed its check (see the message)"),
    Verdict.SKIP.value: ("#888888", "white", "not judged (skip)"),
}
# the marker a row's verdict gets (a row without one: a passed level's figure); plain strings, as pandas compares
_SPEEDUP_VERDICT = {"": Verdict.PASS.value, **{v.value: (Verdict.FAIL if v in FAILED else v).value for v in Verdict}}


def _speedup_markers(ax, s: pd.DataFrame) -> None:
    """Each level's median with its confidence interval, marked by its verdict."""
    low = (s["value"] - s["ci_low"]).clip(lower=0).fillna(0)
    high = (s["ci_high"] - s["value"]).clip(lower=0).fillna(0)
    for verdict, (color, face, _) in _SPEEDUP_MARKERS.items():
        mask = s["verdict"].map(lambda v: _SPEEDUP_VERDICT.get(v, Verdict.PASS.value)) == verdict
        if mask.any():
            ax.errorbar(
                s["c"][mask],
                s["value"][mask],
                yerr=[low[mask], high[mask]],
                fmt="o",
                color=color,
                markerfacecolor=face or color,
                capsize=4,
                markersize=6,
                zorder=4,
            )


def plot_speedup(table: pd.DataFrame):
    """Per method, the measured speedup at each concurrency with its confidence interval, the floor
    it is held to, the stored baseline and the analytic expectation. None without speedup rows."""
    rows = table[(table["gate"] == SPEEDUP) & (table["method"] != BASELINE_METHOD)].copy()
    rows["c"] = concurrency_of(rows)
    speed = rows[rows["metric"] == "speedup"].dropna(subset=["c"])
    if speed.empty:
        return None
    plt = pyplot()
    methods = ordered(speed["method"])
    fig, axes, spare = grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        s = speed[speed["method"] == method].sort_values("c")
        bad = s["verdict"].isin(FAILED)
        _speedup_markers(ax, s)
        ax.plot(s["c"], s["value"], color="#1f77b4", linewidth=1, alpha=0.6)
        floor = s.dropna(subset=["bound"])
        if not floor.empty:
            ax.plot(
                floor["c"], floor["bound"], color="#e41a1c", linestyle="--", linewidth=1.2, marker="_", markersize=12
            )
        base = s.dropna(subset=["baseline"])
        if not base.empty:
            ax.scatter(base["c"], base["baseline"], marker="x", color="#444444", zorder=3)
        else:
            ax.text(
                0.5,
                0.04,
                "no stored baseline: not gated",
                transform=ax.transAxes,
                ha="center",
                fontsize=8,
                color="#777777",
            )
        exp = rows[(rows["method"] == method) & (rows["metric"] == "expected_speedup")].dropna(subset=["c"])
        if not exp.empty:
            exp = exp.sort_values("c")
            ax.plot(exp["c"], exp["value"], color="#2ca02c", linestyle=":", linewidth=1.4)
        ax.axhline(1.0, color="black", linewidth=0.8, alpha=0.5)
        cross = table[
            (table["gate"] == SPEEDUP) & (table["method"] == method) & (table["metric"] == "crossover_concurrency")
        ]
        if not cross.empty and present(cross.iloc[0]["value"]):
            ax.axvline(float(cross.iloc[0]["value"]), color="#ff7f00", linestyle="-.", linewidth=1.2)
            ax.text(
                float(cross.iloc[0]["value"]), ax.get_ylim()[1], " crossover", color="#ff7f00", fontsize=8, va="top"
            )
        ax.set_xscale("log", base=2)
        levels = sorted(s["c"].unique())
        ax.set_xticks(levels, [str(int(c)) for c in levels])
        ax.minorticks_off()
        ax.set_title(method, fontsize=10, color="#c00000" if bad.any() else "black")
        ax.set_xlabel("concurrency")
        ax.grid(alpha=0.3)
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("speedup over baseline (×)")
    handles = [
        plt.Line2D([], [], color=color, marker="o", markerfacecolor=face or color, linestyle="none", label=label)
        for color, face, label in _SPEEDUP_MARKERS.values()
    ]
    handles += [
        plt.Line2D([], [], color="#e41a1c", linestyle="--", label="floor"),
        plt.Line2D([], [], color="#444444", marker="x", linestyle="none", label="stored baseline"),
        plt.Line2D([], [], color="#2ca02c", linestyle=":", label="expected (acceptance model)"),
    ]
    bottom = legend(fig, spare, handles, ncol=6)
    fig.suptitle("Speedup vs concurrency (throughput ratio to the baseline engine)", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def plot_memory(table: pd.DataFrame):
    """Per method, each memory figure measured against its stored baseline and ceiling. None
    without memory overhead rows."""
    rows = table[(table["gate"] == MEMORY) & (table["method"] != BASELINE_METHOD)]
    panels = [(m, label) for m, label in _MEMORY_PANELS if (rows["metric"] == m).any()]
    if not panels:
        return None
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    methods = ordered(rows[rows["metric"].isin([m for m, _ in panels])]["method"])
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.2 * len(panels) + 1.2, 0.42 * len(methods) + 1.9), sharey=True, squeeze=False
    )
    for ax, (metric, label) in zip(axes[0], panels):
        top = 0.0
        for i, method in enumerate(methods):
            hit = rows[(rows["method"] == method) & (rows["metric"] == metric)]
            if hit.empty:
                continue
            row = hit.iloc[0]
            failed = row["verdict"] in FAILED
            ax.barh(i, row["value"], color="#fc9272" if failed else "#6baed6", height=0.6)
            right = max(float(row[c]) for c in ("value", "bound") if present(row[c]))  # label clear of the ceiling
            ax.text(
                right,
                i,
                f"  {fmt(row['value'])}",
                va="center",
                fontsize=8,
                color="#b00000" if failed else "#333333",
                fontweight="bold" if failed else "normal",
            )
            if present(row["baseline"]):
                ax.plot([row["baseline"]] * 2, [i - 0.38, i + 0.38], color="black", linewidth=2, zorder=4)
            if present(row["bound"]):
                ax.plot(
                    [row["bound"]] * 2,
                    [i - 0.42, i + 0.42],
                    color="#b2182b",
                    linewidth=2,
                    linestyle=(0, (2, 1)),
                    zorder=5,
                )
            top = max([top] + [float(row[c]) for c in ("value", "baseline", "bound") if present(row[c])])
        ax.set_title(label, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        ax.set_xlim(0, top * 1.25 or 1.0)
        if top >= 10000:  # 200k, not 200,000: tick labels of a narrow panel must not run together
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1000:,.0f}k" if x else "0"))
        ax.set_yticks(range(len(methods)), methods)
    axes[0][0].invert_yaxis()  # first method on top; the axes share y
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="#6baed6", label="measured"),
        plt.Rectangle((0, 0), 1, 1, color="#fc9272", label="over ceiling"),
        plt.Line2D([], [], color="black", linewidth=2, label="stored baseline"),
        plt.Line2D([], [], color="#b2182b", linewidth=2, linestyle=(0, (2, 1)), label="ceiling"),
    ]
    bottom = legend(fig, [], handles, ncol=4)
    engine = table[(table["gate"] == MEMORY) & (table["method"] == BASELINE_METHOD)]
    sub = ", ".join(f"{metric_label(r['metric'])} {fmt(r['value'])} {r['unit']}".strip() for _, r in engine.iterrows())
    fig.suptitle(
        "Memory overhead per method vs the baseline engine" + (f"\n(baseline engine: {sub})" if sub else ""),
        fontsize=11,
    )
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def plot_divergence_gaps(table: pd.DataFrame):
    """Per method, the baseline's logprob gap (nats) between its token and the method's at each first
    divergence, with the tie-aware margin: where to set `logprob_margin`. None without divergences."""
    rows = table[(table["gate"] == EQUIVALENCE) & (table["metric"] == "logprob_gap")].dropna(subset=["value"])
    if rows.empty:
        return None
    plt = pyplot()
    methods = ordered(rows["method"])
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(methods) + 1.8))
    for i, method in enumerate(methods):
        gaps = rows[rows["method"] == method]["value"]
        ax.scatter(gaps, [i] * len(gaps), alpha=0.6, s=22, color="#1f77b4")
        ax.text(
            float(gaps.max()),
            i + 0.25,
            f" {len(gaps)} divergences, p50 {gaps.median():.3g}, max {gaps.max():.3g}",
            fontsize=8,
            va="center",
        )
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


def plot_prefix_soak(table: pd.DataFrame):
    """Per method, mean acceptance length and the prefix-cache hit rate per soak round (round 1 cold):
    a decline with reuse is what vllm-project/vllm#41838 looked like. None without a soak."""
    rows = table[
        (table["gate"] == PREFIX_SOAK) & table["metric"].isin(("round_acceptance_length", "round_prefix_hit_rate"))
    ]
    rows = rows.dropna(subset=["position"])
    if rows.empty:
        return None
    plt = pyplot()
    methods = ordered(rows["method"])
    fig, axes, spare = grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        mrows = rows[rows["method"] == method]
        length = mrows[mrows["metric"] == "round_acceptance_length"].sort_values("position")
        hits = mrows[mrows["metric"] == "round_prefix_hit_rate"].sort_values("position")
        ax.plot(length["position"], length["value"], marker="o", color="#1f77b4", linewidth=1.6)
        floor = table[
            (table["gate"] == PREFIX_SOAK) & (table["method"] == method) & (table["metric"] == "mean_acceptance_length")
        ]["bound"].dropna()
        if not floor.empty:
            ax.axhline(float(floor.iloc[0]), color="#e41a1c", linestyle="--", linewidth=1)
        twin = ax.twinx()
        twin.plot(hits["position"], hits["value"], marker="s", color="#2ca02c", linewidth=1, alpha=0.8)
        twin.set_ylim(0, 1.05)
        failed = failing(table[(table["gate"] == PREFIX_SOAK) & (table["method"] == method)])
        ax.set_title(method, fontsize=10, color="#c00000" if failed else "black")
        ax.set_xticks(sorted(int(p) for p in length["position"]))
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("mean acceptance length")
    handles = [
        plt.Line2D([], [], color="#1f77b4", marker="o", label="mean acceptance length"),
        plt.Line2D([], [], color="#2ca02c", marker="s", label="prefix-cache hit rate (right axis)"),
        plt.Line2D([], [], color="#e41a1c", linestyle="--", label="floor (round 1 x (1 - acceptance_rtol))"),
    ]
    bottom = legend(fig, spare, handles, ncol=3)
    fig.suptitle("Prefix-cache soak: acceptance per round", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


PLOTS: dict[str, tuple[str, Callable]] = {
    "acceptance_heatmap": ("Acceptance by category", plot_acceptance_heatmap),
    "acceptance_positions": ("Per-position acceptance", plot_position_curves),
    "acceptance_requests": ("Acceptance per request", plot_request_histograms),
    "acceptance_windows": ("Acceptance by output position", plot_windows),
    "speedup": ("Speedup vs concurrency", plot_speedup),
    "memory": ("Memory overhead", plot_memory),
    "divergence_gaps": ("Greedy divergences", plot_divergence_gaps),
    "prefix_soak": ("Prefix-cache soak", plot_prefix_soak),
}
NO_DATA = {
    "acceptance_heatmap": "No acceptance measurements in this run, so there is no acceptance heatmap.",
    "acceptance_positions": "No per-position acceptance rates in this run, so there are no position curves.",
    "acceptance_requests": "No per-request acceptance figures in this run, so there are no request histograms.",
    "acceptance_windows": "No acceptance figures by output window in this run, so there is no window plot.",
    "speedup": "No speedup measurements in this run, so there is no speedup plot.",
    "memory": "No memory overhead measurements in this run, so there is no memory plot.",
    "divergence_gaps": "No greedy output diverged from the baseline's in this run.",
    "prefix_soak": "No prefix-cache soak in this run (the profile has no [scenarios.prefix_soak]).",
}


def render_plots(table: pd.DataFrame, out_dir: Path) -> tuple[dict[str, Path], dict[str, str]]:
    """Every plot the table has data for, as PNG files in out_dir (name -> path), and name -> why for a
    plot that could not be drawn (a broken font or a full disk must not cost the run its report)."""
    out_dir = Path(out_dir)
    table = normalized(table)
    paths, failed = {}, {}
    plt = None
    for name, (_, plot) in PLOTS.items():
        try:
            fig = plot(table)
            if fig is None:
                continue
            plt = plt or pyplot()
            out_dir.mkdir(parents=True, exist_ok=True)
            path = out_dir / f"{name}.png"
            fig.savefig(path, format="png", dpi=DPI)
            plt.close(fig)
            paths[name] = path
        except Exception as exc:
            failed[name] = not_drawn(exc)
    return paths, failed


def not_drawn(exc: Exception) -> str:
    return f"This plot could not be drawn ({type(exc).__name__}: {exc}); the tables below hold its figures."
