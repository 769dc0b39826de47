"""Statistics for the speedup gate: medians, percentiles, bootstrap intervals, the analytic bound.

Timings on shared machines are noisy, so the gate never looks at one number: a speedup is the median
of per-trial ratios with a bootstrap confidence interval, and it fails only when the whole interval
lies below the floor.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

BOOTSTRAP_RESAMPLES = 4000
CONFIDENCE = 0.95


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile, q in [0, 100] (numpy's default definition)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = median,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` (seeded: the same data gives the same interval)."""
    if len(values) < 2:
        raise ValueError(f"a bootstrap interval needs at least 2 values, got {len(values)}")
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    tail = (1 - confidence) / 2 * 100
    return percentile(stats, tail), percentile(stats, 100 - tail)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval, from `n` paired trials."""

    value: float
    low: float
    high: float
    n: int

    def describe(self, digits: int = 2) -> str:
        return f"{self.value:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}] (n={self.n})"


def ratio_estimate(numerators: Sequence[float], denominators: Sequence[float], seed: int = 0) -> Estimate:
    """Median of the per-trial ratios numerator_i / denominator_i with a bootstrap interval.

    Trial i of both sides ran the same requests, so the ratio of a pair cancels what the prompts
    contribute; resampling pairs keeps that pairing.
    """
    if len(numerators) != len(denominators):
        raise ValueError(f"paired trials differ in number: {len(numerators)} vs {len(denominators)}")
    ratios = [a / b for a, b in zip(numerators, denominators)]
    low, high = bootstrap_ci(ratios, seed=seed)
    return Estimate(median(ratios), low, high, len(ratios))


def sequential(
    estimate: Callable[[], Estimate], more: Callable[[int], None], floor: float | None, max_n: int, step: int
) -> Estimate:
    """Add trials (`more(step)`) while the interval straddles the floor (low < floor <= high), up to
    `max_n`; the final estimate. Cells the evidence already decides (the interval clear of the floor
    either way) stop at once, so the extra time goes where the decision is close."""
    current = estimate()
    budget = max_n - current.n
    while floor is not None and current.low < floor <= current.high and budget >= step:
        more(step)
        budget -= step
        current = estimate()
    return current


def geometric_mean(values: Sequence[float]) -> float:
    """The mean a speedup summary over concurrency levels wants: a 2x and a 0.5x level cancel out."""
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"a geometric mean needs positive values, got {list(values)}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geometric_mean_estimate(estimates: Sequence[Estimate]) -> Estimate:
    """The geometric mean of several levels' estimates, with the geometric means of their bounds as
    its interval (each level inside its own interval puts the mean inside this one)."""
    return Estimate(
        geometric_mean([e.value for e in estimates]),
        geometric_mean([e.low for e in estimates]),
        geometric_mean([e.high for e in estimates]),
        min(e.n for e in estimates),
    )


def crossover(levels: Sequence[int], estimates: Sequence[Estimate]) -> int | None:
    """The lowest concurrency at which speculation is slower than the baseline engine, evidence
    permitting (the interval's upper bound below 1.0); None when there is none up to the top level."""
    for level, est in sorted(zip(levels, estimates), key=lambda x: x[0]):
        if est.high < 1.0:
            return level
    return None


def within_rtol(ratio: float, rtol: float) -> bool:
    """`ratio` inside [1 - rtol, 1 / (1 - rtol)] (symmetric in log space); rtol 0 = always."""
    return not rtol or 1 - rtol <= ratio <= 1 / (1 - rtol)


def fails_floor(estimate: Estimate, floor: float) -> bool:
    """The gate's decision: the evidence says the speedup is below the floor only when the whole
    interval is."""
    return estimate.high < floor


# -- the analytic speedup of speculative decoding (Leviathan et al., 2023, "Fast Inference from
# Transformers via Speculative Decoding", arXiv:2211.17192, Theorem 3.8 and Corollary 3.9) ----------


def tokens_per_step(alpha: float, k: int) -> float:
    """Expected tokens one verification step emits when each draft token is accepted with
    probability alpha, independently: (1 - alpha^(k+1)) / (1 - alpha)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def alpha_from_acceptance_length(mean_length: float, k: int) -> float:
    """The per-token acceptance probability alpha whose i.i.d. model gives this mean acceptance
    length (tokens per step); the measured rate accepted/drafted is not alpha when rejections stop a
    draft early, so alpha is solved for (bisection; the model is increasing in alpha)."""
    if not 1.0 <= mean_length <= k + 1 + 1e-9:
        raise ValueError(f"mean acceptance length {mean_length} outside [1, {k + 1}] for k={k}")
    if mean_length >= k + 1:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if tokens_per_step(mid, k) < mean_length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def expected_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Leviathan's expected walltime improvement: (1 - alpha^(k+1)) / ((1 - alpha)(k c + 1)), where
    c is the cost of one drafting step relative to one target step. It ignores verification costing
    more than a plain step and every system overhead, so measured / expected < 1 measures those."""
    return tokens_per_step(alpha, k) / (k * cost_ratio + 1)
