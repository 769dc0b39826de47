"""The edges scenario's requests: traffic at the shapes production sends and the plain gate does not, built
once from the profile's prompts and the baseline engine's greedy outputs, the same for every engine.

    build(prompts, greedy, eos, k, config, max_model_len, max_tokens, block_size, budget) -> EdgePlan

The classes (CLASSES), each sent as one batch so the counters it moved are its own:

    block         prompts of m x B - 1, m x B and m x B + 1 tokens for the KV block size B and each m of
                  `block_multiples` (vLLM PR #44151: prompt_len % block_size == 0 shifted the block mapping)
    context_edge  prompts of max_model_len - n tokens with max_tokens n and ignore_eos, for n = edge_tokens ..
                  edge_tokens + k: every request runs to max_model_len (finish reason 'length'), the edge at each
                  offset of a draft window (vLLM #53812, #44185); logprobs 1, compared too
    split         long prompts (max_model_len - max_tokens - 2 (k + 1) tokens: their outputs stay clear of the edge)
                  sent together, 2 x (budget // length) + 2 of them
                  against the scheduler's token budget (max_num_batched_tokens): all but the first budget // length
                  have their prefills split across steps (chunked prefill); on a method's engine the same prompts
                  go first one at a time (prefilled whole): the accepted tokens of the split batch are held to
                  theirs, the same requests' outputs too
    eos           prompts whose baseline greedy output ends at EOS, the same requests again; where no greedy
                  output does (the embedded zoo never emits EOS), stop_token_ids stand in for it: a token of the
                  output that first occurs at each position of a draft window (the same stop path in the
                  scheduler: vLLM #56101's trim of the tokens after it)

A long prompt is cut from the profile's prompts laid end to end, each case starting at a different place, so
no two share a first KV block (the prefix cache serves none of them from another).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CLASSES = ("block", "context_edge", "split", "eos")
WHOLE = "split_whole"  # the split class's prompts sent one at a time (prefilled whole): its acceptance reference
EOS_WINDOW_START = 8  # the first output position a stand-in stop token is placed at


@dataclass(frozen=True)
class EdgeCase:
    id: str
    klass: str
    token_ids: tuple[int, ...]
    params: Mapping[str, Any]  # SamplingParams keywords: max_tokens, ignore_eos, stop_token_ids, logprobs
    note: str = ""


@dataclass
class EdgePlan:
    cases: list[EdgeCase] = field(default_factory=list)
    block_size: int = 0
    budget: int | None = None  # the scheduler's tokens per step, where the engine says it
    notes: dict[str, str] = field(default_factory=dict)  # class -> what it stands for, or why it was not sent

    def of(self, klass: str) -> list[EdgeCase]:
        return [c for c in self.cases if c.klass == klass]


def _stream(prompts: Sequence) -> tuple[list[int], list[int]]:
    """The prompts' token ids end to end, and where each prompt starts in it."""
    stream, starts = [], []
    for p in prompts:
        starts.append(len(stream))
        stream.extend(p.token_ids)
    return stream, starts


def _cut(stream: list[int], starts: list[int], index: int, length: int) -> tuple[int, ...]:
    """`length` tokens of the stream, the index-th cut starting `index` tokens into prompt index mod N (its own
    first block), wrapping around the end."""
    start = starts[index % len(starts)] + index
    return tuple(stream[(start + i) % len(stream)] for i in range(length))


def build(
    prompts: Sequence,
    greedy: Mapping[str, Sequence[int]],
    eos: int | None,
    k: int,
    config,
    max_model_len: int,
    max_tokens: int,
    block_size: int,
    budget: int | None,
) -> EdgePlan:
    """The plan for `config` ([scenarios.edges]): `prompts` the profile's tokenized prompts (with .id, .token_ids),
    `greedy` the baseline engine's greedy tokens by prompt id, `k` the largest draft length of the run's methods."""
    plan = EdgePlan(block_size=block_size, budget=budget)
    stream, starts = _stream(prompts)
    if not stream:
        return plan
    cut = iter(range(10**6))
    for m in config.block_multiples:
        for length in (m * block_size - 1, m * block_size, m * block_size + 1):
            if length < 1 or length + max_tokens > max_model_len:
                plan.notes.setdefault("block", f"prompts past max_model_len {max_model_len} left out")
                continue
            ids = _cut(stream, starts, next(cut), length)
            plan.cases.append(EdgeCase(f"block@{length}", "block", ids, {"temperature": 0.0, "max_tokens": max_tokens}))
    for j in range(k + 1):
        n = config.edge_tokens + j
        ids = _cut(stream, starts, next(cut), max_model_len - n)
        params = {"temperature": 0.0, "max_tokens": n, "ignore_eos": True, "logprobs": 1}
        plan.cases.append(EdgeCase(f"context_edge@{n}", "context_edge", ids, params))
    # short of the edge by two draft windows: vLLM skips drafting for a whole batch once one of its requests is
    # within a draft window of max_model_len (gpu_model_runner._input_fits_in_drafter reads the batch's longest)
    long = max_model_len - max_tokens - 2 * (k + 1)
    if budget is None:
        plan.notes["split"] = "not sent: the engine does not say its token budget per step (max_num_batched_tokens)"
    else:
        count = 2 * (budget // long) + 2  # those past the first budget // long are split: two thirds of them here
        for i in range(count):
            ids = _cut(stream, starts, next(cut), long)
            plan.cases.append(EdgeCase(f"split@{i}", "split", ids, {"temperature": 0.0, "max_tokens": max_tokens}))
        plan.notes["split"] = f"{count} prompts of {long} tokens together against a budget of {budget} tokens a step"
    _eos_cases(plan, prompts, greedy, eos, k, config.eos_prompts, max_tokens)
    return plan


def _eos_cases(plan: EdgePlan, prompts, greedy, eos, k: int, wanted: int, max_tokens: int) -> None:
    if not wanted:
        return
    ended = [p for p in prompts if eos is not None and len(greedy.get(p.id, ())) > 1 and greedy[p.id][-1] == eos]
    if ended:
        for p in ended[:wanted]:
            params = {"temperature": 0.0, "max_tokens": max_tokens}
            plan.cases.append(EdgeCase(f"eos@{p.id}", "eos", tuple(p.token_ids), params))
        plan.notes["eos"] = f"{min(wanted, len(ended))} prompts whose greedy output ends at EOS"
        return
    chosen = 0
    for p in prompts:
        ids = list(greedy.get(p.id, ()))
        window = range(EOS_WINDOW_START, EOS_WINDOW_START + k + 1)
        if chosen >= wanted or len(ids) <= window[-1] + 1:
            continue
        added = 0
        for j in window:
            if ids[j] in ids[:j] or ids[j] == eos:
                continue  # it would stop earlier
            params = {"temperature": 0.0, "max_tokens": max_tokens, "stop_token_ids": [ids[j]]}
            plan.cases.append(EdgeCase(f"eos@{p.id}:{j}", "eos", tuple(p.token_ids), params))
            added += 1
        chosen += bool(added)
    plan.notes["eos"] = (
        f"no greedy output ends at EOS within max_tokens {max_tokens} (the models never emit it here): a stop token "
        f"stands in, at each offset of a draft window for {chosen} prompts"
    )
