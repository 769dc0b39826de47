"""The history page of a profile's baselines (`specgate history`): history.md (the updates, then each
gate's headline figure per method and update) and history.html with one plot per headline figure
(a line per method over the updates, each vLLM release change marked). specgate/store/history.py reads
the history and picks the figures, the command (cli/history.py) builds the table's rows (label, date,
hardware, method, vllm, figures, stored, subject); this module only lays them out."""

from __future__ import annotations

import html
from pathlib import Path

from specgate.formatting import fmt
from specgate.report.page import CSS, png_uri
from specgate.store.history import HEADLINES
from specgate.store.revisions import short


def _labels(rows: list) -> list[str]:
    return list(dict.fromkeys(r.label for r in rows))


def _series_name(row, machines: int) -> str:
    return row.method + (f" ({row.hardware})" if machines > 1 else "")


def markdown(profile: str, hardware: str, rows: list, problem: str = "") -> str:
    labels = _labels(rows)
    lines = [f"# Baseline history: {profile} ({hardware})", ""]
    if problem:
        lines += [f"Note: {problem}.", ""]
    lines += ["| update | date | machine | vLLM: methods measured | subject |", "| --- | --- | --- | --- | --- |"]
    for lab in labels:
        these = [r for r in rows if r.label == lab]
        by_vllm: dict[str, list[str]] = {}
        for r in these:
            by_vllm.setdefault(r.vllm, []).append(r.method)
        measured = (
            "; ".join(f"{v}: {', '.join(ms)}" for v, ms in by_vllm.items() if ms != [""]) or "nothing re-measured"
        )
        what = these[0].subject[:90] if these[0].stored else "(results directory)"
        lines.append(
            f"| {lab} | {these[0].date} | {', '.join(sorted({r.hardware for r in these}))} | {measured} | "
            f"{what.replace('|', '/')} |"
        )
    lines += models(rows)
    machines = len({r.hardware for r in rows})
    for name, (title, _) in HEADLINES.items():
        series = list(dict.fromkeys(_series_name(r, machines) for r in rows if name in r.figures))
        if not series:
            continue
        lines += ["", f"## {title}", "", "| update | " + " | ".join(series) + " |", "| --- |" + " ---: |" * len(series)]
        for lab in labels:
            cells = {
                _series_name(r, machines): fmt(r.figures[name]) for r in rows if r.label == lab and name in r.figures
            }
            if cells:
                lines.append(f"| {lab} | " + " | ".join(cells.get(s, "") for s in series) + " |")
    return "\n".join(lines) + "\n"


def models(rows: list) -> list[str]:
    """The models each method's figures were measured with: a row where they were first recorded and one
    wherever they changed ('drafter org/head 1111111 -> 2222222'), so a figure that moved with the weights
    reads as such. Nothing when no update recorded models (files written before they were)."""
    out, last = [], {}
    for r in rows:
        if not r.method or not r.models:
            continue
        before = last.get((r.method, r.hardware), {})
        said = []
        for role, now in r.models.items():
            was = before.get(role)
            if was == now:
                continue
            ref = now.get("ref")
            if was is None:
                said.append(f"{role} {ref} {short(now.get('revision'))}")
            elif was.get("ref") == ref:
                said.append(f"{role} {ref} {short(was.get('revision'))} → {short(now.get('revision'))}")
            else:
                said.append(
                    f"{role} {was.get('ref')} {short(was.get('revision'))} → {ref} {short(now.get('revision'))}"
                )
        last[(r.method, r.hardware)] = r.models
        if said:
            out.append(f"| {r.label} | {r.method} | {'; '.join(said).replace('|', '/')} |")
    if not out:
        return []
    head = [
        "",
        "## Models (first recorded, then each change)",
        "",
        "| update | method | models |",
        "| --- | --- | --- |",
    ]
    return head + out


