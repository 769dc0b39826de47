"""Report rendering from a fabricated measurements table: files, plots, self-contained HTML."""

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from specgate import report
from specgate.report import ResultsError
from specgate.store.run_record import Outcome, RunRecord

CATEGORIES = ("code_continuation", "code_editing", "doc_prose", "repetitive_lists", "structured_output")
# method -> (mean acceptance length per category, per-position rates of the first category)
ACCEPTANCE = {
    "ngram": ((1.97, 2.27, 3.09, 2.70, 2.38), (0.46, 0.33, 0.18)),
    "eagle": ((2.33, 2.41, 2.00, 2.52, 2.28), (0.65, 0.43, 0.25)),
    "eagle3": ((2.03, 2.44, 1.68, 2.23, 2.29), (0.54, 0.33, 0.16)),
    "mtp": ((1.74, 1.79, 1.69, 1.74, 1.73), (0.74,)),
}
SPEEDUP = {
    "ngram": (1.31, 1.18, 0.97),
    "eagle": (1.62, 1.44, 1.12),
    "eagle3": (1.55, 1.21, 0.88),
    "mtp": (1.40, 1.30, 1.10),
}


def row(method, gate, key, metric, value, **extra):
    return {"method": method, "gate": gate, "key": key, "metric": metric, "value": value, **extra}


