"""Acceptance as a distribution in summary.md and report.html (checks/distribution.py judged it): per method a
line of its requests' acceptance lengths (median, 10 % quantile, how many fell below their floor, the first and
last output window) with the stored figures beside, its five lowest requests by name; and two plots, each
method's histogram of per-request acceptance (this run against stored) and its tokens per step by output window.
"""

from __future__ import annotations

import pandas as pd

from specgate.checks import FAILED
from specgate.checks.distribution import BELOW_FLOOR, REQUEST, WINDOW
from specgate.figures.distribution import LENGTHS_FROM_ENGINE, WINDOWS_FROM_ENGINE, quantile
from specgate.formatting import fmt, present
from specgate.gates import ACCEPTANCE
from specgate.report.data import ordered
from specgate.report.figure import failing, grid, legend, pyplot

LOWEST = 5
HEADER = [
    "method",
    "requests",
    "median (stored)",
    "10 % quantile (stored)",
    "below floor",
    "first / last window",
    "from vLLM's figures: lengths, windows",
]


def _requests(table: pd.DataFrame) -> pd.DataFrame:
    rows = table[(table["gate"] == ACCEPTANCE) & table["metric"].astype(str).str.startswith(REQUEST)]
    return rows.assign(prompt=rows["metric"].str.slice(len(REQUEST), -1))


def _pair(now: float | None, then: float | None) -> str:
    if now is None:
        return "–"
    return fmt(now) + (f" ({fmt(then)})" if then is not None else "")


def _windows(table: pd.DataFrame, method: str) -> tuple[list, list]:
    """The method's tokens per step per output window, this run and stored, its categories' steps together
    (averaged over categories)."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["method"] == method) & (table["metric"] == WINDOW)]
    rows = rows.dropna(subset=["position"])
    if rows.empty:
        return [], []
    by = rows.groupby("position")
    return list(by["value"].mean()), [b if present(b) else None for b in by["baseline"].mean()]


def summary(table: pd.DataFrame) -> tuple[list[list[str]], list[str]]:
    """(a row per method, the lines naming each method's lowest requests)."""
    rows, lines = [], []
    requests = _requests(table)
    for method in ordered(requests["method"]):
        mine = requests[requests["method"] == method]
        now = [v for v in mine["value"] if present(v)]
        then = [v for v in mine["baseline"] if present(v)]
        below = _total(table, method, BELOW_FLOOR)  # as the check counted them, per category
        windows, stored = _windows(table, method)
        first_last = "–"
        if windows:
            first_last = f"{_pair(windows[0], stored[0])} / {_pair(windows[-1], stored[-1])}"
        rows.append(
            [
                method,
                str(len(now)),
                _pair(quantile(now, 0.5), quantile(then, 0.5)),
                _pair(quantile(now, 0.1), quantile(then, 0.1)),
                below,
                first_last,
                ", ".join(_share(table, method, name) for name in (LENGTHS_FROM_ENGINE, WINDOWS_FROM_ENGINE)),
            ]
        )
        lowest = mine[mine["value"].map(present)].sort_values("value").head(LOWEST)
        named = [
            f"{r['prompt']} {fmt(r['value'])}" + (f" ({fmt(r['baseline'])})" if present(r["baseline"]) else "")
            for r in lowest.to_dict("records")
        ]
        lines.append(f"{method}: lowest requests {', '.join(named)}")
    return rows, lines


def _total(table: pd.DataFrame, method: str, metric: str) -> str:
    """The method's figure summed over its categories ('–' where the check recorded none)."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["method"] == method) & (table["metric"] == metric)]
    values = [v for v in rows["value"] if present(v)]
    return "–" if not values else fmt(sum(values))


def _share(table: pd.DataFrame, method: str, metric: str) -> str:
    """How many of the method's figures vLLM's per-request counts gave (the rest came from the streamed steps)."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["method"] == method) & (table["metric"] == metric)]
    values = [v for v in rows["value"] if present(v)]
    return "–" if not values else f"{sum(values) / len(values):.0%}"


def markdown(table: pd.DataFrame) -> list[str]:
    """summary.md's lines for the section ([] when no method has per-request figures)."""
    rows, lines = summary(table)
    if not rows:
        return []
    out = ["## acceptance per request (this run; stored in brackets)", ""]
    out += ["| " + " | ".join(HEADER) + " |", "| " + " | ".join("---" for _ in HEADER) + " |"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""] + [f"- {line}" for line in lines] + [""]


def plot_request_histograms(table: pd.DataFrame):
    """Per method, the histogram of its requests' acceptance lengths, this run (filled) and stored (outline).
    None without per-request rows."""
    requests = _requests(table)
    if requests.empty:
        return None
    plt = pyplot()
    methods = ordered(requests["method"])
    fig, axes, spare = grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        mine = requests[requests["method"] == method]
        now = [v for v in mine["value"] if present(v)]
        then = [v for v in mine["baseline"] if present(v)]
        values = now + then
        bins = [1 + i * 0.25 for i in range(int((max(values) - 1) / 0.25) + 2)] if values else 10
        ax.hist(now, bins=bins, color="#4a90d9", alpha=0.75)
        if then:
            ax.hist(then, bins=bins, histtype="step", color="black", linewidth=1.2)
        ax.set_title(method, fontsize=10, color="#c00000" if failing(mine) else "black")
        ax.set_xlabel("acceptance length")
        ax.grid(alpha=0.3)
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("requests")
    handles = [
        plt.Rectangle((0, 0), 1, 1, color="#4a90d9", alpha=0.75, label="this run"),
        plt.Line2D([], [], color="black", label="stored baseline"),
    ]
    bottom = legend(fig, spare, handles, ncol=2)
    fig.suptitle("Acceptance length per request", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def plot_windows(table: pd.DataFrame):
    """Per method, tokens per step in each output window averaged over its categories, this run (solid) and
    stored (dashed); red rings where a category's window broke its floor. None without window rows."""
    rows = table[(table["gate"] == ACCEPTANCE) & (table["metric"] == WINDOW)].dropna(subset=["position"])
    if rows.empty:
        return None
    plt = pyplot()
    methods = ordered(rows["method"])
    fig, axes, spare = grid(plt, len(methods))
    for ax, method in zip(axes, methods):
        now, then = _windows(table, method)
        xs = list(range(len(now)))
        ax.plot(xs, now, marker="o", color="#4a90d9", linewidth=1.6)
        if any(t is not None for t in then):
            ax.plot(xs, [t if t is not None else float("nan") for t in then], linestyle="--", color="black")
        mine = rows[rows["method"] == method]
        bad = mine[mine["verdict"].isin(FAILED)]  # the windows the check failed (averaged here, ringed where any did)
        for position in sorted({int(p) for p in bad["position"]}):
            ax.scatter([position], [now[position]], s=90, facecolors="none", edgecolors="#e41a1c", linewidths=2)
        ax.set_title(method, fontsize=10, color="#c00000" if failing(mine) else "black")
        ax.set_xticks(xs)
        ax.set_xlabel("output window")
        ax.grid(alpha=0.3)
    for ax in axes[:: min(len(axes), 4)]:
        ax.set_ylabel("tokens per step")
    handles = [
        plt.Line2D([], [], color="#4a90d9", marker="o", label="this run"),
        plt.Line2D([], [], color="black", linestyle="--", label="stored baseline"),
        plt.Line2D([], [], color="#e41a1c", marker="o", markerfacecolor="none", linestyle="none", label="below floor"),
    ]
    bottom = legend(fig, spare, handles, ncol=3)
    fig.suptitle("Acceptance by output position (categories averaged)", fontsize=11)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig
