"""The properties would notice if a rejection sampler broke: known bugs make them fail.

Two kinds of mutant (mutants.py): the reference sampler with one known bug, and Model Runner V2's
Triton kernels (the newest supported CUDA release's sources on Triton's interpreter) with one bug
written into a copy. For
every property expected to catch a mutant, the property runs against it and must fail. The unbroken
samplers run through the same properties and must pass: the reference here, V2 in
test_rejection_sampler.py / test_verification_rules.py (same properties, same cases), so a failure
is the bug's doing, not the harness's.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import Phase, given, settings

from specgate.sampler.reference import RejectionSampler, reference_rejection_sample

from . import expectations, properties, rule_properties
from .mutants import (
    KERNEL_MUTANTS,
    MUTANTS,
    V2_BLOCK_AS_PER_TOKEN,
    V2_BONUS_AT_WRONG_INDEX,
    V2_FLY_IGNORES_ENTROPY,
    V2_SEED_IGNORED,
    V2_WRONG_RESIDUAL,
    AcceptsOneTooMany,
    BonusAfterRejection,
    IgnoresDraftProbs,
    ReusesUniformsAcrossSteps,
    WrongResidual,
)
from .samplers import FLY_THRESHOLD, FLY_TOP_K, FLY_WINDOW, V2_RELEASES, Subject
from .strategies import (
    BLOCK_CASE,
    DISTRIBUTION_CASES,
    NGRAM_CASE,
    PROPERTY_SETTINGS,
    STEPS_CASE,
    batches,
    with_peaked_targets,
)

pytestmark = pytest.mark.correctness  # a failure here blocks --update-baselines

GREEDY = "greedy output is the longest matching prefix, then the argmax"
LAYOUT = "1..k+1 tokens, accepted drafts first, then placeholders"
DISTRIBUTION = "emitted tokens follow the target"
ACCEPTANCE = "first draft accepted with probability sum(min(p, q))"
BLOCK_MEAN = "block verification keeps its exact expected number of drafts"
FLY_GATE = "FLy's greedy rows diverge only where the entropy gate allows"
FLY_SHUT = "FLy is the per-token rule where its gate is shut"
ACROSS_STEPS = "a request's first tokens across steps follow the target"

V2_RELEASE = V2_RELEASES[-1]  # the kernels the V2 mutants are written into: the newest CUDA release's
V2_CASES = (BLOCK_CASE, NGRAM_CASE)


def run_on_batches(check: Callable, strategy=None) -> Callable[[RejectionSampler], None]:
    def run(sample) -> None:
        # A mutant only has to fail: shrinking to a minimal example would only cost time.
        examples = getattr(sample, "examples", PROPERTY_SETTINGS.max_examples)
        find_only = settings(PROPERTY_SETTINGS, max_examples=examples, phases=[Phase.explicit, Phase.generate])

        @find_only
        @given(batch=strategy if strategy is not None else batches())
        def property_holds(batch):
            check(sample, batch)

        property_holds()

    return run


def run_on_cases(check: Callable, cases) -> Callable[[RejectionSampler], None]:
    def run(sample) -> None:
        for case in cases:
            if getattr(sample, "interpreted", False) and case not in V2_CASES:
                continue  # V2 on the interpreter samples its own, smaller set of cases
            check(sample, case)

    return run


PROPERTIES = {
    GREEDY: run_on_batches(properties.check_greedy_output_is_longest_matching_prefix_then_target_argmax),
    LAYOUT: run_on_batches(properties.check_output_layout),
    # BLOCK_CASE first: on V2 every case costs interpreter time, and a mutant fails at its first.
    DISTRIBUTION: run_on_cases(properties.check_emitted_tokens_follow_target, (BLOCK_CASE, *DISTRIBUTION_CASES)),
    ACCEPTANCE: run_on_cases(
        properties.check_first_draft_acceptance_rate,
        [c for c in (*DISTRIBUTION_CASES, BLOCK_CASE) if c.num_drafts > 0],
    ),
    BLOCK_MEAN: run_on_cases(
        lambda sample, case: rule_properties.check_mean_accepted_is(
            sample, case, expectations.expected_accepted_block(case), "block"
        ),
        [BLOCK_CASE],
    ),
    FLY_GATE: run_on_batches(
        lambda sample, batch: rule_properties.check_fly_greedy_diverges_only_where_gate_allows(
            sample, batch, FLY_WINDOW, FLY_THRESHOLD, FLY_TOP_K
        ),
        batches(greedy=True),
    ),
    FLY_SHUT: run_on_batches(
        rule_properties.check_greedy_output_is_per_token_rule, batches(greedy=True).map(with_peaked_targets)
    ),
    ACROSS_STEPS: lambda sample: properties.check_tokens_across_steps_follow_target(sample, STEPS_CASE),
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
    # Every step alone is block verification: only a request's consecutive steps show it.
    (ReusesUniformsAcrossSteps, ACROSS_STEPS),
]
# V2's kernels, on the interpreter. Each mutant with the properties that catch it.
KERNEL_CAUGHT_BY = [
    (V2_WRONG_RESIDUAL, DISTRIBUTION),
    (V2_BONUS_AT_WRONG_INDEX, GREEDY),
    (V2_BONUS_AT_WRONG_INDEX, LAYOUT),
    # Each request's u is still uniform; only many requests at once show they share it.
    (V2_SEED_IGNORED, ACCEPTANCE),
    # Equal to the per-token rule's mean, so "block >= standard" cannot see it; block's own
    # expectation can.
    (V2_BLOCK_AS_PER_TOKEN, BLOCK_MEAN),
    (V2_FLY_IGNORES_ENTROPY, FLY_GATE),
    (V2_FLY_IGNORES_ENTROPY, FLY_SHUT),
]

# One instance each: the statistical checks memoize samples per sampler object.
SAMPLERS = {mutant: mutant() for mutant in MUTANTS}


def failure(property_name: str, sample: RejectionSampler) -> AssertionError | None:
    try:
        PROPERTIES[property_name](sample)
    except AssertionError as error:
        return error
    return None


@pytest.mark.parametrize(("mutant", "property_name"), CAUGHT_BY, ids=[f"{m.__name__}-{p}" for m, p in CAUGHT_BY])
def test_property_fails_on_mutant(mutant, property_name):
    error = failure(property_name, SAMPLERS[mutant])
    assert error is not None, f"'{property_name}' passed on {mutant.__name__}, a sampler that {mutant.__doc__}"


@pytest.mark.needs_vllm  # V2's kernels: torch and triton
@pytest.mark.parametrize(
    ("mutant", "property_name"), KERNEL_CAUGHT_BY, ids=[f"v2-{m.name}-{p}" for m, p in KERNEL_CAUGHT_BY]
)
def test_property_fails_on_v2_kernel_mutant(built, mutant, property_name):
    subject = built(Subject("v2", mutant.rule, V2_RELEASE, mutant=mutant))
    error = failure(property_name, subject)
    assert error is not None, (
        f"'{property_name}' passed on V2's kernels with a bug in {mutant.where}: the sampler {mutant.doc}"
    )
    print(f"{mutant.name} ({mutant.where}) caught by '{property_name}': {str(error).splitlines()[0]}")


@pytest.mark.parametrize("property_name", [GREEDY, LAYOUT, DISTRIBUTION, ACCEPTANCE])
def test_property_passes_on_the_unbroken_reference(property_name):
    error = failure(property_name, reference_rejection_sample)
    assert error is None, f"'{property_name}' fails on the reference itself: {error}"


@pytest.mark.parametrize("mutant", KERNEL_MUTANTS, ids=[m.name for m in KERNEL_MUTANTS])
def test_each_kernel_mutant_patches_text_the_release_has_once(mutant):
    """A mutant whose text the kernels no longer hold would fail to load, not be caught: said first, here."""
    from specgate.sampler import cuda_sources

    if reason := cuda_sources.missing(V2_RELEASE):
        pytest.skip(reason)
    path = (
        cuda_sources.tree(V2_RELEASE) / "vllm" / "v1" / "worker" / "gpu" / "spec_decode" / "rejection_sampler_utils.py"
    )
    text = path.read_text(encoding="utf-8")
    for old, _ in mutant.patches:
        assert text.count(old) == 1, (
            f"{mutant.name}: vLLM {V2_RELEASE}'s {path.name} holds {old!r} {text.count(old)} times"
        )


def test_every_mutant_is_caught_by_some_property():
    assert {mutant for mutant, _ in CAUGHT_BY} == set(MUTANTS)
    assert {mutant for mutant, _ in KERNEL_CAUGHT_BY} == set(KERNEL_MUTANTS)
