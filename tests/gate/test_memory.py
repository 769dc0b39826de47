"""Memory overhead per method against the stored ceiling (weights, KV capacity, process memory)."""

import pytest

# last before shutdown: reads the live engine once its work is done
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="memory")]


def test_memory_overhead_within_baseline(judge, engine_method):
    verdict = judge(engine_method)
    assert verdict.passed, verdict.message
