"""Scenarios where vLLM's spec-decode regressions were filed, off the plain path: requests preempted and
resumed mid-speculation, prefix-cache reuse over rounds, grammar-constrained output
(specgate/checks/scenarios.py), requests as users send them (specgate/checks/requests.py) and traffic at the
edges: KV-block-sized prompts, max_model_len, split prefills, EOS (specgate/checks/edges.py). A profile
enables each with its `[scenarios.<name>]` table; the others are deselected."""

import pytest

pytestmark = [pytest.mark.gpu]


# after acceptance (the greedy pass it is compared with), before the speed trials
@pytest.mark.specgate(gate="structured")
def test_structured_output_matches_the_baseline_and_the_schema(judge, engine_method):
    verdict = judge(engine_method)
    assert verdict.passed, verdict.message


# after the speed trials (its replays warm the method's prefix cache), before memory
@pytest.mark.specgate(gate="prefix_soak")
def test_prefix_soak_keeps_acceptance_and_outputs(judge, method):
    verdict = judge(method)
    assert verdict.passed, verdict.message


# after memory (its thousands of requests would move the engine's peak memory), before the shutdown
@pytest.mark.specgate(gate="requests")
def test_requests_give_what_the_plain_engine_gives(judge, engine_method):
    verdict = judge(engine_method)
    assert verdict.passed, verdict.message


# after the requests scenario (its long prompts last on the method's engine), before the shutdown
@pytest.mark.specgate(gate="edges")
def test_edges_give_what_the_plain_engine_gives(judge, engine_method):
    verdict = judge(engine_method)
    assert verdict.passed, verdict.message


# last: its own engine with a small KV cache, booted after the method's engine was shut down
@pytest.mark.specgate(gate="preemption")
def test_preemption_keeps_outputs_and_acceptance(judge, method):
    verdict = judge(method)
    assert verdict.passed, verdict.message
