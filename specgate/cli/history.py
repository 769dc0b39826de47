"""`specgate history`: every committed update of a profile's baselines over time, as a table (each
update with the vLLM that measured each method, each gate's headline figure per method) and its page
(history.md, history.html with plots, laid out by report/history.py), with gate runs' results
directories after the stored updates.

    specgate history [--profile P] [--hardware KEY|all] [RESULTS_DIR ...] [--out DIR]

The history itself is read by specgate.store.history (also what the drift check reads).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from specgate.cli import add_profile, add_root, spelling
from specgate.errors import SpecgateError
from specgate.machine import detect_device, hardware_key
from specgate.store.baselines import baselines_dir, provenance_of
from specgate.store.history import History, headlines, read
from specgate.store.run_record import read as read_record


class HistoryError(SpecgateError):
    """Raised when `specgate history` has nothing to read: the message names the file and the fix."""


@dataclass(frozen=True)
class Row:
    """One line of the history table: an update (or a results directory) and one method in it."""

    label: str  # 'abc1234' or a results directory's name
    date: str
    hardware: str
    method: str
    vllm: str
    figures: dict[str, float]
    stored: bool  # a committed update (else a run given on the command line)
    subject: str = ""
    models: dict[str, dict] = field(default_factory=dict)  # role -> {"ref", "revision"} its figures were measured with


def table(history: History, runs: list[Path] = ()) -> list[Row]:
    """The history table: every measurement in the history (an update that re-measured nothing: one row
    without a method), then each results directory's run."""
    rows = []
    for update in history.updates:
        these = [p for p in history.points if p.update is update and p.method != "baseline"]
        rows += [_stored_row(update, p) for p in these] or [
            Row(update.short, update.date[:10], _machine(update.file), "", "", {}, True, update.subject)
        ]
    for run in runs:
        rows += _run_rows(Path(run))
    return rows


def _stored_row(update, point) -> Row:
    figures = headlines(point.values)
    models = models_of(point.values)
    return Row(
        update.short, update.date[:10], point.machine, point.method, point.vllm, figures, True, update.subject, models
    )


def _machine(file) -> str:
    return file.machine if file.identity else file.hardware


def _run_rows(run: Path) -> list[Row]:
    """A results directory's measurements (its baselines.json and run.json), as rows of the table."""
    path = run / "baselines.json"
    if not path.is_file():
        raise HistoryError(
            f"{run} has no baselines.json; give the results directory of a gate run "
            f"(results/<run-id>/, written by `pytest -m gpu`)."
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HistoryError(f"{path} is not valid JSON ({exc}); rerun the gate to recreate it.") from None
    record = read_record(run) if (run / "run.json").is_file() else None
    started, vllm = (record.started, record.vllm) if record else ("", None)
    out = []
    for method, entry in sorted(data.get("methods", {}).items()):
        if method == "baseline":
            continue
        prov = entry.get("provenance", {})
        date = str(started or prov.get("date") or "")[:10]
        out.append(
            Row(
                run.name,
                date,
                str(data.get("hardware"))
                + (f", machine {data['identity'].get('id')}" if isinstance(data.get("identity"), dict) else ""),
                method,
                str(prov.get("vllm") or vllm),
                headlines(entry),
                False,
                models=models_of(entry),
            )
        )
    return out


def models_of(entry: dict) -> dict[str, dict]:
    """The models a stored method entry's figures were measured with (each group's, the newest run's first)."""
    groups = [provenance_of(entry)] + list(entry.get("provenance", {}).get("groups", {}).values())
    out: dict[str, dict] = {}
    for prov in groups:
        for role, model in prov.get("models", {}).items():
            out.setdefault(role, model)
    return out


def releases(rows: list[Row]) -> list[tuple[int, str, str]]:
    """(index of the first row of a release, previous vLLM, new vLLM) wherever the vLLM changed between
    consecutive updates (rows grouped by label in order)."""
    labels = list(dict.fromkeys(r.label for r in rows))
    per_label = {lab: sorted({r.vllm for r in rows if r.label == lab and r.method}) for lab in labels}
    out, previous = [], None
    for i, lab in enumerate(labels):
        now = ", ".join(per_label[lab])
        if not now:  # an update that re-measured nothing
            continue
        if previous is not None and now != previous:
            out.append((i, previous, now))
        previous = now
    return out


def main(args: argparse.Namespace) -> int:
    from specgate.profile import find_profile, load_profile
    from specgate.report import history as page

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root, spelling()), root)
    if args.hardware == "all":
        hardware = None
    elif args.hardware:
        hardware = args.hardware
    else:
        here, directory = hardware_key(*detect_device(profile.hardware)), baselines_dir(root) / profile.name
        hardware = here if [*directory.glob(f"{here}.json"), *directory.glob(f"{here}.*.json")] else None
    history = read(root, profile.name, hardware)
    if history.top is None:
        raise HistoryError(
            f"no history to read: {history.problem}. `specgate history` reads the git history of "
            f"{baselines_dir(root) / profile.name}; run it in a git clone of the project."
        )
    rows = table(history, args.runs)
    if not rows:
        raise HistoryError(
            f"no committed update of {baselines_dir(root) / profile.name}"
            f"{'/' + hardware + '.json' if hardware else ''} and no results directory given: nothing to show. "
            f"Commit a baseline file ({spelling().command(update_baselines=True)}) first."
        )
    out = Path(args.out or root / "results" / f"history-{profile.name}")
    paths = page.write(out, profile.name, hardware or "every machine", rows, releases(rows), history.problem)
    print(Path(paths["markdown"]).read_text(encoding="utf-8"), end="")
    print(f"history: {paths['markdown']}, {paths['html']}")
    return 0


def add_parser(commands) -> None:
    p = commands.add_parser(
        "history",
        help="every committed update of a profile's baselines over time: table and plots",
        description="Read the git history of baselines/<profile>/<hardware>[.<machine id>].json (each committed "
        "update: date, revision, the machine and the vLLM that measured each method) and the results directories "
        "given, and write a history table and plots (each gate's headline figure per method over the updates, vLLM "
        "releases marked) to history.md and history.html.",
    )
    p.add_argument(
        "runs", nargs="*", type=Path, metavar="RESULTS_DIR", help="gate runs to add after the stored updates"
    )
    add_profile(p)
    p.add_argument(
        "--hardware",
        default="",
        metavar="KEY|all",
        help="one hardware name's files, each identity's (default: this machine's name when it has one, else "
        "every machine's)",
    )
    p.add_argument(
        "--out", type=Path, default=None, metavar="DIR", help="where to write (default results/history-<profile>)"
    )
    add_root(p)
