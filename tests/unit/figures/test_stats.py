"""Statistics of the speedup gate and the analytic speedup model."""

import math
import random

import numpy as np
import pytest

from specgate.figures import stats


def test_median_and_percentile_match_numpy():
    rng = np.random.default_rng(1)
    values = list(rng.normal(size=17))
    assert stats.median(values) == pytest.approx(float(np.median(values)))
    for q in (0, 10, 50, 97.5, 100):
        assert stats.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_ratio_estimate_pairs_trials_and_is_reproducible():
    spec = [12.0, 20.0, 16.0, 24.0, 14.0]
    base = [10.0, 16.0, 13.0, 20.0, 11.0]  # each pair ~1.2-1.27 although the levels vary a lot
    est = stats.ratio_estimate(spec, base)
    assert est == stats.ratio_estimate(spec, base)
    assert est.n == 5
    assert 1.19 <= est.low <= est.value <= est.high <= 1.28
    with pytest.raises(ValueError, match="paired trials"):
        stats.ratio_estimate(spec, base[:4])


def test_gate_fails_only_when_the_whole_interval_is_below_the_floor():
    assert stats.fails_floor(stats.Estimate(0.9, 0.85, 0.95, 5), floor=1.0)
    assert not stats.fails_floor(stats.Estimate(0.9, 0.85, 1.05, 5), floor=1.0)


def test_bootstrap_interval_narrows_with_more_trials():
    rng = np.random.default_rng(2)
    few = list(1.2 + 0.1 * rng.normal(size=5))
    many = list(1.2 + 0.1 * rng.normal(size=80))
    width = lambda v: np.subtract(*reversed(stats.bootstrap_ci(v)))  # noqa: E731
    assert width(many) < width(few)


def test_leviathan_model():
    # alpha = 0: every draft rejected, one token per step; the drafting cost is pure loss.
    assert stats.expected_speedup(0.0, 3, 0.1) == pytest.approx(1 / 1.3)
    # alpha = 0.8, k = 4, c = 0.05: (1 - 0.8^5) / (0.2 * 1.2) (the paper's Corollary 3.9 form).
    assert stats.expected_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / (0.2 * 1.2))
    assert stats.tokens_per_step(1.0, 3) == 4.0


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9, 0.999])
def test_alpha_is_recovered_from_the_mean_acceptance_length(alpha):
    length = stats.tokens_per_step(alpha, 3)
    assert stats.alpha_from_acceptance_length(length, 3) == pytest.approx(alpha, abs=1e-6)


def test_impossible_acceptance_length_is_an_error():
    with pytest.raises(ValueError, match="outside"):
        stats.alpha_from_acceptance_length(4.5, 3)


def _simulated_cell(rng, true_ratio, sigma, stored, rtol, trials=4, max_trials=12, step=2):
    """One speedup cell with paired trials whose ratios carry lognormal noise: (fails, trials used)."""
    ratios = []

    def more(n):
        ratios.extend(true_ratio * math.exp(rng.gauss(0, sigma)) for _ in range(n))

    def estimate():  # stats.ratio_estimate's statistic, with fewer resamples to keep the test quick
        low, high = stats.bootstrap_ci(ratios, resamples=1000)
        return stats.Estimate(stats.median(ratios), low, high, len(ratios))

    more(trials)
    floor = stored * (1 - rtol)
    est = stats.sequential(estimate, more, floor, max_trials, step)
    return stats.fails_floor(est, floor), est.n


def test_sequential_trials_catch_a_ten_percent_loss_without_false_alarms_on_simulated_noise():
    """Paired-ratio noise of 3 % per trial (an interleaved cell on a quiet 2-core machine); the stored
    speedup is itself the median of 4 trials of an earlier run. rtol 0.05, 4 trials, up to 12."""
    rng = random.Random(7)
    runs, sigma = 150, 0.03

    def stored():  # an update run's median of 4 noisy trials
        return stats.median([math.exp(rng.gauss(0, sigma)) for _ in range(4)])

    aa = [_simulated_cell(rng, 1.0, sigma, stored(), 0.05) for _ in range(runs)]
    loss = [_simulated_cell(rng, 0.90, sigma, stored(), 0.05) for _ in range(runs)]
    false_alarms = sum(f for f, _ in aa) / runs
    detected = sum(f for f, _ in loss) / runs
    assert false_alarms <= 0.01, false_alarms
    assert detected >= 0.9, detected
    # the extra trials go where the decision is close: most A/A cells stop at the first 4
    assert stats.median([n for _, n in aa]) == 4


def test_sequential_trials_stop_at_their_limit_and_without_a_floor():
    calls = []
    est = stats.Estimate(1.0, 0.9, 1.1, 4)
    assert stats.sequential(lambda: est, calls.append, 1.0, max_n=8, step=2) is est  # straddles, but n never grows
    assert calls == [2, 2]
    calls.clear()
    assert stats.sequential(lambda: est, calls.append, None, max_n=8, step=2) is est and calls == []


def test_the_speedup_summaries_geometric_mean_and_crossover():
    assert stats.geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert stats.geometric_mean([1.2, 1.2, 1.2]) == pytest.approx(1.2)
    with pytest.raises(ValueError):
        stats.geometric_mean([])
    e = lambda v, lo, hi: stats.Estimate(v, lo, hi, 4)  # noqa: E731
    levels = [16, 1, 4]
    assert stats.crossover(levels, [e(0.9, 0.85, 0.95), e(1.3, 1.2, 1.4), e(0.98, 0.9, 1.02)]) == 16
    assert stats.crossover(levels, [e(0.97, 0.9, 1.01), e(1.3, 1.2, 1.4), e(0.9, 0.85, 0.99)]) == 4
    assert stats.crossover(levels, [e(0.97, 0.9, 1.01), e(1.3, 1.2, 1.4), e(1.1, 1.0, 1.2)]) is None
    summary = stats.geometric_mean_estimate([e(2.0, 1.0, 4.0), e(0.5, 0.25, 1.0)])
    assert (summary.value, summary.low, summary.high) == pytest.approx((1.0, 0.5, 2.0))
