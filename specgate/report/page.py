"""report.html: one self-contained page (plots embedded as data URIs, so it opens anywhere: a CI
artifact, an e-mail, no network) with what did not pass first, then the plots and the gate tables."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import pandas as pd

from specgate.checks import FAILED, Verdict
from specgate.formatting import fmt
from specgate.report import distribution as distribution_section
from specgate.report import edges as edges_section
from specgate.report import glance, plots
from specgate.report import requests as requests_section
from specgate.report.data import normalized
from specgate.report.tables import failed, gate_tables, moved_rows, sweeps, title_line, totals
from specgate.store.run_record import RunRecord

# ---------------------------------------------------------------- report.html

CSS = """
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
table.sortable th { cursor: pointer; } details { margin: .2em 0 .2em 1em; } summary { cursor: pointer; }
"""


def png_uri(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=plots.DPI)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def report_html(
    table: pd.DataFrame,
    run: RunRecord,
    plot_files: dict[str, Path] | None = None,
    plot_failures: dict[str, str] | None = None,
) -> str:
    """The self-contained report: title, plots (embedded PNGs; drawn here unless plot_files has them, a
    line in its place for one that could not be drawn), the summary tables and messages (of a normalized
    table)."""
    table = normalized(table)
    esc = html.escape
    counts = totals(table, run)
    state = Verdict.FAIL.value if failed(counts) else Verdict.PASS.value
    parts = [
        "<!DOCTYPE html>",
        "<html lang='en'><head><meta charset='utf-8'>",
        f"<title>specgate {esc(run.run_id)}</title><style>{CSS}</style></head><body>",
        f"<h1 class='{state}'>specgate: {esc(title_line(table, run))}</h1>",
    ]
    about = [
        f"{k} {getattr(run, k)}"
        for k in ("torch", "git_revision", "started", "finished", "profile_path")
        if getattr(run, k)
    ]
    if about:
        parts.append(f"<p class='meta'>{esc(' · '.join(map(str, about)))}</p>")
    per_gate = gate_tables(table, run)
    parts += _upgrade(table, run) + _failures(per_gate) + _plots(table, plot_files, plot_failures)
    parts += _per_gate(table, run, per_gate) + _the_rest(table, run)
    parts.append(f"<script>{SORT}</script></body></html>")
    return "\n".join(parts) + "\n"


def _upgrade(table: pd.DataFrame, run: RunRecord) -> list[str]:
    """What moved since the baselines' vLLM, when the run upgraded it."""
    esc = html.escape
    parts: list[str] = []
    if upgrade := run.upgrade:
        moved = moved_rows(table)
        parts.append(f"<h2>{esc(upgrade.replace(' -> ', ' → '))}</h2>")
        parts.append(
            "<table><tr>"
            + "".join(f"<th>{h}</th>" for h in ("method", "gate", "key", "figure", "baseline", "this run", "change"))
            + "</tr>"
            + "".join(
                "<tr>" + "".join(f"<td>{esc(fmt(c) if isinstance(c, float) else str(c))}</td>" for c in row) + "</tr>"
                for row in moved
            )
            + "</table>"
            if moved
            else "<p class='none'>Every figure with a stored baseline came out the same.</p>"
        )
    return parts


def _failures(per_gate: list) -> list[str]:
    """What did not pass: what a reader opened the report for, before any plot."""
    esc = html.escape
    parts: list[str] = []
    failures = [(gt.gate, v, m, where) for gt in per_gate for v, m, where in gt.notes if v in FAILED]
    if failures:  # what a reader opened the report for, before any plot
        parts.append(
            "<h2>What did not pass</h2><ul class='notes'>"
            + "".join(
                f"<li><b>{esc(v)}</b> {esc(gate)} · {esc(', '.join(where))}: {esc(m)}</li>"
                for gate, v, m, where in failures
            )
            + "</ul>"
        )
    return parts


def _plots(table: pd.DataFrame, plot_files: dict[str, Path] | None, plot_failures: dict[str, str] | None) -> list[str]:
    """Each plot under its heading, or a line saying why it is not there."""
    esc = html.escape
    parts: list[str] = []
    plt = None
    for name, (heading, plot) in plots.PLOTS.items():
        parts.append(f"<h2>{esc(heading)}</h2>")
        if plot_failures and name in plot_failures:
            parts.append(f"<p class='none'>{esc(plot_failures[name])}</p>")
            continue
        try:  # the PNG read back, or a plot drawn here: a removed file or a failing plot leaves a line
            if plot_files and name in plot_files:
                data = Path(plot_files[name]).read_bytes()
                uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
            else:
                fig = plot(table)
                if fig is None:
                    parts.append(f"<p class='none'>{esc(plots.NO_DATA[name])}</p>")
                    continue
                plt = plt or plots.pyplot()
                uri = png_uri(fig)
                plt.close(fig)
        except Exception as exc:
            parts.append(f"<p class='none'>{esc(plots.not_drawn(exc))}</p>")
            continue
        parts.append(f"<img alt='{esc(heading)}' src='{uri}'>")
    return parts


