"""Greedy equivalence: every speculative method reproduces the baseline engine's greedy tokens."""

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.correctness]
SPECGATE_STAGE = 10  # first in each method's group: it boots the engine the later stages reuse
SPECGATE_GATE = "equivalence"
SHOW = 10  # divergences listed in a failure message


def test_baseline_engine_produces_reference_outputs(gate, gate_call, engine):
    outputs = gate_call(gate.greedy_outputs, "baseline")
    prompts = gate.prompts()
    empty = [p.id for p in prompts if not outputs[p.id].token_ids]
    assert not empty, f"the baseline engine produced no tokens for prompts {empty}"
    missing = [p.id for p in prompts if len(outputs[p.id].top_logprobs) != len(outputs[p.id].token_ids)]
    assert not missing, f"the baseline engine returned no top-k logprobs for prompts {missing}"


def test_method_reproduces_baseline_greedy_output(gate, gate_call, method, engine):
    findings = gate_call(gate.equivalence, method)
    failures = [f for f in findings if not f.divergence.numerical]
    shown = "\n".join(gate.describe(f, method) for f in failures[:SHOW])
    more = f"\n... and {len(failures) - SHOW} more" if len(failures) > SHOW else ""
    assert not failures, f"{len(failures)} of {len(gate.prompts())} prompts diverge from the baseline:\n{shown}{more}"
