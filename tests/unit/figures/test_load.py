"""The closed-loop driver: exactly C in flight, the steady window, per-request latencies."""

import asyncio
from dataclasses import dataclass

import pytest

from specgate.figures.load import LoadRun, RequestTrace, closed_loop, trial_prompts


@dataclass(frozen=True)
class P:
    id: str
    token_ids: tuple
    category: str = ""


class FakeClock:
    """Virtual time advanced by the fake engine, so the test is exact and instant."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fake_engine(clock, step_s=0.01, tokens=6, per_step=2):
    in_flight = []
    peak = [0]

    async def stream(token_ids, max_tokens, tag):
        in_flight.append(tag)
        peak[0] = max(peak[0], len(in_flight))
        try:
            for _ in range(min(tokens, max_tokens) // per_step):
                clock.now += step_s
                await asyncio.sleep(0)
                yield [7] * per_step
        finally:
            in_flight.remove(tag)

    return stream, in_flight, peak


@pytest.mark.parametrize("concurrency", [1, 3, 8])
def test_closed_loop_keeps_exactly_c_in_flight_and_runs_every_request(concurrency):
    clock = FakeClock()
    stream, in_flight, peak = fake_engine(clock)
    prompts = [P(f"p{i}", (1, 2, 3)) for i in range(3 * concurrency)]
    run = asyncio.run(closed_loop(stream, prompts, concurrency, max_tokens=6, clock=clock))
    assert peak[0] == concurrency
    assert not in_flight
    assert [r.index for r in run.requests] == list(range(len(prompts)))
    assert all(r.output_tokens == 6 and len(r.arrivals) == 3 for r in run.requests)


def test_steady_window_excludes_the_first_wave_and_the_tail():
    # C=2, four requests: completions at 1, 1, 2, 2 s -> window (1, 2] covers the second wave only.
    reqs = [RequestTrace(0, "a", 0.0, [(0.5, 1), (1.0, 1)]), RequestTrace(1, "b", 0.0, [(0.5, 1), (1.0, 1)])]
    reqs += [RequestTrace(2, "c", 1.0, [(1.5, 3), (2.0, 1)]), RequestTrace(3, "d", 1.0, [(1.5, 3), (2.0, 1)])]
    run = LoadRun(2, reqs, 0.0, 2.0)
    assert run.window == (1.0, 2.0)
    assert run.window_tokens == 8
    assert run.throughput == pytest.approx(8.0)
    summary = run.latency_summary()
    assert summary["requests"] == 2  # the warm-up wave is left out
    assert summary["ttft_p50_ms"] == pytest.approx(500.0)
    assert summary["tpot_p50_ms"] == pytest.approx(500.0 / 3)  # 3 more tokens in 0.5 s


def test_too_few_requests_for_a_steady_window_is_an_error():
    run = LoadRun(4, [RequestTrace(i, "x", 0.0, [(1.0, 1)]) for i in range(5)], 0.0, 1.0)
    with pytest.raises(ValueError, match="at least 8 requests"):
        _ = run.throughput


def test_trial_prompts_mix_categories_evenly_and_are_the_same_for_every_engine():
    prompts = [P(f"{cat}-{i}", (i,), cat) for cat in ("a", "b", "c") for i in range(4)]
    first = trial_prompts(prompts, 4, 12, seed=0)
    assert first == trial_prompts(prompts, 4, 12, seed=0)
    assert [p.category for p in first[:6]] == ["a", "b", "c", "a", "b", "c"]
    assert len({p.id for p in first}) == 12  # every prompt once before any repeats
    assert first != trial_prompts(prompts, 4, 12, seed=1)
