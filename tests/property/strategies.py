"""Inputs for the rejection-sampler properties.

Hypothesis strategies build whole verification batches: several requests sharing one vocabulary,
each with its own draft length (0 included), greedy and sampled requests mixed, with or without
draft distributions (vLLM takes them for the whole batch or not at all). Target rows come in
shapes that stress a sampler: spread, flat (every token tied), very peaked, partly -inf (masked
tokens) and with +inf entries (greedy requests; sampled ones only where a test asks, since a
sampled row with +inf has no softmax). Bulk numbers come from a numpy generator seeded by
Hypothesis, so examples stay small while Hypothesis still chooses every structural decision.

The statistical properties use fixed cases instead (`DISTRIBUTION_CASES`): a few hand-picked
shapes with p and q drawn once from fixed seeds, so their outcome is deterministic. The verification
rules get cases written out by hand (`BLOCK_CASE`, `FLY_*_CASE`), each chosen for what it separates
(expectations.py gives their exact expected acceptance). `STEPS_CASE` is one request decoded over
consecutive verification steps (properties.decode_across_steps).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specgate.sampler.reference import SpecRequest, target_distribution

# Hypothesis examples per property: (the references and V1, V2 on Triton's interpreter). "ci" is the
# documented budget (docs/rejection-sampler.md, "Budgets and power") and runs where $CI is set (GitHub
# Actions, .ci/run); "dev", everywhere else, is a quick local check, weaker evidence than CI's.
# $SPECGATE_HYPOTHESIS_PROFILE=ci|dev chooses. tests/property/conftest.py registers both with Hypothesis.
BUDGETS = {"ci": (60, 8), "dev": (15, 4)}
PROFILE = os.environ.get("SPECGATE_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
if PROFILE not in BUDGETS:
    raise ValueError(f"SPECGATE_HYPOTHESIS_PROFILE={PROFILE!r}: expected one of {', '.join(BUDGETS)}")

# deadline=None: the first vLLM call pays for kernel set-up. derandomize: the same examples every
# run, so a green suite stays green. database=None: nothing written into the checkout.
PROPERTY_SETTINGS = settings(
    max_examples=BUDGETS[PROFILE][0],
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MAX_DRAFTS = 6
MAX_BATCH = 6
ROW_SHAPES = ("spread", "flat", "peaked", "masked", "plus_inf")

# Small vocabularies make matches and ties common; the larger ones cross power-of-two and
# kernel block boundaries (the Triton recovery kernel works in blocks of 8192).
vocab_sizes = st.one_of(st.integers(1, 12), st.sampled_from([255, 256, 257, 1000, 8193]))


def property_settings(examples: int) -> settings:
    return settings(PROPERTY_SETTINGS, max_examples=examples)


def holds_on_batches(sample, strategy, check) -> None:
    """`check(sample, batch)` on Hypothesis batches: `sample.examples` of them (samplers.Subject), or
    PROPERTY_SETTINGS' number for a plain sampler."""

    @property_settings(getattr(sample, "examples", PROPERTY_SETTINGS.max_examples))
    @given(batch=strategy)
    def property_holds(batch):
        check(sample, batch)

    property_holds()


def target_row(rng: np.random.Generator, shape: str, vocab_size: int, top: int) -> np.ndarray:
    """One target logits row of the given shape; its largest entry is at `top` unless it is flat."""
    row = rng.normal(0.0, 3.0, vocab_size)
    if shape == "flat":
        return np.full(vocab_size, rng.choice([0.0, -7.5, 12.0]), dtype=np.float32)
    row[top] = row.max() + (40.0 if shape == "peaked" else 0.5)
    if shape == "masked":
        masked = rng.random(vocab_size) < rng.uniform(0.2, 0.9)
        masked[top] = False
        row[masked] = -np.inf
    if shape == "plus_inf":
        row[rng.random(vocab_size) < 0.2] = np.inf
        row[rng.random(vocab_size) < 0.2] = -np.inf
        row[top] = np.inf
    return row.astype(np.float32)


