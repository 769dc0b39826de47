"""Speedup per (method, concurrency) over the baseline engine measured in the same run."""

import pytest

# after the greedy pass (acceptance), before memory is read
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="speedup")]


def test_speedup_holds_per_concurrency(judge, engine_method, concurrency, benchmark):
    verdict = judge(engine_method, concurrency, repeat=timed_by(benchmark))
    assert verdict.passed, verdict.message


def timed_by(benchmark):
    """Trials timed through pytest-benchmark (its JSON storage and `compare` then work on our runs);
    the decision uses our own steady-window throughput. Under xdist pytest-benchmark disables itself."""
    if benchmark.disabled:
        return None

    def repeat(trial, times):
        benchmark.pedantic(trial, rounds=times, iterations=1, warmup_rounds=0)

    return repeat


@pytest.mark.specgate(gate="speedup", stage=65)  # after every level of the method
def test_speedup_summary_holds_over_the_levels(judge, method):
    """The geometric mean over the concurrency levels, and the crossover (the lowest level at which
    speculation is slower than the baseline engine) must not drop."""
    verdict = judge(method)
    assert verdict.passed, verdict.message
