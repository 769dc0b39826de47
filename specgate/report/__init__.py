"""The measurements table of a run -> files a person reads: summary.md, report.html, plots.

    data.py    the table on disk (measurements.json / .csv, run.json) and how values are written
    tables.py  the summary's tables and summary.md
    plots.py   the PNG plots
    page.py    report.html
    history.py the history page of a baseline file (`specgate history`)

Plots are saved under `plots/` and embedded in report.html as data URIs, so the HTML is one file.

Neighbours: below are checks/ (the verdict vocabulary), store/ (run.json, the baselines' history)
and profile/; above are run/ (results writes a run's files through here), release/ and cli/. Nothing
here measures or judges.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pandas as pd

from specgate.formatting import fmt
from specgate.report.data import COLUMNS, ResultsError, headline, load_run, normalize, write_tables
from specgate.report.page import report_html
from specgate.report.plots import (
    PLOTS,
    plot_acceptance_heatmap,
    plot_divergence_gaps,
    plot_memory,
    plot_position_curves,
    plot_speedup,
    render_plots,
)
from specgate.report.tables import judged_line, moved_rows, summary_markdown, sweeps, title_line, totals
from specgate.store.run_record import RunRecord

__all__ = [
    "COLUMNS",
    "PLOTS",
    "ResultsError",
    "fmt",
    "headline",
    "judged_line",
    "load_run",
    "moved_rows",
    "normalize",
    "plot_acceptance_heatmap",
    "plot_divergence_gaps",
    "plot_memory",
    "plot_position_curves",
    "plot_speedup",
    "render_plots",
    "report_html",
    "summary_markdown",
    "sweeps",
    "title_line",
    "totals",
    "write_report",
    "write_tables",
]


def write_report(run_dir: Path, table: pd.DataFrame, run: RunRecord, *, step_summary: bool = True) -> dict[str, Path]:
    """summary.md, report.html and plots/*.png in run_dir; summary.md is appended to
    $GITHUB_STEP_SUMMARY when that is set (and step_summary is true), so Actions shows it on the
    run's page. Returns name -> path of everything written."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    table = normalize(table)  # once: summary.md, the plots and report.html read this one table
    paths = {"summary": run_dir / "summary.md", "html": run_dir / "report.html"}
    markdown = summary_markdown(table, run)
    paths["summary"].write_text(markdown, encoding="utf-8")
    plot_files, plot_failures = render_plots(table, run_dir / "plots")
    for name, why in plot_failures.items():
        warnings.warn(f"report.html without its {name} plot: {why}", stacklevel=2)
    paths["html"].write_text(report_html(table, run, plot_files, plot_failures), encoding="utf-8")
    paths.update({f"plot:{name}": path for name, path in plot_files.items()})
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary and target:
        try:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(markdown + "\n")
        except OSError as exc:
            warnings.warn(f"could not append the summary to $GITHUB_STEP_SUMMARY ({target}): {exc}", stacklevel=2)
    return paths