@st.composite
def spec_requests(
    draw,
    vocab_size: int,
    *,
    with_draft_probs: bool,
    greedy: bool | None = None,
    plus_inf_in_sampled: bool = False,
) -> SpecRequest:
    is_greedy = draw(st.booleans()) if greedy is None else greedy
    # A sampled row with +inf has no softmax (vLLM computes NaN probabilities), so sampled
    # requests get +inf only where a test asks for it (robustness, not distribution).
    shapes = ROW_SHAPES if is_greedy or plus_inf_in_sampled else ROW_SHAPES[:-1]
    k = draw(st.integers(0, MAX_DRAFTS))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # The last id gets its own chance: off-by-one errors at the vocabulary's end are the
    # classic way to emit an id the embedding table does not have.
    tops = [draw(st.one_of(st.just(vocab_size - 1), st.integers(0, vocab_size - 1))) for _ in range(k + 1)]
    logits = np.stack([target_row(rng, draw(st.sampled_from(shapes)), vocab_size, top) for top in tops])
    argmax = logits.argmax(axis=1)
    # Half the drafts copy the target's argmax, so long accepted prefixes are common.
    drafts = tuple(int(argmax[i]) if draw(st.booleans()) else draw(st.integers(0, vocab_size - 1)) for i in range(k))
    draft_probs = None
    if with_draft_probs:
        # Finite draft logits keep q > 0 everywhere: a real drafter's q covers its own draft.
        spread = rng.choice([0.0, 1.0, 4.0])
        raw = np.clip(rng.normal(0.0, spread, (k, vocab_size)), -20, 20)
        draft_probs = (np.exp(raw) / np.exp(raw).sum(axis=1, keepdims=True)).astype(np.float32)
    temperature = 0.0 if is_greedy else draw(st.sampled_from([0.1, 0.5, 1.0, 1.7]))
    seed = draw(st.none() | st.integers(0, 2**31 - 1))
    return SpecRequest(drafts, logits, draft_probs, temperature, seed)


@st.composite
def batches(
    draw,
    *,
    greedy: bool | None = None,
    seeded: bool = False,
    plus_inf_in_sampled: bool = False,
) -> list[SpecRequest]:
    """One verification step: 1..MAX_BATCH requests over one vocabulary.

    `greedy` forces every request greedy (True) or sampled (False); None mixes them.
    `seeded` gives every request its own seed. `plus_inf_in_sampled` lets sampled requests
    have +inf logits too (greedy ones always may).
    """
    vocab_size = draw(vocab_sizes)
    with_draft_probs = draw(st.booleans())
    requests = draw(
        st.lists(
            spec_requests(
                vocab_size, with_draft_probs=with_draft_probs, greedy=greedy, plus_inf_in_sampled=plus_inf_in_sampled
            ),
            min_size=1,
            max_size=MAX_BATCH,
        )
    )
    if seeded:
        requests = [
            SpecRequest(
                r.draft_token_ids,
                r.target_logits,
                r.draft_probs,
                r.temperature,
                draw(st.integers(0, 2**31 - 1)) if r.seed is None else r.seed,
            )
            for r in requests
        ]
    return requests


def with_certain_drafts(requests: list[SpecRequest]) -> list[SpecRequest]:
    """The same batch with every draft made certain for the target.

    Greedy requests draft the target's argmax. For sampled requests the target keeps only the
    draft (every other logit -inf), which is the argmax with probability 1. The bonus row is left
    alone.
    """
    certain = []
    for r in requests:
        logits = r.target_logits.copy()
        if r.is_greedy:
            drafts = tuple(int(t) for t in logits[:-1].argmax(axis=1))
        else:
            drafts = r.draft_token_ids
            for i, x in enumerate(drafts):
                logits[i, :] = -np.inf
                logits[i, x] = 0.0
        certain.append(SpecRequest(drafts, logits, r.draft_probs, r.temperature, r.seed))
    return certain


