"""Memory overhead per method against the stored ceiling (weights, KV capacity, process memory)."""

import pytest

pytestmark = pytest.mark.gpu
SPECGATE_STAGE = 90  # last before shutdown: reads the live engine once its work is done
SPECGATE_GATE = "memory"


def test_memory_overhead_within_baseline(gate, gate_call, engine_method, engine):
    outcome = gate_call(gate.check_memory, engine_method)
    if outcome.skip:
        pytest.skip(outcome.skip)
    assert not outcome.failures, "\n".join(outcome.failures)