def fabricated_table(gates=("equivalence", "acceptance", "speedup", "memory", "lifecycle")) -> pd.DataFrame:
    """A run like cpu-tiny's: eagle3 lost acceptance on doc_prose and speed at C=16, ngram's
    process memory is over its ceiling, mtp has no stored speedup baseline (skip)."""
    rows = []
    if "equivalence" in gates:
        for m in ACCEPTANCE:
            rows.append(row(m, "equivalence", "greedy", "identical", 40, verdict="pass"))
            rows.append(row(m, "equivalence", "greedy", "compared", 40))
            rows.append(row(m, "equivalence", "greedy", "diverged", 0))
    if "acceptance" in gates:
        for m, (lengths, positions) in ACCEPTANCE.items():
            for c, length in zip(CATEGORIES, lengths):
                measured = length - (0.45 if (m, c) == ("eagle3", "doc_prose") else 0.01)
                verdict = "fail" if (m, c) == ("eagle3", "doc_prose") else "pass"
                msg = (
                    (
                        "eagle3 / doc_prose: mean acceptance length 1.23 < floor 1.60 (baseline 1.68, "
                        "vLLM 0.32.0, 2026-11-22, rev fc76477)"
                    )
                    if verdict == "fail"
                    else ""
                )
                rows.append(
                    row(
                        m,
                        "acceptance",
                        c,
                        "mean_acceptance_length",
                        measured,
                        baseline=length,
                        bound=round(length * 0.95, 3),
                        unit="tokens/step",
                        verdict=verdict,
                        message=msg,
                    )
                )
                rows.append(
                    row(
                        m,
                        "acceptance",
                        c,
                        "acceptance_rate",
                        (measured - 1) / len(positions),
                        baseline=(length - 1) / len(positions),
                    )
                )
                for p, rate in enumerate(positions, start=1):
                    scale = length / lengths[0]
                    value = min(1.0, rate * scale) * (0.55 if verdict == "fail" else 0.99)
                    rows.append(
                        row(
                            m,
                            "acceptance",
                            c,
                            "position_rate",
                            value,
                            position=p,
                            baseline=min(1.0, rate * scale),
                            bound=min(1.0, rate * scale) * 0.9,
                            verdict="fail" if verdict == "fail" else "",
                        )
                    )
    if "speedup" in gates:
        for m, speeds in SPEEDUP.items():
            for c, s in zip((1, 4, 16), speeds):
                low = m == "eagle3" and c == 16
                value = s - (0.25 if low else 0.02)
                stored = None if m == "mtp" else s
                verdict = "skip" if m == "mtp" else "fail" if low else "pass"
                msg = (
                    "no stored speedup baseline for mtp; run with --update-baselines"
                    if m == "mtp"
                    else "eagle3 at C=16: speedup 0.63 [0.58, 0.70] below floor 0.75"
                    if low
                    else ""
                )
                rows.append(
                    row(
                        m,
                        "speedup",
                        f"C={c}",
                        "speedup",
                        value,
                        concurrency=c,
                        baseline=stored,
                        bound=None if stored is None else round(s * 0.85, 3),
                        ci_low=value - 0.06,
                        ci_high=value + 0.07,
                        unit="x",
                        verdict=verdict,
                        message=msg,
                    )
                )
                rows.append(row(m, "speedup", f"C={c}", "expected_speedup", s * 1.15, concurrency=c, unit="x"))
                rows.append(row(m, "speedup", f"C={c}", "measured_over_expected", value / (s * 1.15), concurrency=c))
                rows.append(
                    row(m, "speedup", f"C={c}", "throughput_tok_s", 180 * c**0.6 * value, concurrency=c, unit="tok/s")
                )
                rows.append(
                    row(m, "speedup", f"C={c}", "baseline_throughput_tok_s", 180 * c**0.6, concurrency=c, unit="tok/s")
                )
                rows.append(row(m, "speedup", f"C={c}", "tpot_p50_ms", 22.5 * c**0.3 / value, concurrency=c, unit="ms"))
    if "memory" in gates:
        rows.append(row("baseline", "memory", "engine", "kv_capacity_tokens", 349440, unit="tokens"))
        rows.append(row("baseline", "memory", "engine", "peak_process_mib", 2461.2, unit="MiB"))
        for m, (static, lost, proc) in {
            "ngram": (0.0, 0, 175.6),
            "eagle": (1.78, 49920, 41.5),
            "eagle3": (3.66, 49920, 57.9),
            "mtp": (1.79, 49920, 32.4),
        }.items():
            over = m == "ngram"
            rows.append(
                row(
                    m,
                    "memory",
                    "overhead",
                    "static_mib_measured",
                    static,
                    baseline=static,
                    bound=static * 1.1 + 0.25,
                    unit="MiB",
                    verdict="pass",
                )
            )
            rows.append(
                row(
                    m,
                    "memory",
                    "overhead",
                    "kv_tokens_lost",
                    lost,
                    baseline=lost,
                    bound=lost * 1.1,
                    unit="tokens",
                    verdict="pass",
                )
            )
            value = proc + (95 if over else 1.2)
            rows.append(
                row(
                    m,
                    "memory",
                    "overhead",
                    "process_mib",
                    value,
                    baseline=proc,
                    bound=proc * 1.1 + 64,
                    unit="MiB",
                    verdict="fail" if over else "pass",
                    message=f"ngram: process memory {value:.1f} MiB > ceiling {proc * 1.1 + 64:.1f} MiB"
                    if over
                    else "",
                )
            )
    if "lifecycle" in gates:
        for m in ("baseline", *ACCEPTANCE):
            rows.append(row(m, "lifecycle", "shutdown", "boot_s", 35.2, unit="s", verdict="pass"))
            rows.append(row(m, "lifecycle", "shutdown", "mib_not_returned", 3.0, unit="MiB"))
    return report.normalize(pd.DataFrame(rows))


EMPTY_RUN = RunRecord("gate", "", "")  # a run record that says nothing about the run


