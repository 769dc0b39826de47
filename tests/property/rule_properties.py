"""What each verification rule of Model Runner V2 promises beyond the per-token rule's guarantees
(properties.py), as checks that raise AssertionError with the evidence.

- block (Sun et al.): lossless (properties.py's checks apply unchanged) and never accepts fewer
  drafts on average than the per-token rule: the mean accepted count is at least the per-token
  rule's exact expectation, and equals block's own (expectations.py), within a z bound.
- synthetic: acceptance ignores p and q; the share of requests keeping at least i drafts is the
  i-th unconditional rate (a binomial bound per position), the mean emitted count the configured
  `synthetic_acceptance_length`.
- fly: lossy on purpose, within its gate. Greedy rows: a token differs from the target's argmax
  only where FLy's entropy gate was open and the next `window` drafts matched; rows where the gate is
  shut everywhere are the per-token rule's output. Sampled rows: where the gate is shut the output
  follows the target (properties.check_emitted_tokens_follow_target); where it is open the
  divergence (drafts accepted beyond what the per-token rule keeps) is measured and must match the
  rule's exact expectation, so a lossier change fails.

Statistics as in properties.py: ALPHA = 1e-3 per check, Bonferroni across positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

from specgate.sampler.reference import RejectionSampler, SpecRequest, emitted_tokens, top_k_entropy

from . import expectations
from .properties import ALPHA, describe, expected_greedy_tokens, lengths, sample_case
from .strategies import DistributionCase

Z = float(stats.norm.isf(ALPHA / 2))  # two-sided
Z_ONE_SIDED = float(stats.norm.isf(ALPHA))


def accepted_counts(rows: np.ndarray) -> np.ndarray:
    return lengths(rows) - 1


def mean_and_error(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def check_mean_accepted_is(sample: RejectionSampler, case: DistributionCase, expected: float, rule: str) -> None:
    """Mean accepted drafts equal `rule`'s exact expectation on `case` (two-sided z at ALPHA)."""
    mean, error = mean_and_error(accepted_counts(sample_case(sample, case)))
    bound = Z * max(error, 1e-12)
    assert abs(mean - expected) <= bound, (
        f"{case.name}: {rule} accepted {mean:.4f} drafts per request (standard error {error:.4f}), "
        f"its exact expectation is {expected:.4f} (|difference| > {bound:.4f}, z = {Z:.2f})"
    )


def check_block_accepts_at_least_standard(sample: RejectionSampler, case: DistributionCase) -> None:
    """Block verification keeps at least as many drafts as the per-token rule on the same p, q: its
    measured mean is not below the per-token rule's exact expectation by more than a one-sided z
    bound."""
    mean, error = mean_and_error(accepted_counts(sample_case(sample, case)))
    standard = expectations.expected_accepted_standard(case)
    assert mean >= standard - Z_ONE_SIDED * error, (
        f"{case.name}: block verification accepted {mean:.4f} drafts per request (standard error "
        f"{error:.4f}), fewer than the per-token rule's {standard:.4f} (bound {Z_ONE_SIDED:.2f} standard errors)"
    )


def check_synthetic_acceptance_rates(sample: RejectionSampler, case: DistributionCase, rates: Sequence[float]) -> None:
    """P(at least i + 1 drafts kept) = rates[i], whatever p and q are (binomial, ALPHA / k each)."""
    kept = accepted_counts(sample_case(sample, case))
    alpha = ALPHA / len(rates)
    for i, rate in enumerate(rates):
        count = int((kept >= i + 1).sum())
        if rate in (0.0, 1.0):
            assert count == rate * len(kept), (
                f"{case.name}: {count} of {len(kept)} requests kept at least {i + 1} drafts; rate {rate} allows no "
                "other count"
            )
            continue
        pvalue = stats.binomtest(count, len(kept), rate).pvalue
        assert pvalue >= alpha, (
            f"{case.name}: {count / len(kept):.4f} of requests kept at least {i + 1} drafts, synthetic rate "
            f"{rate} (binomial p = {pvalue:.2g} < {alpha:.2g}, n = {len(kept)})"
        )


