"""One verdict vocabulary: a judgement's verdict (checks.Verdict) and what it says besides (checks.Basis's
label, or 'canary caught') reach the results table as typed columns, and the report reads those columns,
never a message's wording; a table written before the `qualifier` column still reads as it did."""

import json

import pandas as pd

from specgate import report
from specgate.checks import FAILED, TOLD, Basis, Judgement, Row, Verdict, worst
from specgate.report.data import caught, verdict_label
from specgate.store.run_record import SCHEMA, RunRecord


def canary(messages=("the gate failed it, as it must",), **options) -> Judgement:
    rows = [Row("speedup", 0.894, baseline=2.77, bound=2.35, concurrency=1, headline=True)]
    return Judgement("speedup", "suffix_throttled", "C=1", Verdict.PASS, list(messages), rows, **options)


def test_a_judgement_puts_its_verdict_and_qualifier_on_its_rows():
    rows = canary(caught=True, basis="coarse").table_rows()
    assert rows[0]["verdict"] == "pass" and rows[0]["qualifier"] == "canary caught"  # caught over coarse
    assert canary(basis=Basis.COARSE).table_rows()[0]["qualifier"] == "coarse"
    assert canary(basis=Basis.KNOWN).table_rows()[0]["qualifier"] == "known issue"
    assert canary(basis=Basis.DISTURBED).table_rows()[0]["qualifier"] == ""
    assert canary().table_rows()[0]["qualifier"] == ""


def test_the_report_labels_a_caught_canary_from_its_qualifier_not_its_message():
    table = report.normalize(pd.DataFrame(canary(caught=True).table_rows()))
    assert "| suffix_throttled | C=1 | pass (canary caught) |" in report.summary_markdown(
        table, RunRecord("gate", "", "")
    )
    worded = report.normalize(pd.DataFrame(canary(messages=["canary caught: a message alone"]).table_rows()))
    assert not caught(worded.to_dict("records"))  # the words alone are no catch
    assert verdict_label("pass", worded.to_dict("records")) == "pass"


def test_rows_built_without_a_judgement_are_qualified_by_their_basis():
    table = report.normalize(
        pd.DataFrame([{"method": "m", "gate": "speedup", "key": "C=1", "verdict": "fail", "basis": "coarse"}])
    )
    assert table["qualifier"].tolist() == ["coarse"]
    assert verdict_label("fail", table.to_dict("records")) == "fail (coarse)"


def test_a_results_directory_written_before_the_qualifier_column_reads_as_it_did(tmp_path):
    """measurements.json without `qualifier` and a run.json without `known_issues`, as specgate wrote them
    before: the caught canary still reads as caught."""
    rows = canary(caught=True).table_rows()
    for r in rows:
        del r["qualifier"]
        r["message"] = "canary caught: 'suffix_throttled', a deliberately worse configuration of 'suffix', failed ..."
    (tmp_path / "measurements.json").write_text(json.dumps(rows))
    record = RunRecord("gate", "r1", "cpu-tiny").to_json()
    del record["known_issues"]
    assert record["schema"] == SCHEMA
    (tmp_path / "run.json").write_text(json.dumps(record))
    table, run = report.load_run(tmp_path)
    assert table["qualifier"].tolist() == ["canary caught"]
    assert "| suffix_throttled | C=1 | pass (canary caught) |" in report.summary_markdown(table, run)


def test_the_verdict_groups():
    assert worst(["pass", Verdict.SKIP, "", "fail"]) == "fail"
    assert [v.value for v in FAILED] == ["fail", "error"] and Verdict.SKIP in TOLD and Verdict.PASS not in TOLD
    assert pd.Series(["pass", "error", "fail", "skip", ""]).isin(FAILED).tolist() == [False, True, True, False, False]
    assert [v.word for v in Verdict] == ["passed", "failed", "skipped", "error"]
