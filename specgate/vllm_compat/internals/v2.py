"""Model Runner V2's rejection sampler, which specgate.sampler.v2 drives from CUDA sources (what the engine path
reads of V2's runner, its timers and drafter among it: v2_engine.py)."""

from __future__ import annotations

from specgate.vllm_compat.internals.base import CPU, CUDA, V2, V2_ONLY, V2_SAMPLER, Internal, checked_on

FLY = checked_on(CUDA, since="0.33.0")
# The draft logits reach the verification as a tensor until 0.33, as a DraftLogitsCache from 0.34 on.
DRAFT_LOGITS_TENSOR = checked_on(CPU, since="0.32.0") + checked_on(CUDA, before="0.34.0")
DRAFT_LOGITS_CACHE = checked_on(CUDA, since="0.34.0")

V2_RUNNER = (
    # Model Runner V2's sampler (specgate.sampler.v2_child builds what RejectionSampler.__call__ reads).
    Internal(
        f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample",
        "V2: the verification kernels' entry",
        checked=V2,
        optional=V2_ONLY,
        params=(
            "target_logits",
            "draft_sampled",
            "cu_num_logits",
            "pos",
            "idx_mapping",
            "expanded_idx_mapping",
            "expanded_local_pos",
            "temperature",
            "seed",
            "num_speculative_steps",
            "synthetic_conditional_rates",
            "use_fp64",
            "use_block_verification",
        ),
    ),
    Internal(
        f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample",
        "V2: the draft logits as a [max_num_reqs, num_steps, vocab] tensor",
        checked=DRAFT_LOGITS_TENSOR,
        optional=(
            "from 0.34 on rejection_sample takes a DraftLogitsCache (draft_logits_cache, spec_decode/draft_logits.py) "
            "where it took the tensor: specgate.vllm_compat.v2_draft_logits hands it what it takes"
        ),
        params=("draft_logits",),
    ),
    Internal(
        f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample",
        "V2: the draft logits in a DraftLogitsCache",
        checked=DRAFT_LOGITS_CACHE,
        optional="new in 0.34: before it rejection_sample takes the draft logits as a tensor (draft_logits)",
        params=("draft_logits_cache",),
    ),
    Internal(
        f"{V2_SAMPLER}.draft_logits:DraftLogitsCache",
        "V2: the draft logits' cache, replicated (sharded=False: one row per request state, as the speculator "
        "builds it without batch-sharded sampling); its .values hold the logits",
        checked=DRAFT_LOGITS_CACHE,
        optional="new in 0.34: before it rejection_sample takes the draft logits as a tensor (draft_logits)",
        params=("max_num_reqs", "num_steps", "vocab_size", "dtype", "fill", "device", "sharded"),
    ),
    Internal(
        f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample",
        "V2: FLy's parameters",
        checked=FLY,
        optional="FLy (rejection_sample_method = 'fly') is new in 0.33; the fly properties skip on older releases",
        params=("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"),
    ),
    Internal(
        f"{V2_SAMPLER}.rejection_sampler:RejectionSampler",
        "V2: the engine's verification step, built from a Sampler and the fields of SpeculativeConfig it reads",
        checked=V2,
        optional=V2_ONLY,
        params=("sampler", "spec_config", "device"),
    ),
    Internal(
        f"{V2_SAMPLER}.rejection_sampler:RejectionSampler.__call__",
        "V2: verify one batch",
        checked=V2,
        optional=V2_ONLY,
        params=("logits", "input_batch", "draft_logits"),
    ),
    Internal(
        "vllm.v1.worker.gpu.sample.sampler:Sampler",
        "V2: the sampler whose state the verification reads",
        checked=V2,
        optional=V2_ONLY,
        params=("vllm_config", "max_num_reqs", "vocab_size", "device", "req_states", "num_speculative_tokens"),
    ),
    Internal(
        "vllm.v1.worker.gpu.sample.sampler:Sampler.add_request",
        "V2: a request's SamplingParams (temperature, seed) into the sampler's state",
        checked=V2,
        optional=V2_ONLY,
        params=("req_idx", "sampling_params"),
    ),
    Internal(
        "vllm.v1.worker.gpu.sample.sampler:Sampler.apply_staged_writes",
        "V2: commit added requests",
        checked=V2,
        optional=V2_ONLY,
    ),
    Internal(
        "vllm.v1.worker.gpu.sample.sampler:Sampler.apply_sampling_params",
        "V2: temperature on the logits",
        checked=V2,
        optional=V2_ONLY,
        params=(
            "logits",
            "expanded_idx_mapping",
            "idx_mapping",
            "idx_mapping_np",
            "pos",
            "input_ids",
            "expanded_local_pos",
            "seq_lens_upper_bound_np",
        ),
    ),
    Internal(
        "vllm.v1.worker.gpu.states:RequestState",
        "V2: per-slot request state (prefill lengths)",
        checked=V2,
        optional=V2_ONLY,
        params=(
            "max_num_reqs",
            "max_model_len",
            "max_num_batched_tokens",
            "num_speculative_steps",
            "vocab_size",
            "device",
        ),
    ),
    Internal(
        "vllm.v1.worker.gpu.input_batch:InputBatch",
        "V2: a decode step's layout",
        checked=V2,
        optional=V2_ONLY,
        fields=(
            "num_reqs",
            "idx_mapping",
            "idx_mapping_np",
            "expanded_idx_mapping",
            "expanded_local_pos",
            "input_ids",
            "positions",
            "logits_indices",
            "cu_num_logits",
            "cu_num_logits_np",
            "seq_lens",
            "seq_lens_cpu_upper_bound",
        ),
    ),
    Internal(
        "vllm.v1.worker.gpu.buffer_utils:UvaBuffer",
        "V2 on a CPU: host memory stands in for UVA",
        checked=V2,
        optional=V2_ONLY,
        params=("size", "dtype"),
    ),
    Internal(
        "vllm.config.speculative:SpeculativeConfig._resolve_synthetic_acceptance_rates",
        "V2: synthetic rates from rates or a mean length, as vLLM validates them",
        checked=V2,
        optional=V2_ONLY,
        params=("n", "rates", "length"),
    ),
    Internal(
        "vllm.config.speculative:SpeculativeConfig",
        "V2: the verification rule's settings",
        checked=V2,
        optional=V2_ONLY,
        fields=(
            "rejection_sample_method",
            "synthetic_acceptance_rates",
            "synthetic_acceptance_length",
            "draft_sample_method",
        ),
    ),
    Internal(
        "vllm.config.speculative:SpeculativeConfig",
        "V2: FLy's settings",
        checked=FLY,
        optional="FLy is new in 0.33",
        fields=("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"),
    ),
)