def _per_gate(table: pd.DataFrame, run: RunRecord, per_gate: list) -> list[str]:
    """Per gate: the verdicts at a glance, every figure per method, the messages."""
    esc = html.escape
    parts: list[str] = []
    parts.append("<h2>Results per gate</h2>")
    if not per_gate:
        parts.append("<p class='none'>No measurements were recorded in this run.</p>")
    compact = {gate: (header, body) for gate, header, body in glance.tables(table, run)}
    for gt in per_gate:
        parts.append(f"<h3>{esc(gt.gate)}</h3>")
        if gt.gate in compact:  # the verdicts at a glance (click a column to sort), then every figure per method
            header, body = compact[gt.gate]
            parts.append(_table(header, [(v, row) for v, row in body], sortable=True))
        for method in dict.fromkeys(row[0] for row in gt.rows):
            mine = [(v, row) for row, v in zip(gt.rows, gt.verdicts) if row[0] == method]
            parts.append(
                f"<details><summary>{esc(method)}: every figure ({len(mine)} rows)</summary>"
                + _table(gt.header, mine, sortable=True)
                + "</details>"
            )
        if gt.notes:
            parts.append(
                "<ul class='notes'>"
                + "".join(f"<li><b>{esc(v)}</b> {esc(', '.join(where))}: {esc(m)}</li>" for v, m, where in gt.notes)
                + "</ul>"
            )
    return parts


def _the_rest(table: pd.DataFrame, run: RunRecord) -> list[str]:
    """The requests sections, the draft-length sweeps and the session's lines."""
    esc = html.escape
    parts: list[str] = []
    body, lowest = distribution_section.summary(table)
    if body:
        parts.append("<h2>Acceptance per request (this run; stored in brackets)</h2>")
        parts.append(_table(distribution_section.HEADER, [("", row) for row in body]))
        parts.append("<ul class='notes'>" + "".join(f"<li>{esc(line)}</li>" for line in lowest) + "</ul>")
    for method, verdict, header, body, lines in requests_section.sections(table):
        parts.append(f"<h2>Requests as users send them: {esc(method)} ({esc(verdict or 'not judged')})</h2>")
        parts.append(_table(header, [("", row) for row in body]))
        if lines:
            parts.append("<ul class='notes'>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
    for method, verdict, header, body, lines in edges_section.sections(table):
        parts.append(f"<h2>Traffic at the edges: {esc(method)} ({esc(verdict or 'not judged')})</h2>")
        parts.append(_table(header, [("", row) for row in body]))
        if lines:
            parts.append("<ul class='notes'>" + "".join(f"<li>{esc(line)}</li>" for line in lines) + "</ul>")
    for family, header, body in sweeps(table):
        parts.append(
            f"<h2>Draft-length sweep: {esc(family)}</h2><table><tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in header)
            + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in body)
            + "</table>"
        )
    if run.summary_lines:
        parts.append("<h2>Session</h2><pre>" + esc("\n".join(map(str, run.summary_lines))) + "</pre>")
    return parts


def _table(header: list[str], rows: list[tuple[str, list[str]]], sortable: bool = False) -> str:
    """A table whose third column is the verdict (coloured); `sortable`: a click on a header sorts by it."""
    esc = html.escape
    head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
    body = "".join(
        "<tr>"
        + "".join(
            f"<td class='v-{esc(v)}'>{esc(c)}</td>" if i == 2 else f"<td>{esc(c)}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for v, row in rows
    )
    return f"<table{' class=sortable' if sortable else ''}><thead>{head}</thead><tbody>{body}</tbody></table>"


# Sort a table by the clicked column (numbers by value, text alphabetically; a second click reverses).
SORT = """
document.querySelectorAll('table.sortable th').forEach((th, col) => th.addEventListener('click', () => {
  const body = th.closest('table').tBodies[0], rows = Array.from(body.rows);
  const key = r => { const t = r.cells[col].innerText, n = parseFloat(t.replace(/,/g, ''));
                     return isNaN(n) ? t : n; };
  const dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
  rows.sort((a, b) => { const x = key(a), y = key(b);
    return (typeof x === typeof y ? (x > y) - (x < y) : (typeof x === 'number' ? -1 : 1)) * dir; });
  rows.forEach(r => body.appendChild(r));
}));
"""
