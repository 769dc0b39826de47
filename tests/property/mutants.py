"""Deliberately broken rejection samplers: each is the reference with one known bug.

They exist to show that the properties would notice such a bug in vLLM
(test_mutants_are_caught.py). Each overrides exactly one step of `ReferenceSampler`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specgate.rejection import ReferenceSampler, SpecRequest


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


MUTANTS = (AcceptsOneTooMany, IgnoresDraftProbs, WrongResidual, BonusAfterRejection)