def fabricated_run(**extra) -> RunRecord:
    run = {
        "kind": "gate",
        "run_id": "20261122-031500",
        "profile": "cpu-tiny",
        "profile_path": "fixtures/profiles/cpu-tiny.toml",
        "hardware": "cpu-intel-xeon-processor-2c",
        "started": "2026-11-22T03:15:00+00:00",
        "finished": "2026-11-22T03:29:41+00:00",
        "vllm": "0.32.0",
        "torch": "2.13.0+cpu",
        "git_revision": "fab8bdc",
        "outcomes": [
            Outcome(
                "tests/gate/test_acceptance.py::test_acceptance[eagle3]",
                "eagle3",
                "acceptance",
                "",
                "failed",
                "see table",
            ),
            Outcome(
                "tests/gate/test_equivalence.py::test_greedy[medusa]",
                "medusa",
                "equivalence",
                "greedy",
                "error",
                "engine for medusa did not boot: RuntimeError: out of memory\n(log tail)",
            ),
            Outcome(
                "tests/gate/test_equivalence.py::test_greedy[ngram]", "ngram", "equivalence", "greedy", "passed", ""
            ),
        ],
        "summary_lines": ["engines booted: 5 (4 methods + 1 baseline)", "memory not returned: none"],
    }
    run.update(extra)
    return RunRecord(**run)


def test_tables_round_trip_through_json_and_csv(tmp_path):
    table = fabricated_table()
    paths = report.write_tables(tmp_path, table)
    assert paths["csv"].exists() and paths["json"].exists()
    records = json.loads(paths["json"].read_text())
    assert len(records) == len(table) and records[0]["ci_low"] is None  # null, not NaN
    fabricated_run().write(tmp_path / "run.json")
    again, run = report.load_run(tmp_path)
    pd.testing.assert_frame_equal(again, table, check_dtype=False)
    assert run.profile == "cpu-tiny"
    from_csv = report.normalize(pd.read_csv(paths["csv"]))
    assert from_csv["message"].tolist() == table["message"].tolist()  # "" stays "", not NaN


def test_summary_has_totals_numbers_against_baseline_and_failure_messages():
    text = report.summary_markdown(fabricated_table(), fabricated_run())
    first = text.splitlines()[0]
    assert first.startswith("# specgate: FAILED: 1 passed, 1 failed, 0 skipped, 1 error")
    assert "run 20261122-031500" in first and "profile cpu-tiny" in first and "vLLM 0.32.0" in first
    assert "| eagle | code_continuation | pass | 2.32 ≥ 2.21 |" in text  # each figure with the bound it was held to
    # a failing row says what moved and by how much, and which check decided
    assert re.search(
        r"\| eagle3 \| C=16 \| \*\*fail\*\* \| 0\.630 \[0\.570, 0\.700\] ≥ 0\.748 \|.*"
        r"\| speedup floor: 0\.880 → 0\.630 \(-28\.4%\), floor 0\.748 \|",
        text,
    )
    assert "≤" in text.split("## memory")[1]
    assert max(len(line.split(" | ")) for line in text.splitlines() if line.startswith("| ")) <= 8  # at a glance
    assert "- **fail** eagle3 / doc_prose: eagle3 / doc_prose: mean acceptance length 1.23" in text
    assert "- **skip** mtp / C=1, mtp / C=4, mtp / C=16: no stored speedup baseline" in text  # one line
    assert "see table" not in text  # the test's own message only when the table has none
    assert "| medusa | greedy | **error** |" in text  # an outcome with no measurement still shows
    assert "engine for medusa did not boot" in text
    assert "engines booted: 5" in text
    for gate in ("equivalence", "acceptance", "speedup", "memory", "lifecycle"):
        assert f"## {gate}" in text


def test_speedup_rows_are_in_concurrency_order():
    text = report.summary_markdown(fabricated_table(gates=("speedup",)), EMPTY_RUN)
    eagle = [line for line in text.splitlines() if line.startswith("| eagle |")]
    assert [line.split(" | ")[1] for line in eagle] == ["C=1", "C=4", "C=16"]


def test_totals_come_from_the_table_without_outcomes():
    counts = report.totals(fabricated_table(), EMPTY_RUN)
    assert counts["fail"] == 3 and counts["skip"] == 3 and counts["error"] == 0  # eagle3 x2, ngram memory