def plot(all_rows: list, releases: list[tuple[int, str, str]]):
    """One panel per headline figure: a line per method (and machine) over the updates; results
    directories hollow; a dashed line where the vLLM that measured the update changed."""
    from specgate.report.plots import pyplot

    panels = [(name, title) for name, (title, _) in HEADLINES.items() if any(name in r.figures for r in all_rows)]
    if not panels:
        return None
    plt = pyplot()
    labels = _labels(all_rows)  # every update, those that re-measured nothing included
    rows = [r for r in all_rows if r.method]
    machines = len({r.hardware for r in rows})
    names = list(dict.fromkeys(_series_name(r, machines) for r in rows))
    palette = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colors = {n: palette(i % palette.N) for i, n in enumerate(names)}
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(max(7.0, 0.55 * len(labels) + 3.5), 2.6 * len(panels) + 1.2),
        sharex=True,
        squeeze=False,
    )
    for ax, (name, title) in zip(axes[:, 0], panels):
        _panel(ax, name, title, rows, labels, machines, colors, releases, first=ax is axes[0, 0])
    dates = {}
    for r in all_rows:
        dates.setdefault(r.label, r.date)
    axes[-1, 0].set_xticks(
        range(len(labels)), [f"{lab}\n{dates[lab][5:]}" for lab in labels], rotation=45, ha="right", fontsize=7
    )
    _legend_and_title(fig, plt, names, colors, rows)
    return fig


def _panel(ax, name: str, title: str, rows: list, labels: list, machines: int, colors: dict, releases, first: bool):
    """One headline figure's panel: a line per series, stored updates filled, a dashed line per vLLM change
    (named on the first panel)."""
    names = list(colors)
    for series in names:
        points = [
            (labels.index(r.label), r.figures[name], r.stored)
            for r in rows
            if _series_name(r, machines) == series and name in r.figures
        ]
        if not points:
            continue
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, color=colors[series], linewidth=1.4, drawstyle="steps-post", alpha=0.8)
        for x, y, stored in points:
            ax.scatter([x], [y], s=28, color=colors[series] if stored else "white", edgecolors=colors[series], zorder=4)
    for i, old, new in releases:
        ax.axvline(i - 0.5, color="#555555", linestyle="--", linewidth=1)
        if first:
            ax.text(
                i - 0.45,
                1.0,
                f"vLLM {old} → {new}",
                transform=ax.get_xaxis_transform(),
                fontsize=7,
                va="bottom",
                rotation=0,
                color="#333333",
            )
    ax.set_ylabel(title, fontsize=8)
    ax.grid(alpha=0.3)


def _legend_and_title(fig, plt, names: list, colors: dict, rows: list) -> None:
    """The series' legend and the title over the panels."""
    handles = [plt.Line2D([], [], color=colors[n], marker="o", label=n) for n in names]
    handles.append(
        plt.Line2D(
            [],
            [],
            color="gray",
            marker="o",
            markerfacecolor="white",
            linestyle="none",
            label="results directory (not stored)",
        )
    )
    vllms = sorted({r.vllm for r in rows})
    title = (
        f"vLLM {vllms[0]} measured every update"
        if len(vllms) == 1
        else "dashed lines: the vLLM that measured the updates changed"
    )
    height = fig.get_figheight()
    fig.suptitle(
        f"Headline figures per method over the baseline updates\n({title})", fontsize=10, y=1 - 0.08 / height, va="top"
    )
    ncol = min(5, len(handles))
    legend_in = 0.22 * -(-len(handles) // ncol)
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=ncol,
        fontsize=8,
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.5 / height),
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.6 + legend_in) / height))


def write(
    out: Path, profile: str, hardware: str, rows: list, releases: list[tuple[int, str, str]], problem: str = ""
) -> dict[str, Path]:
    """history.md, history.html and plots/history.png in `out`."""
    from specgate.report.plots import DPI, pyplot

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"markdown": out / "history.md", "html": out / "history.html"}
    text = markdown(profile, hardware, rows, problem)
    paths["markdown"].write_text(text, encoding="utf-8")
    fig = plot(rows, releases)
    image = ""
    if fig is not None:
        paths["plot"] = out / "plots" / "history.png"
        paths["plot"].parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(paths["plot"], format="png", dpi=DPI)
        image = f"<img alt='history' src='{png_uri(fig)}'>"
        pyplot().close(fig)
    esc = html.escape
    body = [f"<h1>Baseline history: {esc(profile)} ({esc(hardware)})</h1>"]
    if problem:
        body.append(f"<p class='meta'>Note: {esc(problem)}.</p>")
    body.append(image)
    body.append("<pre>" + esc(text) + "</pre>")
    paths["html"].write_text(
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>specgate history "
        f"{esc(profile)}</title><style>{CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n",
        encoding="utf-8",
    )
    return paths
