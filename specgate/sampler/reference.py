"""Rejection sampling for speculative decoding: references written from the papers.

The algorithm (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
Algorithm 1; Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative
Sampling", Algorithm 2): a cheap drafter proposes k tokens x_1..x_k, each drawn from its
distribution q_i, and the target scores all k + 1 positions at once (p_1..p_{k+1}). Then, left to
right:

    accept x_i with probability min(1, p_i(x_i) / q_i(x_i));
    at the first rejection, emit a token from norm(max(0, p_i - q_i)) and stop;
    when all k drafts are accepted, emit a bonus token from p_{k+1}.

Every emitted token is then distributed exactly as the target alone would sample it, and draft i
is accepted with probability sum_v min(p_i(v), q_i(v)). Two limits of the same rule:

- greedy requests (temperature 0): p_i is the point mass on the target's argmax, so a draft is
  accepted exactly when it equals the argmax, and the correction is the argmax itself. Ties go to
  the lowest token id, as in `torch.argmax`.
- drafters without a distribution (n-gram, suffix): q_i is the point mass on x_i.

`ReferenceSampler` implements this in plain numpy, and next to it the other verification rules
vLLM's Model Runner V2 offers (`rejection_sample_method`): `BlockReferenceSampler` (Sun et al.
2024, block verification: lossless, never accepts fewer drafts on average),
`SyntheticReferenceSampler` (acceptance at fixed per-position rates, for benchmarking) and
`FlyReferenceSampler` (FLy: lossy on purpose, within its entropy gate). vLLM's samplers get the
same requests through specgate.sampler.v1 (V1) and specgate.sampler.v2 (Model Runner V2). All
return vLLM's output layout: an int array of shape [batch, 1 + max draft length], each row the
emitted tokens followed by `PLACEHOLDER_TOKEN_ID`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

# vLLM marks the unused tail of an output row with -1 (`rejection_sampler.PLACEHOLDER_TOKEN_ID`).
PLACEHOLDER_TOKEN_ID = -1


@dataclass(frozen=True, eq=False)
class SpecRequest:
    """One request in one verification step.

    `target_logits` has k + 1 rows: one per draft position and the bonus position last.
    `draft_probs` has k rows (the drafter's distributions) or is None for n-gram-style drafters.
    `temperature` 0 means greedy. `seed` gives the request its own random stream, like
    `SamplingParams(seed=...)`; without it the request shares the batch's stream. `position` is the
    sequence position of the step's first logits row (the last accepted token's), which moves on by
    the number of tokens emitted from one step to the next; vLLM's V2 sampler keys a seeded
    request's draws by (seed, position), and so do the references here (a fresh stream per step).
    None: one step alone (the V2 worker's default layout; the references' stream from the seed).
    """

    draft_token_ids: tuple[int, ...]
    target_logits: np.ndarray
    draft_probs: np.ndarray | None = None
    temperature: float = 0.0
    seed: int | None = None
    position: int | None = None

    def __post_init__(self) -> None:
        drafts = tuple(int(t) for t in self.draft_token_ids)
        logits = np.ascontiguousarray(self.target_logits, dtype=np.float32)
        k = len(drafts)
        if logits.ndim != 2 or logits.shape[0] != k + 1 or logits.shape[1] < 1:
            raise ValueError(f"target_logits must have shape [{k} + 1, vocab_size], got {logits.shape}")
        vocab_size = logits.shape[1]
        if any(not 0 <= t < vocab_size for t in drafts):
            raise ValueError(f"draft token ids {drafts} are outside [0, {vocab_size})")
        probs = self.draft_probs
        if probs is not None:
            probs = np.ascontiguousarray(probs, dtype=np.float32)
            if probs.shape != (k, vocab_size):
                raise ValueError(f"draft_probs must have shape {(k, vocab_size)}, got {probs.shape}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.position is not None and self.position < 0:
            raise ValueError(f"position must be >= 0, got {self.position}")
        object.__setattr__(self, "draft_token_ids", drafts)
        object.__setattr__(self, "target_logits", logits)
        object.__setattr__(self, "draft_probs", probs)

    @property
    def num_drafts(self) -> int:
        return len(self.draft_token_ids)

    @property
    def vocab_size(self) -> int:
        return self.target_logits.shape[1]

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0


class RejectionSampler(Protocol):
    """What the property tests check: requests in, vLLM-layout output rows out.

    `seed` fixes the batch's shared random stream, so one call is reproducible as a whole.
    """

    def __call__(self, requests: Sequence[SpecRequest], *, seed: int = 0) -> np.ndarray: ...


def emitted_tokens(row: np.ndarray) -> list[int]:
    """The tokens of one output row, without the placeholder tail."""
    tokens = [int(t) for t in row]
    while tokens and tokens[-1] == PLACEHOLDER_TOKEN_ID:
        tokens.pop()
    return tokens


def target_distribution(logits: np.ndarray, temperature: float) -> np.ndarray:
    """The distribution the target samples from at one position (float64, sums to 1).

    Greedy is the temperature -> 0 limit: the point mass on the first argmax. A sampled row with
    +inf entries gets the limit of softmax as those entries grow: uniform over them.
    """
    logits = np.asarray(logits, dtype=np.float32)
    if temperature == 0:
        probs = np.zeros(logits.shape, dtype=np.float64)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    # Divide in float32, as the engine does, so both see the same scaled logits.
    scaled = (logits / np.float32(temperature)).astype(np.float64)
    top = scaled.max()
    if top == -np.inf or np.isnan(top):
        raise ValueError("a sampled position needs at least one finite or +inf logit")
    probs = (scaled == np.inf).astype(np.float64) if top == np.inf else np.exp(scaled - top)
    return probs / probs.sum()


def request_stream(request: SpecRequest, shared: np.random.Generator) -> np.random.Generator:
    """Where a reference draws one request's randomness in one step: the batch's stream (unseeded), the
    request's seed, or (seed, position) when the step says where it is, so that consecutive steps of
    one seeded request draw fresh numbers, as lossless verification assumes."""
    if request.seed is None:
        return shared
    if request.position is None:
        return np.random.default_rng(request.seed)
    return np.random.default_rng([request.seed, request.position])


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token from `probs` by inverting the CDF; a zero-probability token is never returned."""
    cdf = np.cumsum(probs)
    token = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    # Rounding can put the draw at the very end of the CDF; fall back to the last possible token.
    return token if token < len(probs) else int(np.flatnonzero(probs)[-1])