def check_synthetic_acceptance_length(sample: RejectionSampler, case: DistributionCase, length: float) -> None:
    """The mean number of tokens emitted per request is `synthetic_acceptance_length` (z at ALPHA)."""
    emitted = lengths(sample_case(sample, case)).astype(np.float64)
    mean, error = mean_and_error(emitted)
    bound = Z * max(error, 1e-12)
    assert abs(mean - length) <= bound, (
        f"{case.name}: {mean:.4f} tokens emitted per request (standard error {error:.4f}), "
        f"synthetic_acceptance_length {length} (|difference| > {bound:.4f})"
    )


def fly_gate(request: SpecRequest, i: int, window: int, threshold: float, top_k: int) -> bool:
    """FLy's gate at draft i of a greedy request, as vLLM documents it (config/speculative.py
    0.33:652-659, rejection_sampler_utils.py 0.33:718-723)."""
    x = request.draft_token_ids[i]
    entropy = top_k_entropy(request.target_logits[i], request.temperature, top_k)
    return bool(request.target_logits[i, x] > -np.inf and i + window < request.num_drafts and entropy >= threshold)


def check_fly_greedy_diverges_only_where_gate_allows(
    sample: RejectionSampler, batch: Sequence[SpecRequest], window: int, threshold: float, top_k: int
) -> None:
    """Greedy rows: the accepted drafts are a prefix of the drafts; each that differs from the target's
    argmax sits where the gate was open and is followed by `window` accepted drafts equal to the
    argmax; the token after the accepted drafts is the argmax there (or the bonus row's)."""
    rows = sample(batch, seed=0)
    for i, request in enumerate(batch):
        if not request.is_greedy:
            continue
        tokens, argmax = emitted_tokens(rows[i]), [int(t) for t in request.target_logits.argmax(axis=1)]
        n = len(tokens) - 1  # accepted drafts
        what = f"request {i} ({describe(request)}): emitted {tokens}, argmax {argmax}"
        assert tokens[:n] == list(request.draft_token_ids[:n]), f"{what}: not a prefix of the drafts"
        assert tokens[n] == argmax[n], f"{what}: token {n} after the accepted drafts is not the argmax"
        for j in range(n):
            if tokens[j] != argmax[j]:
                assert fly_gate(request, j, window, threshold, top_k), (
                    f"{what}: draft {j} differs from the argmax where FLy's gate is shut"
                )
                following = range(j + 1, j + 1 + window)
                assert all(m < n and tokens[m] == argmax[m] for m in following), (
                    f"{what}: draft {j} was kept without the next {window} drafts matching the argmax"
                )


def check_greedy_output_is_per_token_rule(sample: RejectionSampler, batch: Sequence[SpecRequest]) -> None:
    """Greedy rows whose gate is shut everywhere emit what the per-token rule emits."""
    rows = sample(batch, seed=0)
    for i, request in enumerate(batch):
        if request.is_greedy:
            got, want = emitted_tokens(rows[i]), expected_greedy_tokens(request)
            assert got == want, f"request {i} ({describe(request)}): emitted {got}, the per-token rule emits {want}"


def check_fly_divergence_share(
    sample: RejectionSampler, case: DistributionCase, window: int, threshold: float, top_k: int
) -> None:
    """The share of emitted tokens FLy adds beyond the per-token rule (its divergence from lossless
    verification) is measured and must be FLy's exact expectation on this case (z at ALPHA), so both a
    lossier and a more timid change fail."""
    accepted = accepted_counts(sample_case(sample, case))
    mean, error = mean_and_error(accepted)
    standard = expectations.expected_accepted_standard(case)
    fly = expectations.expected_accepted_fly(case, window, threshold, top_k)
    share, expected_share = (mean - standard) / (1 + mean), (fly - standard) / (1 + fly)
    assert abs(mean - fly) <= Z * max(error, 1e-12), (
        f"{case.name}: FLy accepted {mean:.4f} drafts per request (standard error {error:.4f}): divergence share "
        f"{share:.4f} of emitted tokens, FLy's exact expectation {fly:.4f} drafts (share {expected_share:.4f}; "
        f"the per-token rule keeps {standard:.4f})"
    )