def test_write_report_writes_self_contained_html_with_every_plot(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setattr(report.plots, "DPI", 30)  # fewer pixels, same drawing code: keeps the unit tests fast
    paths = report.write_report(tmp_path, fabricated_table(), fabricated_run())
    page = paths["html"].read_text()
    assert paths["summary"].read_text().startswith("# specgate:")
    assert page.count("src='data:image/png;base64,") == 4
    assert not re.search(r"""(src|href)\s*=\s*['"]?(https?:)?//""", page)  # nothing fetched from the network
    assert "<link" not in page and "<script src" not in page  # the sorting script is inline
    for name in ("acceptance_heatmap", "acceptance_positions", "speedup", "memory"):
        png = paths[f"plot:{name}"]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "class='v-fail'" in page and "engine for medusa did not boot" in page


def test_missing_gates_leave_a_sentence_instead_of_a_plot(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    paths = report.write_report(tmp_path, fabricated_table(gates=("memory",)), fabricated_run(outcomes=[]))
    page = paths["html"].read_text()
    assert page.count("data:image/png;base64,") == 1
    assert "No acceptance measurements in this run" in page and "No speedup measurements in this run" in page
    assert "## speedup" not in paths["summary"].read_text()
    assert report.plot_speedup(fabricated_table(gates=("acceptance",))) is None


def test_a_plot_that_cannot_be_drawn_leaves_the_rest_of_the_report(tmp_path, monkeypatch):
    # Stop 48's CI: the harness removed matplotlib's font files while the teardown drew the plots, and
    # the run said no results were written at all.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setattr(report.plots, "DPI", 30)

    def font_gone(table):
        raise FileNotFoundError(2, "No such file or directory", "mpl-data/fonts/ttf/LastResortHE-Regular.ttf")

    monkeypatch.setitem(report.plots.PLOTS, "speedup", ("Speedup vs concurrency", font_gone))
    with pytest.warns(UserWarning, match="report.html without its speedup plot: This plot could not be drawn"):
        paths = report.write_report(tmp_path, fabricated_table(), fabricated_run())
    page = paths["html"].read_text()
    assert "plot:speedup" not in paths and page.count("src='data:image/png;base64,") == 3
    assert "This plot could not be drawn (FileNotFoundError: [Errno 2] No such file or directory" in page
    assert "LastResortHE-Regular.ttf" in page and "engine for medusa did not boot" in page  # the tables follow


def test_an_empty_table_still_makes_a_report(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    paths = report.write_report(tmp_path, pd.DataFrame(columns=report.COLUMNS), RunRecord("gate", "r", ""))
    assert "No measurements were recorded" in paths["summary"].read_text()
    assert "data:image" not in paths["html"].read_text()


def test_summary_is_appended_to_the_github_step_summary(tmp_path, monkeypatch):
    step = tmp_path / "step.md"
    step.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    table = fabricated_table(gates=("equivalence",))  # no plots: fast
    report.write_report(tmp_path / "run", table, fabricated_run())
    text = step.read_text()
    assert text.startswith("earlier step\n# specgate:") and "## equivalence" in text
    report.write_report(tmp_path / "run", table, fabricated_run(), step_summary=False)
    assert step.read_text() == text


def test_numbers_are_formatted_for_people():
    assert [report.fmt(x) for x in (2.4137, 349440.0, 0.51, 175.64, 0.0, float("nan"), None)] == [
        "2.41",
        "349,440",
        "0.510",
        "176",
        "0",
        "–",
        "–",
    ]


@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda d: None, "does not exist"),
        (lambda d: d.mkdir(parents=True), "measurements.json is missing"),
        (lambda d: (d.mkdir(parents=True), (d / "measurements.json").write_text('[{"method": "ngr')), "not valid JSON"),
        (
            lambda d: (d.mkdir(parents=True), (d / "measurements.json").write_text('{"a": 1}')),
            "not a list of row objects",
        ),
        (lambda d: (d.mkdir(parents=True), (d / "measurements.json").write_text('[{"x": 1}]')), "rows without method"),
        (lambda d: (d.mkdir(parents=True), (d / "measurements.json").write_text("[]")), "run.json is missing"),
        (
            lambda d: (
                d.mkdir(parents=True),
                (d / "measurements.json").write_text("[]"),
                (d / "run.json").write_text("[1]"),
            ),
            "not a JSON object",
        ),
    ],
)
def test_unreadable_results_are_named_with_what_to_do(tmp_path, setup, words):
    run_dir = tmp_path / "results" / "r1"
    setup(run_dir)
    with pytest.raises(ResultsError, match=words) as err:
        report.load_run(run_dir)
    assert str(run_dir) in str(err.value) and "rerun the gate" in str(err.value)