@dataclass(frozen=True, eq=False)
class DistributionCase:
    """One target / drafter pair for the statistical properties.

    With `draft_probs`, each request draws its own drafts from q (the guarantee holds on average
    over the drafts, not for one fixed draft). Without them (n-gram style) the drafts are fixed,
    and the guarantee holds for each.
    """

    name: str
    target_logits: np.ndarray  # [k + 1, V]
    draft_probs: np.ndarray | None  # [k, V]
    fixed_drafts: tuple[int, ...]
    temperature: float
    # Requests V2 on Triton's interpreter draws for this case, where a case needs more than
    # properties.V2_NUM_SAMPLES for what it separates (0: that default).
    interpreter_samples: int = 0

    @property
    def num_drafts(self) -> int:
        return self.target_logits.shape[0] - 1

    @property
    def vocab_size(self) -> int:
        return self.target_logits.shape[1]

    def target_probs(self) -> np.ndarray:
        return np.stack([target_distribution(r, self.temperature) for r in self.target_logits])

    def first_draft_acceptance(self) -> float:
        """P(first draft accepted) = sum_v min(p_1(v), q_1(v)); q_1 is a point mass for n-gram."""
        p = self.target_probs()[0]
        if self.draft_probs is None:
            return float(p[self.fixed_drafts[0]])
        return float(np.minimum(p, self.draft_probs[0].astype(np.float64)).sum())

    def requests(self, n: int, seed: int) -> list[SpecRequest]:
        if self.draft_probs is None or self.num_drafts == 0:
            return [SpecRequest(self.fixed_drafts, self.target_logits, None, self.temperature)] * n
        rng = np.random.default_rng(seed)
        q = self.draft_probs.astype(np.float64)
        drafts = np.stack([rng.choice(self.vocab_size, size=n, p=row / row.sum()) for row in q], axis=1).reshape(
            n, self.num_drafts
        )
        return [SpecRequest(tuple(d), self.target_logits, self.draft_probs, self.temperature) for d in drafts]


def _distribution_cases() -> tuple[DistributionCase, ...]:
    rng = np.random.default_rng(20230518)  # fixed: the cases are data, not a random draw per run

    def probs(alpha: float, shape: tuple[int, int]) -> np.ndarray:
        return rng.dirichlet(np.full(shape[1], alpha), size=shape[0]).astype(np.float32)

    masked = np.log(probs(1.0, (3, 7)))
    masked[:, [1, 4]] = -np.inf  # tokens the target may never emit
    return (
        DistributionCase(
            "draft distribution, vocab 6, k 1",
            np.log(probs(1.0, (2, 6))),
            probs(1.0, (1, 6)),
            (),
            1.0,
        ),
        DistributionCase(
            "draft distribution, masked tokens, temperature 0.7, k 2",
            masked,
            probs(0.5, (2, 7)),
            (),
            0.7,
        ),
        DistributionCase(
            "n-gram draft, vocab 5, k 2",
            np.log(probs(1.0, (3, 5))),
            None,
            (0, 1),
            1.0,
        ),
        DistributionCase(
            "no drafts: the bonus token alone, vocab 8",
            np.log(probs(1.0, (1, 8))),
            probs(1.0, (0, 8)),
            (),
            1.3,
        ),
    )


DISTRIBUTION_CASES = _distribution_cases()


