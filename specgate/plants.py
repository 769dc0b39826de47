"""Regressions written into a running vLLM worker on purpose, for the suite's own tests: each is a bug
of a kind users filed against vLLM's speculative decoding, placed where only one of the gate's checks
can see it, to show that check fails on it (a gate that cannot fail guards nothing).

    PLANTS[name] = (what it breaks, who sees it)
    install(worker, name) -> bool      runs inside the vLLM worker (collective_rpc), at boot; False
                                       when this model runner has nothing to plant it in

A profile's method takes one with `plant = "<name>"` (tests/system and the calibration profiles do;
no user profile should). V1's model runner only (vLLM's CPU engine, CUDA's fallback runner): the
internals each one patches are in vllm_compat.INTERNALS, checked on every supported CPU release.
"""

from __future__ import annotations

PLANTS = {
    "verify_emits_draft": (
        "verification emits the draft token at the first rejected position instead of the target's",
        "greedy equivalence (tie-aware must not forgive it as bf16 noise)",
    ),
    "accept_one_less_every_10th": (
        "every 10th verified request-step keeps one token less than it accepted (the token is emitted again by "
        "the next step): greedy output unchanged, mean acceptance length a few percent lower (vLLM #26191: -3.7 %)",
        "the acceptance gate",
    ),
    "resume_corrupts_last_token": (
        "a request resumed after preemption continues from a wrong last token (the worker's copy of its "
        "output is off by one in the last position)",
        "the preemption scenario: only preempted requests are resumed",
    ),
    "ngram_late_after_cached_prefix": (
        "the n-gram proposer drafts one position late for requests whose prompt the prefix cache served "
        "(an offset counted with the cached tokens)",
        "the prefix-cache soak: only replayed prompts have a cached prefix",
    ),
    "grammar_mask_ignores_drafts": (
        "the grammar bitmask is laid out as if no request had draft tokens (rows shift past the first "
        "speculating request)",
        "the structured scenario: only grammar-constrained requests get a bitmask",
    ),
}


def install(worker, name: str) -> bool:
    """Runs inside the vLLM worker: put plant `name` into this worker's model runner."""
    runner = worker.model_runner
    if not hasattr(runner, "_update_states") or not hasattr(runner, "rejection_sampler"):
        return False  # not V1's runner
    return {
        "verify_emits_draft": _verify_emits_draft,
        "accept_one_less_every_10th": _accept_one_less,
        "resume_corrupts_last_token": _resume_corrupts_last_token,
        "ngram_late_after_cached_prefix": _ngram_late_after_cached_prefix,
        "grammar_mask_ignores_drafts": _grammar_mask_ignores_drafts,
    }[name](runner)


def _verify_emits_draft(runner) -> bool:
    sampler = runner.rejection_sampler
    forward = sampler.forward

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        tokens = out.sampled_token_ids
        drafts = metadata.draft_token_ids.tolist()
        start = 0
        for row, n in enumerate(metadata.num_draft_tokens):
            emitted = int((tokens[row] >= 0).sum())
            if 0 < emitted <= n:  # a draft was rejected at position emitted - 1: emit the draft there
                tokens[row, emitted - 1] = drafts[start + emitted - 1]
            start += n
        return out

    sampler.forward = planted
    return True


def _accept_one_less(runner) -> bool:
    sampler = runner.rejection_sampler
    forward, seen = sampler.forward, [0]

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        tokens = out.sampled_token_ids
        for row in range(tokens.shape[0]):
            emitted = int((tokens[row] >= 0).sum())
            seen[0] += 1
            if (
                emitted >= 2 and seen[0] % 10 == 0
            ):  # its tokens are all the target's: one fewer leaves the text as it is
                tokens[row, emitted - 1] = -1
        return out

    sampler.forward = planted
    return True


def _resume_corrupts_last_token(runner) -> bool:
    update = runner._update_states

    def planted(scheduler_output):
        cached = scheduler_output.scheduled_cached_reqs
        for req_id in getattr(cached, "resumed_req_ids", ()) or ():
            state = runner.requests.get(req_id)
            if state is not None and state.output_token_ids:
                state.output_token_ids[-1] = (state.output_token_ids[-1] + 1) % runner.model_config.get_vocab_size()
        return update(scheduler_output)

    runner._update_states = planted
    return True


def _ngram_late_after_cached_prefix(runner) -> bool:
    drafter = getattr(runner, "drafter", None)
    if drafter is None or type(drafter).__name__ != "NgramProposer":
        return False
    update, propose, cached = runner._update_states, drafter.propose, set()

    def remember(scheduler_output):
        for new in scheduler_output.scheduled_new_reqs:
            if new.num_computed_tokens:  # part of its prompt came from the prefix cache
                cached.add(new.req_id)
        cached.difference_update(scheduler_output.finished_req_ids)
        return update(scheduler_output)

    def planted(*args, **kwargs):
        drafts = propose(*args, **kwargs)
        for index, req_id in enumerate(runner.input_batch.req_ids):
            if req_id in cached and index < len(drafts) and len(drafts[index]) > 1:
                drafts[index] = [*drafts[index][1:], drafts[index][-1]]  # one position late
        return drafts

    runner._update_states, drafter.propose = remember, planted
    return True


def _grammar_mask_ignores_drafts(runner) -> bool:
    import dataclasses

    from vllm.v1.worker import gpu_model_runner

    apply = gpu_model_runner.apply_grammar_bitmask

    def planted(scheduler_output, grammar_output, input_batch, logits):
        blind = dataclasses.replace(scheduler_output, scheduled_spec_decode_tokens={})
        return apply(blind, grammar_output, input_batch, logits)

    gpu_model_runner.apply_grammar_bitmask = planted
    return True