def test_a_run_on_another_vllm_than_its_baselines_says_so_and_lists_what_moved():
    upgrade = "baselines: vLLM 0.31.0 (2026-11-25) -> this run: vLLM 0.32.0"
    text = report.summary_markdown(fabricated_table(gates=("acceptance",)), fabricated_run(upgrade=upgrade))
    assert "**baselines: vLLM 0.31.0 (2026-11-25) → this run: vLLM 0.32.0**" in text.splitlines()[:8]
    moved = text.split("## What moved (vLLM 0.31.0 (2026-11-25) → vLLM 0.32.0)")[1].split("## ")[0]
    assert "| eagle3 | acceptance | doc_prose | mean_acceptance_length | 1.68 | 1.23 | -26.8% |" in moved
    assert "| eagle | acceptance | code_continuation | position_rate[1] |" in moved
    same = report.summary_markdown(fabricated_table(gates=("acceptance",)), fabricated_run())
    assert "What moved" not in same


def test_the_stored_files_vllm_is_compared_with_the_running_one(tmp_path, monkeypatch):
    from specgate import machine
    from specgate.profile import find_profile, load_profile
    from specgate.store import baseline_store, baselines

    root = Path(__file__).resolve().parents[3]
    profile = load_profile(find_profile("cpu-tiny", root), root)
    store = baseline_store.BaselineStore(tmp_path, profile, "cpu-x-2c")
    prov = {"vllm": "0.31.0", "date": "2026-11-25T10:00:00+00:00"}
    stored = baselines.BaselineFile(store.path, "cpu-tiny", "cpu-x-2c", {"ngram": {"provenance": prov}}, store.identity)
    baselines.write_atomic(stored)
    monkeypatch.setattr(machine, "module_version", lambda module: "0.32.0")
    assert store.upgrade() == "baselines: vLLM 0.31.0 (2026-11-25) -> this run: vLLM 0.32.0"
    monkeypatch.setattr(machine, "module_version", lambda module: "0.31.0")
    assert store.upgrade() == ""
    # a machine without a file of its own: the vLLM of the file it was judged against
    stored.path.rename(stored.path.with_name("cpu-x-2c.json"))  # of before identities: no machine's own
    other = baseline_store.BaselineStore(tmp_path, profile, "cpu-x-2c")
    other.borrowed = {"acceptance": {"cpu-x-2c.json"}}
    monkeypatch.setattr(machine, "module_version", lambda module: "0.32.0")
    assert other.upgrade() == "baselines: vLLM 0.31.0 (2026-11-25) -> this run: vLLM 0.32.0"


def test_the_summary_opens_with_how_much_was_judged_and_why_the_rest_was_skipped():
    reason = "no stored acceptance baseline for method 'ngram', doc_prose in baselines/x.json; create it"
    outcomes = [
        Outcome("", "ngram", "acceptance", c, "skipped", reason.replace("doc_prose", c)) for c in CATEGORIES
    ] + [Outcome("", "ngram", "equivalence", "greedy", "passed")]
    line = report.judged_line(outcomes)
    assert line.startswith(
        "judged 1 of 6 checks (1 passed, 0 failed); 5 skipped, mostly (5): no stored acceptance baseline"
    )
    text = report.summary_markdown(fabricated_table(gates=("equivalence",)), fabricated_run(outcomes=outcomes))
    assert text.splitlines()[2] == f"**{line}**"


