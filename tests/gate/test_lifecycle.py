"""Engine lifecycle: each engine boots once and gives its processes and memory back on shutdown."""

import pytest

# last in each method's group: the next method's engine boots after it
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="lifecycle")]


def test_engine_booted_once_and_released_its_memory(judge, engine_method):
    verdict = judge(engine_method)
    assert verdict.passed, verdict.message
