"""Model Runner V2's other verification rules keep what they promise: synthetic acceptance
(benchmarking: fixed rates, whatever p and q are) and FLy (lossy only within its entropy gate), on our
references and on V2's sampler (the interpreter per release; FLy exists from 0.33). Block verification
is lossless and runs with the per-token rule's guarantees in test_rejection_sampler.py.
"""

from __future__ import annotations

import pytest

from . import properties, rule_properties
from .samplers import (
    FLY_THRESHOLD,
    FLY_TOP_K,
    FLY_WINDOW,
    SYNTHETIC_LENGTH,
    ids,
    statistical,
    subjects,
    synthetic_rates,
)
from .strategies import FLY_HIGH_CASE, FLY_LOW_CASE, NGRAM_CASE, batches, holds_on_batches, with_peaked_targets

pytestmark = pytest.mark.correctness

SYNTHETIC = subjects("synthetic")
SYNTHETIC_BY_LENGTH = subjects("synthetic", options=(("synthetic_acceptance_length", SYNTHETIC_LENGTH),))
FLY = subjects("fly")
FLY_PARAMS = (FLY_WINDOW, FLY_THRESHOLD, FLY_TOP_K)
# Hypothesis batches have up to 6 drafts: synthetic rates given by a length resolve for any k.
ALL = SYNTHETIC_BY_LENGTH + FLY


@pytest.mark.parametrize("subject", ALL, ids=ids(ALL))
def test_output_is_one_to_k_plus_one_tokens_then_placeholders(built, subject):
    holds_on_batches(built(subject), batches(), properties.check_output_layout)


@pytest.mark.parametrize("subject", ALL, ids=ids(ALL))
def test_same_seed_gives_same_output(built, subject):
    """Synthetic acceptance draws for greedy requests too: only seeded ones must ignore the batch seed."""
    deterministic = subject.rule != "synthetic"
    holds_on_batches(
        built(subject),
        batches(),
        lambda sample, batch: properties.check_same_seed_gives_same_output(
            sample, batch, greedy_is_deterministic=deterministic
        ),
    )


@pytest.mark.parametrize("subject", ALL, ids=ids(ALL))
def test_requests_in_one_batch_do_not_affect_each_other(built, subject):
    holds_on_batches(built(subject), batches(seeded=True), properties.check_requests_do_not_affect_each_other)


@pytest.mark.parametrize("subject", statistical(SYNTHETIC))
def test_synthetic_acceptance_follows_the_configured_rates(built, subject):
    rule_properties.check_synthetic_acceptance_rates(built(subject), NGRAM_CASE, synthetic_rates(subject))


@pytest.mark.parametrize("subject", statistical(SYNTHETIC_BY_LENGTH))
def test_synthetic_acceptance_length_is_the_mean_emitted_per_step(built, subject):
    sampler = built(subject)
    rule_properties.check_synthetic_acceptance_length(sampler, NGRAM_CASE, SYNTHETIC_LENGTH)
    rule_properties.check_synthetic_acceptance_rates(
        sampler, NGRAM_CASE, synthetic_rates(subject, NGRAM_CASE.num_drafts)
    )


@pytest.mark.parametrize("subject", FLY, ids=ids(FLY))
def test_fly_greedy_rows_diverge_only_where_the_entropy_gate_allows(built, subject):
    holds_on_batches(
        built(subject),
        batches(greedy=True),
        lambda sample, batch: rule_properties.check_fly_greedy_diverges_only_where_gate_allows(
            sample, batch, *FLY_PARAMS
        ),
    )


@pytest.mark.parametrize("subject", FLY, ids=ids(FLY))
def test_fly_greedy_rows_with_low_entropy_are_the_per_token_rule(built, subject):
    holds_on_batches(
        built(subject),
        batches(greedy=True).map(with_peaked_targets),
        rule_properties.check_greedy_output_is_per_token_rule,
    )


@pytest.mark.parametrize("subject", statistical(FLY))
def test_fly_is_lossless_where_its_gate_is_shut(built, subject):
    properties.check_emitted_tokens_follow_target(built(subject), FLY_LOW_CASE)


@pytest.mark.parametrize("subject", statistical(FLY))
def test_fly_divergence_share_is_measured_and_bounded(built, subject):
    rule_properties.check_fly_divergence_share(built(subject), FLY_HIGH_CASE, *FLY_PARAMS)