def test_divergence_gaps_are_plotted_against_the_margin_not_listed_as_a_column(tmp_path):
    rows = [
        row("eagle", "equivalence", "greedy", "identical", 38, verdict="pass"),
        row("eagle", "equivalence", "greedy", "compared", 40),
        row("eagle", "equivalence", "greedy", "diverged", 0),
    ]
    rows += [
        row("eagle", "equivalence", "greedy", "logprob_gap", g, bound=0.1, unit="nats", position=p)
        for p, g in ((3, 0.02), (9, 0.07))
    ]
    table = report.normalize(pd.DataFrame(rows))
    assert report.plot_divergence_gaps(table) is not None
    assert report.plot_divergence_gaps(report.normalize(pd.DataFrame(rows[:3]))) is None
    text = report.summary_markdown(table, EMPTY_RUN)
    assert "logprob gap" not in text.split("## equivalence")[1].split("\n")[2]  # not a column of the gate table
    paths = report.write_report(tmp_path, table, EMPTY_RUN, step_summary=False)
    assert "plot:divergence_gaps" in paths


def test_a_draft_length_sweep_is_shown_against_k_with_the_best_k_per_level():
    rows = []
    for k, (length, speeds, stored) in {
        2: (1.9, (1.30, 1.10), (1.25, 1.12)),
        3: (2.3, (1.40, 1.05), (1.20, 1.15)),
        4: (2.5, (1.35, 0.95), (1.10, 1.00)),
    }.items():
        m = f"ngram@k{k}"
        rows.append(row(m, "acceptance", "code", "mean_acceptance_length", length))
        rows.append(row(m, "acceptance", "code", "acceptance_rate", (length - 1) / k))
        for c, v, b in zip((1, 4), speeds, stored):
            rows.append(
                row(m, "speedup", f"C={c}", "speedup", v, concurrency=c, baseline=b, ci_low=v - 0.02, ci_high=v + 0.02)
            )
    table = report.normalize(pd.DataFrame(rows))
    ((family, header, body),) = report.sweeps(table)
    assert family == "ngram" and header == [
        "k",
        "mean acceptance length",
        "acceptance rate",
        "speedup C=1",
        "speedup C=4",
    ]
    assert [r[0] for r in body] == ["2", "3", "4", "best k"]
    assert body[-1][3:] == ["k=3 (stored: k=2)", "k=2 (stored: k=3)"]  # the best k moved at both levels
    assert "## draft-length sweep: ngram" in report.summary_markdown(table, EMPTY_RUN)


def test_a_caught_canary_reads_as_caught_with_what_broke_not_as_a_plain_pass():
    """A canary passes when its figures break the bounds of the method it mimics: the row must say so,
    or a reviewer reads 'pass' beside a speedup under its floor."""
    caught = "canary caught: 'suffix_throttled', a deliberately worse configuration of 'suffix', failed ..."
    rows = [
        row(
            "suffix",
            "speedup",
            "C=1",
            "speedup",
            2.77,
            concurrency=1,
            bound=1.50,
            ci_low=2.52,
            ci_high=2.94,
            verdict="pass",
            basis="coarse",
        ),
        row(
            "suffix_throttled",
            "speedup",
            "C=1",
            "speedup",
            0.894,
            concurrency=1,
            baseline=2.77,
            bound=2.35,
            ci_low=0.727,
            ci_high=1.00,
            verdict="pass",
            message=caught,
            qualifier="canary caught",
        ),
        row("suffix_throttled", "speedup", "C=1", "draft_cost", 0.0155, concurrency=1, bound=0.0554),
    ]
    text = report.summary_markdown(report.normalize(pd.DataFrame(rows)), EMPTY_RUN)
    assert "| suffix | C=1 | pass (coarse) |" in text
    line = next(x for x in text.splitlines() if x.startswith("| suffix_throttled | C=1 |"))
    assert "| pass (canary caught) |" in line, line
    assert "caught: speedup floor: 2.77 → 0.894 (-67.7%), floor 2.35" in line, line
    assert "step-cost" not in line  # the figure that held is not named as what caught it
    (full,) = report.tables.gate_tables(report.normalize(pd.DataFrame(rows)), EMPTY_RUN)  # report.html's
    assert [r[2] for r in full.rows] == ["pass (coarse)", "pass (canary caught)"]