class ReferenceSampler:
    """Leviathan et al. / Chen et al. rejection sampling, one request at a time.

    Each step of the algorithm is its own method so that a test can break exactly one of them
    (tests/property/mutants.py) and check that the properties notice.
    """

    def __call__(self, requests: Sequence[SpecRequest], *, seed: int = 0) -> np.ndarray:
        shared = np.random.default_rng(seed)
        width = 1 + max((r.num_drafts for r in requests), default=0)
        rows = np.full((len(requests), width), PLACEHOLDER_TOKEN_ID, dtype=np.int64)
        for i, request in enumerate(requests):
            tokens = self.sample_request(request, request_stream(request, shared))
            rows[i, : len(tokens)] = tokens
        return rows

    def sample_request(self, request: SpecRequest, rng: np.random.Generator) -> list[int]:
        p = self.target_distributions(request)
        q = self.draft_distributions(request)
        drafts = request.draft_token_ids
        k = len(drafts)
        n = self.count_accepted(drafts, p, q, rng)
        if n == k:
            return [*drafts, self.bonus(p[k], rng)]
        return [*drafts[:n], draw(self.residual(p[n], q[n]), rng)]

    def target_distributions(self, request: SpecRequest) -> np.ndarray:
        """p_1..p_{k+1}, one row per position."""
        return np.stack([target_distribution(row, request.temperature) for row in request.target_logits])

    def draft_distributions(self, request: SpecRequest) -> np.ndarray:
        """q_1..q_k; a drafter without a distribution proposed its token with certainty."""
        if request.draft_probs is not None:
            return request.draft_probs.astype(np.float64)
        q = np.zeros((request.num_drafts, request.vocab_size))
        q[np.arange(request.num_drafts), list(request.draft_token_ids)] = 1.0
        return q

    def count_accepted(
        self,
        drafts: Sequence[int],
        p: np.ndarray,
        q: np.ndarray,
        rng: np.random.Generator,
    ) -> int:
        """How many leading drafts are kept; x at i stays with probability min(1, p_i(x)/q_i(x))."""
        for i, x in enumerate(drafts):
            # u < p / q, written without dividing so q(x) = 0 needs no special case.
            if not rng.random() * q[i, x] < p[i, x]:
                return i
        return len(drafts)

    def residual(self, p: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Where the first rejected position's token comes from: norm(max(0, p - q)).

        This is the mass p has beyond what the draft already covered, which is exactly what is
        missing for the emitted token to follow p.
        """
        excess = np.maximum(p - q, 0.0)
        total = excess.sum()
        # No excess means p == q (p <= q everywhere, and both sum to 1): then no draft is ever
        # rejected and any answer is right. Returning p keeps the function total, since float
        # rounding can still get here.
        return excess / total if total > 0 else p

    def bonus(self, p_last: np.ndarray, rng: np.random.Generator) -> int:
        """Every draft was accepted: the target's own token at the position after them."""
        return draw(p_last, rng)


reference_rejection_sample = ReferenceSampler()


class BlockReferenceSampler(ReferenceSampler):
    """Block verification (Sun et al. 2024, "Block Verification Accelerates Speculative Decoding",
    Algorithm 2), for sampled requests; greedy ones keep the per-token rule, which block
    verification reduces to for point masses (as vLLM does: rejection_sampler_utils.py 0.33:599).

    With M_b / M_s the target / draft distributions after the prefix X_<=i (row i here), the running
    ratio p_0 = 1, p_i = min(1, p_{i-1} M_b(X_i) / M_s(X_i)) and, for i < k,
    h_i = R_i / (R_i + 1 - p_i) with R_i = sum_x max(p_i M_b(x | X_<=i) - M_s(x | X_<=i), 0),
    h_k = p_k. Independent u_i ~ U(0, 1); tau = max{i : u_i <= h_i} (0 if none). Emit X_<=tau,
    then the bonus token (tau = k) or one from norm(max(p_tau M_b(. | X_<=tau) - M_s(. | X_<=tau), 0)).
    """

    def sample_request(self, request: SpecRequest, rng: np.random.Generator) -> list[int]:
        if request.is_greedy:
            return super().sample_request(request, rng)
        p, q = self.target_distributions(request), self.draft_distributions(request)
        drafts = request.draft_token_ids
        k = len(drafts)
        ratio, h = self.block_thresholds(drafts, p, q)
        u = self.acceptance_uniforms(request, rng)
        tau = max((i for i in range(1, k + 1) if u[i - 1] <= h[i - 1]), default=0)
        if tau == k:
            return [*drafts, self.bonus(p[k], rng)]
        return [*drafts[:tau], draw(self.residual(ratio[tau] * p[tau], q[tau]), rng)]

    def acceptance_uniforms(self, request: SpecRequest, rng: np.random.Generator) -> np.ndarray:
        """u_1..u_k, independent and fresh for this step."""
        return rng.random(request.num_drafts)

    @staticmethod
    def block_thresholds(drafts: Sequence[int], p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(p_0..p_k, h_1..h_k) for one draft block."""
        k = len(drafts)
        ratio = np.ones(k + 1)
        for i, x in enumerate(drafts, start=1):
            ratio[i] = min(1.0, ratio[i - 1] * p[i - 1, x] / q[i - 1, x]) if q[i - 1, x] > 0 else 1.0
        h = np.empty(k)
        for i in range(1, k):
            mass = np.maximum(ratio[i] * p[i] - q[i], 0.0).sum()
            denominator = mass + 1.0 - ratio[i]
            h[i - 1] = mass / denominator if denominator > 0 else 1.0
        if k:
            h[k - 1] = ratio[k]
        return ratio, h


class SyntheticReferenceSampler(ReferenceSampler):
    """Synthetic acceptance (vLLM's `rejection_sample_method = "synthetic"`, a benchmarking mode): draft
    i is kept with probability c_i = r_i / r_{i-1} whatever p and q are, so the share of requests
    keeping at least i drafts is the unconditional rate r_i; the token after the last kept draft is
    chosen as the per-token rule would after a rejection (argmax, or the residual) or is the bonus.

    The rates are given (one per draft position of the batch's longest request), or resolved from a
    mean `length` of emitted tokens per step the way vLLM documents (config/speculative.py 0.33:579):
    every draft kept while the length allows, one at the fractional rest, none after.
    """

    def __init__(self, rates: Sequence[float] | None = None, *, length: float | None = None):
        if (rates is None) == (length is None):
            raise ValueError("give the unconditional rates or a mean length, not both")
        self.rates, self.length = rates, length

    def unconditional_rates(self, k: int) -> list[float]:
        if self.rates is not None:
            if len(self.rates) < k:
                raise ValueError(f"{len(self.rates)} synthetic rates for a batch with {k} drafts")
            return [float(r) for r in self.rates[:k]]
        return [min(1.0, max(0.0, self.length - 1 - i)) for i in range(k)]

    def __call__(self, requests: Sequence[SpecRequest], *, seed: int = 0) -> np.ndarray:
        rates = self.unconditional_rates(max((r.num_drafts for r in requests), default=0))
        # c_i = r_i / r_{i-1}, as vllm.v1.spec_decode.utils.unconditional_to_conditional_rates.
        self.conditional_rates = [r / prev if prev > 0 else 0.0 for r, prev in zip(rates, [1.0, *rates[:-1]])]
        return super().__call__(requests, seed=seed)

    def count_accepted(self, drafts, p, q, rng) -> int:
        for i in range(len(drafts)):
            if not rng.random() < self.conditional_rates[i]:
                return i
        return len(drafts)


def top_k_entropy(logits: np.ndarray, temperature: float, top_k: int) -> float:
    """FLy's gate statistic: -sum p log p over the target's top_k probabilities (not renormalised), with
    the logits the sampler sees (divided by the temperature for sampled requests). NaN (a closed gate)
    for a row with +inf logits, which has no softmax."""
    scaled = np.asarray(logits, dtype=np.float64) / (temperature if temperature > 0 else 1.0)
    if np.isposinf(scaled).any():
        return float("nan")
    top = scaled.max()
    log_probs = scaled - (top + np.log(np.exp(scaled - top).sum()))
    largest = np.sort(log_probs)[::-1][:top_k]
    largest = largest[np.isfinite(largest)]
    return float(-(np.exp(largest) * largest).sum())


class FlyReferenceSampler(ReferenceSampler):
    """FLy (entropy-gated deferred verification; vLLM's `rejection_sample_method = "fly"`): lossy on
    purpose. Drafts are verified by the per-token rule; a rejected draft x_i is accepted anyway when
    the gate is open (the target's top-k entropy at i is at least `threshold`, the target and the
    drafter both give x_i positive probability, and i + window < k) and the next `window` drafts are
    all accepted by the per-token rule. Otherwise verification stops at the first rejection not so
    deferred, exactly as the per-token rule would: greedy rows get the argmax there, sampled rows a
    token from the residual at that position."""

    def __init__(self, window: int, threshold: float = 0.3, top_k: int = 3):
        self.window, self.threshold, self.top_k = window, threshold, top_k

    def sample_request(self, request: SpecRequest, rng: np.random.Generator) -> list[int]:
        p, q = self.target_distributions(request), self.draft_distributions(request)
        drafts = request.draft_token_ids
        k = len(drafts)
        accepted, pending = 0, None
        for i, x in enumerate(drafts):
            native = bool(rng.random() * q[i, x] < p[i, x])
            if pending is not None:
                if not native:
                    break  # the deferred rejection stands
                if i - pending == self.window:
                    accepted, pending = i + 1, None
            elif native:
                accepted = i + 1
            elif self.gate_open(request, i, p, q):
                pending = i
            else:
                break
        if accepted == k:
            return [*drafts, self.bonus(p[k], rng)]
        return [*drafts[:accepted], draw(self.residual(p[accepted], q[accepted]), rng)]

    def gate_open(self, request: SpecRequest, i: int, p: np.ndarray, q: np.ndarray) -> bool:
        x = request.draft_token_ids[i]
        finite = request.target_logits[i, x] > -np.inf if request.is_greedy else p[i, x] > 0 and q[i, x] > 0
        entropy = top_k_entropy(request.target_logits[i], request.temperature, self.top_k)
        return bool(finite and i + self.window < request.num_drafts and entropy >= self.threshold)
