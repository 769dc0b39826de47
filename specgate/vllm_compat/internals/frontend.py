"""The engine's front end, its requests and outputs, its metrics and the scheduler's step: every release has them."""

from __future__ import annotations

from specgate.vllm_compat.internals.base import WITH_V1, Internal, checked_on

FRONTEND = (
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
    # the scheduler's step as the model runner receives it (what the plants read)
    Internal(
        "vllm.v1.core.sched.output:NewRequestData",
        "plants: a new request's cached prefix",
        fields=("req_id", "num_computed_tokens"),
    ),
    Internal(
        "vllm.v1.core.sched.output:CachedRequestData",
        "V1's plants (in GPUModelRunner._update_states): requests resumed after preemption",
        fields=("resumed_req_ids",),
        checked=WITH_V1,
        model_runner="v1",
    ),
    Internal(
        "vllm.v1.core.sched.output:SchedulerOutput",
        "plants: a step's new, running and speculating requests",
        fields=("scheduled_new_reqs", "scheduled_cached_reqs", "scheduled_spec_decode_tokens", "finished_req_ids"),
    ),
    Internal("vllm.config.speculative:SpeculativeMethod", "the speculative methods this vLLM offers (a Literal)"),
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
    # specgate.engines.plants' front-end share (the requests scenario's plants, in this process)
    Internal(
        "vllm.sampling_params:SamplingParams._validate_spec_decode",
        "plants: the refusal of logit_bias under speculation",
    ),
    Internal("vllm.v1.engine.output_processor:OutputProcessor.add_request", "plants: one request's output state"),
    Internal(
        "vllm.v1.engine.output_processor:OutputProcessor._trim_surplus_tokens",
        "plants: the step's tokens past a stop string dropped",
        checked=checked_on(since="0.32.0"),
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