def test_speedup_markers_follow_the_verdicts_not_the_median_against_the_floor():
    """A canary whose interval straddles its floor failed (it was not caught) although its median is
    below the floor; a caught canary passed although its median is below it too; a skip was not judged."""
    rows = [
        row(
            "suffix_throttled",
            "speedup",
            f"C={c}",
            "speedup",
            value,
            concurrency=c,
            baseline=1.54,
            bound=0.998,
            ci_low=low,
            ci_high=high,
            verdict=verdict,
        )
        for c, value, low, high, verdict in (
            (1, 0.62, 0.55, 0.70, "pass"),
            (4, 0.890, 0.822, 1.05, "fail"),
            (16, 0.95, 0.80, 1.10, "skip"),
        )
    ]
    fig = report.plot_speedup(report.normalize(pd.DataFrame(rows)))
    ax = fig.axes[0]
    drawn = {}
    for container in ax.containers:  # one errorbar per verdict
        line = container.lines[0]
        for x in line.get_xdata():
            drawn[int(x)] = (line.get_color(), line.get_markerfacecolor())
    assert drawn[1] == ("#1f77b4", "#1f77b4")  # passed: its median is below the floor, and it is not red
    assert drawn[4] == ("#e41a1c", "#e41a1c")  # failed, by its verdict
    assert drawn[16] == ("#888888", "white")  # not judged
    labels = (
        [t.get_text() for t in fig.legends[0].get_texts()]
        if fig.legends
        else [t.get_text() for a in fig.axes for leg in [a.get_legend()] if leg for t in leg.get_texts()]
    )
    assert "failed its check (see the message)" in labels and "below floor" not in labels
    report.plots.pyplot().close(fig)


def test_the_load_table_and_the_edges_section_show_each_level_and_class():
    rows = [
        row("eagle3", "load", "C=16", "requests", 192, concurrency=16),
        row("eagle3", "load", "C=16", "identical", 188, concurrency=16),
        row(
            "eagle3",
            "load",
            "C=16",
            "diverged",
            1,
            bound=0,
            concurrency=16,
            verdict="fail",
            message="method 'eagle3', C=16: 4 of 192 requests (1 prompts) diverge from the baseline engine's output",
            headline=True,
        ),
        row("eagle3", "load", "C=16", "mean_acceptance_length", 1.73, baseline=1.73, bound=1.71, concurrency=16),
        row(
            "eagle3",
            "edges",
            "classes",
            "cases",
            20,
            verdict="fail",
            message="1 differs of 4 cases; the first: "
            "method 'eagle3', context_edge: case context_edge@11 differs from the baseline engine's: at token 3",
        ),
        row("eagle3", "edges", "classes", "context_edge.equal", 3),
        row("eagle3", "edges", "classes", "context_edge.differs", 1),
        row("eagle3", "edges", "classes", "context_edge.inconsistent", 0),
        row("eagle3", "edges", "classes", "context_edge.counted_past_end", 0, bound=0),
        row("eagle3", "edges", "classes", "context_edge.mean_acceptance_length", 1.07, baseline=1.08, bound=1.06),
        row("eagle3", "edges", "classes", "block.counted_past_end", 2, bound=0),
    ]
    text = report.summary_markdown(report.normalize(pd.DataFrame(rows)), fabricated_run(outcomes=[]))
    load = text.split("## load")[1].split("## ")[0]
    assert "| eagle3 | C=16 | **fail** | 192 | 188 | 1 ≤ 0 | 1.73 ≥ 1.71 |" in load
    assert max(len(line.split(" | ")) for line in load.splitlines() if line.startswith("| ")) <= 8
    # the gate's table names the class of a failing class figure
    assert "counters within the output (block): 2, ceiling 0" in text.split("## edges")[1]
    edges = text.split("## edges: eagle3 (fail)")[1]
    assert "| context_edge | 3 | 1 | 0 | 0 | 1.07 (1.08) |" in edges
    assert "case context_edge@11 differs from the baseline engine's: at token 3" in edges


