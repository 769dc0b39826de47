"""Greedy equivalence: every speculative method reproduces the baseline engine's greedy tokens."""

import pytest

# first in each method's group: it boots the engine the later stages reuse
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="equivalence")]


def test_baseline_engine_produces_reference_outputs(judge):
    verdict = judge("baseline")
    assert verdict.passed, verdict.message


def test_method_reproduces_baseline_greedy_output(judge, method):
    verdict = judge(method)
    assert verdict.passed, verdict.message
