"""What the plots share: matplotlib behind its Agg backend, small multiples with a legend in a spare
slot, a row's verdict, a row's concurrency level."""

from __future__ import annotations

import math

import pandas as pd

from specgate.checks import FAILED


def pyplot():
    """matplotlib.pyplot on the Agg backend (files, no display), imported on first use."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def failing(rows: pd.DataFrame) -> bool:
    """Whether any of these rows failed its check (or erred): the plot draws that, never its own comparison."""
    return bool(rows["verdict"].isin(FAILED).any())


def grid(plt, n: int, width: float = 3.6, height: float = 2.9):
    """Small multiples, four per row, sharing the y axis; the slots left over hold the legend."""
    cols = min(n, 4)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(width * cols + 0.6, height * nrows + 1.0), sharey=True, squeeze=False
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat[:n], flat[n:]


def legend(fig, spare: list, handles: list, ncol: int) -> float:
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


def concurrency_of(rows: pd.DataFrame) -> pd.Series:
    parsed = pd.to_numeric(rows["key"].str.extract(r"(\d+)", expand=False), errors="coerce")
    return rows["concurrency"].fillna(parsed)
