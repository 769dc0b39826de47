"""The properties would notice if a rejection sampler broke: known bugs make them fail.

Each mutant (mutants.py) is the reference sampler with one known bug. For every property expected
to catch it, the property runs against the mutant and must fail. The unbroken reference runs
through the same harness and must pass, so a failure is the bug's doing, not the harness's.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import Phase, given, settings

from specgate.rejection import RejectionSampler, reference_rejection_sample

from . import properties
from .mutants import (
    MUTANTS,
    AcceptsOneTooMany,
    BonusAfterRejection,
    IgnoresDraftProbs,
    WrongResidual,
)
from .strategies import DISTRIBUTION_CASES, PROPERTY_SETTINGS, batches

pytestmark = pytest.mark.correctness  # a failure here blocks --update-baselines

GREEDY = "greedy output is the longest matching prefix, then the argmax"
LAYOUT = "1..k+1 tokens, accepted drafts first, then placeholders"
DISTRIBUTION = "emitted tokens follow the target"
ACCEPTANCE = "first draft accepted with probability sum(min(p, q))"

# A mutant only has to fail: shrinking to a minimal example would only cost time.
FIND_ONLY = settings(PROPERTY_SETTINGS, phases=[Phase.explicit, Phase.generate])


def run_on_batches(check: Callable) -> Callable[[RejectionSampler], None]:
    def run(sample: RejectionSampler) -> None:
        @FIND_ONLY
        @given(batch=batches())
        def property_holds(batch):
            check(sample, batch)

        property_holds()

    return run


def run_on_cases(check: Callable, cases) -> Callable[[RejectionSampler], None]:
    def run(sample: RejectionSampler) -> None:
        for case in cases:
            check(sample, case)

    return run


PROPERTIES = {
    GREEDY: run_on_batches(
        properties.check_greedy_output_is_longest_matching_prefix_then_target_argmax
    ),
    LAYOUT: run_on_batches(properties.check_output_layout),
    DISTRIBUTION: run_on_cases(properties.check_emitted_tokens_follow_target, DISTRIBUTION_CASES),
    ACCEPTANCE: run_on_cases(
        properties.check_first_draft_acceptance_rate,
        [c for c in DISTRIBUTION_CASES if c.num_drafts > 0],
    ),
}

CAUGHT_BY = [
    (AcceptsOneTooMany, GREEDY),
    (AcceptsOneTooMany, DISTRIBUTION),
    (AcceptsOneTooMany, ACCEPTANCE),
    # Emitted tokens still follow p (it is a valid sampler for a deterministic drafter): only
    # the acceptance rate gives it away.
    (IgnoresDraftProbs, ACCEPTANCE),
    # Greedy corrections are the argmax whatever the residual: only the distribution shows it.
    (WrongResidual, DISTRIBUTION),
    (BonusAfterRejection, GREEDY),
    (BonusAfterRejection, LAYOUT),
    (BonusAfterRejection, DISTRIBUTION),
    (BonusAfterRejection, ACCEPTANCE),
]

# One instance each: the statistical checks memoize samples per sampler object.
SAMPLERS = {mutant: mutant() for mutant in MUTANTS}


def failure(property_name: str, sample: RejectionSampler) -> AssertionError | None:
    try:
        PROPERTIES[property_name](sample)
    except AssertionError as error:
        return error
    return None


@pytest.mark.parametrize(
    ("mutant", "property_name"), CAUGHT_BY, ids=[f"{m.__name__}-{p}" for m, p in CAUGHT_BY]
)
def test_property_fails_on_mutant(mutant, property_name):
    error = failure(property_name, SAMPLERS[mutant])
    assert error is not None, (
        f"'{property_name}' passed on {mutant.__name__}, a sampler that {mutant.__doc__}")


@pytest.mark.parametrize("property_name", list(PROPERTIES))
def test_property_passes_on_the_unbroken_reference(property_name):
    error = failure(property_name, reference_rejection_sample)
    assert error is None, f"'{property_name}' fails on the reference itself: {error}"


def test_every_mutant_is_caught_by_some_property():
    assert {mutant for mutant, _ in CAUGHT_BY} == set(MUTANTS)
