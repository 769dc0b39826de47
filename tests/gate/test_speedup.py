"""Speedup per (method, concurrency) over the baseline engine measured in the same run."""

import pytest

pytestmark = pytest.mark.gpu
SPECGATE_STAGE = 60  # after the greedy pass (acceptance), before memory is read
SPECGATE_GATE = "speedup"


def test_speedup_holds_per_concurrency(gate, gate_call, engine_method, concurrency, engine, benchmark):
    outcome = gate_call(gate.check_speedup, engine_method, concurrency, benchmark_repeat(benchmark))
    if outcome.skip:
        pytest.skip(outcome.skip)
    assert not outcome.failures, "\n".join(outcome.failures)


def benchmark_repeat(benchmark):
    """Trials timed through pytest-benchmark (its JSON storage and `compare` then work on our runs);
    the decision uses our own steady-window throughput. Under xdist pytest-benchmark disables itself."""
    if benchmark.disabled:
        return None

    def repeat(trial, times):
        benchmark.pedantic(trial, rounds=times, iterations=1, warmup_rounds=0)

    return repeat
