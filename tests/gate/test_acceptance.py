"""Acceptance per (method, prompt category) against the stored baseline and the profile's floors."""

import pytest

pytestmark = pytest.mark.gpu
SPECGATE_STAGE = 20  # after equivalence: reuses the engine and the same generation pass
SPECGATE_GATE = "acceptance"


def test_acceptance_holds_per_category(gate, gate_call, method, category, engine):
    outcome = gate_call(gate.check_acceptance, method, category)
    if outcome.skip:
        pytest.skip(outcome.skip)
    assert not outcome.failures, "\n".join(outcome.failures)
