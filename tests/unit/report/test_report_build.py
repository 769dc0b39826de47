"""One pass over the run's table: write_report normalizes it once and hands that table to summary.md,
the plots and report.html, which take it as it is (and refuse one that was not normalized)."""

import pandas as pd
import pytest

import specgate.report
import specgate.report.data
from specgate import report
from specgate.store.run_record import RunRecord


def test_a_report_build_normalizes_the_table_once(tmp_path, monkeypatch):
    calls = []
    real = specgate.report.data.normalize

    def counted(table):
        calls.append(len(table))
        return real(table)

    monkeypatch.setattr(specgate.report, "normalize", counted)
    monkeypatch.setattr(specgate.report.data, "normalize", counted)
    rows = [
        {
            "method": "ngram",
            "gate": "lifecycle",
            "key": "lifecycle",
            "metric": "leftover",
            "value": 0,
            "verdict": "pass",
        }
    ]
    paths = report.write_report(tmp_path, pd.DataFrame(rows), RunRecord("gate", "r", "cpu-tiny"), step_summary=False)
    assert calls == [1] and paths["summary"].is_file() and paths["html"].is_file()


def test_the_report_parts_refuse_a_table_that_was_not_normalized():
    raw = pd.DataFrame([{"method": "ngram", "gate": "lifecycle", "key": "", "metric": "leftover", "value": 0}])
    with pytest.raises(ValueError, match="normalize"):
        report.summary_markdown(raw, RunRecord("gate", "r", ""))
