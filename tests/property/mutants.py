"""Deliberately broken rejection samplers, to show that the properties would notice such a bug in vLLM
(test_mutants_are_caught.py): the reference with one known bug (each overrides exactly one step of
`ReferenceSampler`), and bugs written into a copy of Model Runner V2's Triton kernels
(`KernelMutant`, run on Triton's interpreter against the newest CUDA release's kernels: each patch's text
must occur there exactly once, test_mutants_are_caught.py checks it before any sampling).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specgate.sampler.reference import BlockReferenceSampler, ReferenceSampler, SpecRequest


class AcceptsOneTooMany(ReferenceSampler):
    """Off by one: the first rejected draft is kept as if accepted, and the correction (or the
    bonus, when that was the last draft) is drawn for the position after it."""

    def count_accepted(self, drafts: Sequence[int], p, q, rng: np.random.Generator) -> int:
        return min(super().count_accepted(drafts, p, q, rng) + 1, len(drafts))


class IgnoresDraftProbs(ReferenceSampler):
    """Treats every drafter as n-gram style: q is taken to be the point mass on the draft, so
    acceptance is p(x) instead of min(1, p(x) / q(x)). Emitted tokens still follow p (this is a
    valid sampler for a deterministic drafter); what it loses is acceptance."""

    def draft_distributions(self, request: SpecRequest) -> np.ndarray:
        point_masses = SpecRequest(
            request.draft_token_ids, request.target_logits, None, request.temperature, request.seed
        )
        return super().draft_distributions(point_masses)


class WrongResidual(ReferenceSampler):
    """After a rejection, draws the correction from p itself instead of norm(max(0, p - q)), so
    tokens the draft over-proposes are emitted too often."""

    def residual(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        return p


class BonusAfterRejection(ReferenceSampler):
    """Appends the bonus token even when a draft was rejected (the bonus is only earned when every
    draft is accepted)."""

    def sample_request(self, request: SpecRequest, rng: np.random.Generator) -> list[int]:
        tokens = super().sample_request(request, rng)
        if len(tokens) <= request.num_drafts:  # stopped at a rejection
            tokens.append(self.bonus(self.target_distributions(request)[-1], rng))
        return tokens


class ReusesUniformsAcrossSteps(BlockReferenceSampler):
    """Block verification whose acceptance uniform for the draft at position P + i is keyed by (seed,
    P + i) alone, as vLLM 0.32's `tl_rand32(seed, pos)`: the next step, which starts after the kept
    drafts, reads again the uniforms this step tested (and, since tau is a maximum, tested against
    every h_i). Each step alone is block verification (every single-step property holds); only a
    request's consecutive steps show it. Requests without a seed or position draw fresh uniforms."""

    def acceptance_uniforms(self, request: SpecRequest, rng: np.random.Generator) -> np.ndarray:
        if request.seed is None or request.position is None:
            return super().acceptance_uniforms(request, rng)
        # The trailing tag keeps these keys apart from the (seed, position) stream of the other draws.
        return np.array(
            [np.random.default_rng([request.seed, request.position + i, 7]).random() for i in range(request.num_drafts)]
        )


MUTANTS = (AcceptsOneTooMany, IgnoresDraftProbs, WrongResidual, BonusAfterRejection, ReusesUniformsAcrossSteps)


@dataclass(frozen=True)
class KernelMutant:
    """A bug written into a copy of Model Runner V2's kernels (rejection_sampler_utils.py): each `old`
    text, which must occur exactly once in the release's file, becomes `new`. The V2 worker loads the
    copy as its own module, so the real kernels stay untouched."""

    name: str
    doc: str
    rule: str  # the verification rule the bug is in
    where: str  # the kernel (rejection_sampler_utils.py), and what in it
    patches: tuple[tuple[str, str], ...]


V2_WRONG_RESIDUAL = KernelMutant(
    "WrongResidual",
    "draws the token after a rejection from p itself instead of norm(max(0, p - q)) (draft logits)",
    "standard",
    "_resample_kernel, the residual for draft distributions",
    (
        (
            "ratio < 1.0,\n            target_log_probs + tldevice.log1p(-ratio),",
            "ratio == ratio,\n            target_log_probs,",
        ),
    ),
)
V2_BONUS_AT_WRONG_INDEX = KernelMutant(
    "BonusAtWrongIndex",
    "writes the bonus token one slot early, over the last accepted draft",
    "standard",
    "_insert_resampled_kernel, the bonus token's slot",
    (
        (
            "sampled_ptr + req_idx * sampled_stride + num_sampled,\n        resampled,",
            "sampled_ptr + req_idx * sampled_stride + tl.maximum(num_sampled - is_bonus.to(tl.int32), 0),\n"
            "        resampled,",
        ),
    ),
)
V2_SEED_IGNORED = KernelMutant(
    "SeedIgnored",
    "draws every request's acceptance uniforms from seed 0 instead of the request's seed",
    "standard",
    "_rejection_kernel, the acceptance uniform's seed",
    (("u = tl_rand32(step_seed, pos, includes_zero=False)", "u = tl_rand32(0, pos, includes_zero=False)"),),
)
V2_BLOCK_AS_PER_TOKEN = KernelMutant(
    "BlockAsPerToken",
    "verifies block drafts with the per-token rule's acceptance (the residual stays block's)",
    "block",
    "rejection_sample's _rejection_kernel launch",
    (
        (
            "USE_BLOCK_VERIFICATION=use_block_verification,\n        FLY_WINDOW_SIZE=fly_window_size,",
            "USE_BLOCK_VERIFICATION=False,\n        FLY_WINDOW_SIZE=fly_window_size,",
        ),
    ),
)
V2_FLY_IGNORES_ENTROPY = KernelMutant(
    "FlyIgnoresEntropy",
    "defers rejections whatever the target's entropy (FLy's gate without its entropy test)",
    "fly",
    "_rejection_kernel, FLy's entropy gate",
    (("and entropy >= fly_entropy_threshold", "and entropy >= 0.0"),),
)
KERNEL_MUTANTS = (
    V2_WRONG_RESIDUAL,
    V2_BONUS_AT_WRONG_INDEX,
    V2_SEED_IGNORED,
    V2_BLOCK_AS_PER_TOKEN,
    V2_FLY_IGNORES_ENTROPY,
)