def test_acceptance_per_request_shows_each_methods_distribution_its_lowest_requests_and_both_plots(tmp_path):
    rows = []
    for i in range(10):
        base = 2.0 + i / 10
        value = base if i else 1.2  # code-00 fell below its floor
        rows.append(
            row(
                "eagle",
                "acceptance",
                "code",
                f"request_acceptance_length[code-{i:02d}]",
                value,
                baseline=base,
                bound=base * 0.99,
            )
        )
    for position, (value, base) in enumerate([(2.0, 2.0), (2.1, 2.1), (1.7, 2.2)]):
        rows.append(
            row(
                "eagle",
                "acceptance",
                "code",
                "window_tokens_per_step",
                value,
                baseline=base,
                bound=base * 0.9,
                position=position,
            )
        )
    rows += [
        row("eagle", "acceptance", "code", "requests_below_floor", 1, bound=0),
        row("eagle", "acceptance", "code", "request_lengths_from_engine", 1.0),
        row("eagle", "acceptance", "code", "request_windows_from_engine", 0.5),
    ]
    table = report.normalize(pd.DataFrame(rows))
    text = report.summary_markdown(table, fabricated_run(outcomes=[]))
    section = text.split("## acceptance per request")[1]
    assert "| eagle | 10 | 2.45 (2.45) | 2.01 (2.09) | 1 | 2 (2) / 1.70 (2.20) | 100%, 50% |" in section, section
    assert "- eagle: lowest requests code-00 1.20 (2), code-01 2.10 (2.10), code-02" in section
    files, failures = report.render_plots(table, tmp_path)
    assert {"acceptance_requests", "acceptance_windows"} <= set(files) and not failures


def test_decided_by_names_each_check_once_and_a_failing_request_by_its_prompt():
    from specgate.report.glance import decided

    def row(metric, value, baseline, bound):
        return {
            "metric": metric,
            "gate": "acceptance",
            "value": value,
            "baseline": baseline,
            "bound": bound,
            "position": None,
        }

    passing = [row("mean_acceptance_length", 2.0, 2.0, 1.98), row("drift_mean_acceptance_length", 2.0, 2.0, 1.9)]
    passing += [row(f"request_acceptance_length[doc_prose-{i:02d}]", 2.0, 2.0, 1.98) for i in range(1, 13)]
    passing += [row("request_acceptance_p10", 1.5, 1.5, 1.35), row("requests_below_floor", 0.0, None, 0.0)]
    assert decided(passing, "pass") == (
        "acceptance floor, drift floor, per-request floor, 10 % quantile floor, requests below their floors"
    )
    failing = passing[:3] + [row("request_acceptance_length[doc_prose-03]", 1.04, 1.31, 1.29)]
    failing.append(row("requests_below_floor", 1.0, None, 0.0))
    assert decided(failing, "fail") == (
        "per-request floor (doc_prose-03): 1.31 → 1.04 (-20.6%), floor 1.29; requests below their floors: 1, ceiling 0"
    )