def _case(name: str, probs, draft_probs, temperature: float, drafts=(), **extra) -> DistributionCase:
    """A case from the target's probabilities (0 = masked) at `temperature`: logits T * log p."""
    p = np.asarray(probs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logits = (np.log(p) * temperature).astype(np.float32)
    q = None if draft_probs is None else np.asarray(draft_probs, dtype=np.float32)
    return DistributionCase(name, logits, q, tuple(drafts), temperature, **extra)


# Block verification gains over the per-token rule only when the drafter has a distribution (with
# one-hot drafts the two expect the same, expectations.py). Here block keeps 0.368 drafts per step,
# the per-token rule 0.240 (standard deviation 0.51): 6 standard errors at the 600 requests V2 draws
# here (test_block_case_separates_block_from_the_per_token_rule). The drafter mostly proposes
# token 2, which the target rarely wants, so the residual matters too; a masked token and
# temperature 0.7 go through vLLM's own path.
BLOCK_CASE = _case(
    "draft distribution, masked token, temperature 0.7, vocab 3, k 2",
    [[0.81, 0.03, 0.16], [0.02, 0.98, 0.0], [0.03, 0.15, 0.82]],
    [[0.02, 0.02, 0.96], [0.01, 0.19, 0.80]],
    0.7,
    interpreter_samples=600,
)
NGRAM_CASE = next(c for c in DISTRIBUTION_CASES if c.draft_probs is None)
BONUS_CASE = next(c for c in DISTRIBUTION_CASES if c.num_drafts == 0)
# FLy's gate opens where the target's top-3 entropy is >= 0.3 nats. Low: 0.16 and 0.21 at the two
# draft positions (gate shut, so FLy must be lossless). High: 1.05 at position 0, so a rejected
# draft there stands when draft 1 is accepted (window 1): 1.72 accepted drafts against 1.08.
FLY_LOW_CASE = _case(
    "fly: target top-3 entropy below the gate, vocab 4, k 2",
    [[0.96, 0.02, 0.01, 0.01], [0.02, 0.95, 0.02, 0.01], [0.25, 0.25, 0.25, 0.25]],
    [[0.5, 0.3, 0.1, 0.1], [0.3, 0.4, 0.2, 0.1]],
    1.0,
)
FLY_HIGH_CASE = _case(
    "fly: target top-3 entropy above the gate, vocab 4, k 2",
    [[0.4, 0.3, 0.2, 0.1], [0.1, 0.5, 0.3, 0.1], [0.25, 0.25, 0.25, 0.25]],
    [[0.1, 0.2, 0.3, 0.4], [0.2, 0.4, 0.2, 0.2]],
    1.0,
)


@dataclass(frozen=True, eq=False)
class StepsCase:
    """One request decoded over consecutive verification steps. The target samples from `target_probs`
    at every position and the drafter proposes `fixed_drafts` (n-gram style), whatever the context: a
    lossless sampler then emits i.i.d. tokens from the target, so the first `num_tokens` of them have
    the product law (`target_joint`, over the V^N sequences in row-major order)."""

    name: str
    target_probs: tuple[float, ...]
    fixed_drafts: tuple[int, ...]
    temperature: float = 1.0
    num_tokens: int = 3
    first_position: int = 19  # the first step's row 0, after a 16-token prompt and 3 tokens (sampler/v2_child.py)
    interpreter_samples: int = 0  # requests V2 on Triton's interpreter decodes (0: properties.V2_NUM_SAMPLES)

    @property
    def num_drafts(self) -> int:
        return len(self.fixed_drafts)

    @property
    def vocab_size(self) -> int:
        return len(self.target_probs)

    def target_joint(self) -> np.ndarray:
        p = np.asarray(self.target_probs, dtype=np.float64)
        joint = np.ones(1)
        for _ in range(self.num_tokens):
            joint = np.outer(joint, p).ravel()
        return joint

    def step(self, seed: int, position: int) -> SpecRequest:
        """The request's verification step starting at `position` (its logits: T log p on every row)."""
        row = np.log(np.asarray(self.target_probs, dtype=np.float64)) * self.temperature
        logits = np.tile(row.astype(np.float32), (self.num_drafts + 1, 1))
        return SpecRequest(self.fixed_drafts, logits, None, self.temperature, seed, position)


# Block verification across steps where reusing a step's acceptance uniforms in the next step matters
# most. With an n-gram drafter proposing token 0 twice and p(0) = a, block's thresholds are
# h_1 = a / (1 + a) for the first draft and h_2 = a^2 for the last (expectations.py); at a = 0.62
# h_2 = 0.3844 >= h_1 = 0.3827, so a uniform that failed the last draft's test fails the first's too.
# A sampler that keys the uniforms by absolute position (vLLM 0.32) verifies the first draft of the step
# after one that kept nothing with the uniform that failed the last draft's test there: that draft is
# never kept on it (only a fresh u_2 <= h_2 keeps drafts), the sequence (1, 0, 1) cannot occur, and the
# first 3 tokens are off by Cohen's w = 0.48 (expectations.first_tokens_across_steps).
STEPS_CASE = StepsCase("n-gram drafts (0, 0), p(0) = 0.62, vocab 2, first 3 tokens", (0.62, 0.38), (0, 0))


def with_peaked_targets(requests: list[SpecRequest]) -> list[SpecRequest]:
    """The same batch with every target row peaked (the argmax 40 nats above the rest, no +inf), so
    FLy's entropy gate is shut at every position."""
    peaked = []
    for r in requests:
        logits = np.where(np.isposinf(r.target_logits), 0.0, r.target_logits).astype(np.float32)
        finite = np.where(np.isfinite(logits), logits, -np.inf)
        top = finite.argmax(axis=1)
        logits[np.arange(len(logits)), top] = np.nanmax(np.where(np.isfinite(finite), finite, np.nan), axis=1) + 40.0
        peaked.append(SpecRequest(r.draft_token_ids, logits, r.draft_probs, r.temperature, r.seed))
    return peaked
