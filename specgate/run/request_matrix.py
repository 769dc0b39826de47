"""The requests scenario's matrix: requests as users send them, built from the baseline engine's own greedy
output so that every stop, cap and ban really lands where it is meant to (inside a step that accepts
several tokens at once).

    build(prompts, greedy, decode, eos, k, max_tokens) -> list[RequestCase]
    sampled_plan(prompts, per_category, samples, tokens) -> list[SampledPrompt]

For each chosen prompt (the first of each category whose greedy output is long enough) and a window of
W = k + 1 consecutive token positions (k: the largest num_speculative_tokens of the profile's methods),
the classes are:

    plain        the request the gate already sends, now compared on text, finish reason and usage too
    stop         a stop string taken from the output that completes at each position of the window,
                 with and without include_stop_str_in_output, streamed and (without) final-only
    stop_token   stop_token_ids: a token of the output that first occurs at a position of the window
    eos          ignore_eos on, for prompts whose greedy output ends at EOS (off: the plain request)
    max_tokens   a cap at each position of the window (every remainder modulo k + 1)
    stop_cap     a stop at the window's first position with the cap at the same token and past it
    min_tokens   a stop the plain output meets, with min_tokens past it (and past EOS, where it stops)
    penalties    repetition, frequency and presence penalties, greedy: each must change the baseline's
                 own output, or it tests nothing
    processors   logit_bias and min_p (vLLM refuses both under speculation: reported as refused),
                 allowed_token_ids and bad_words (banned tokens must never appear)
    logprobs     logprobs 1 and 5 (streamed and final-only), prompt_logprobs 5
    seeded       a seeded request at T > 0 with n > 1, sent twice: the same seed gives the same outputs
                 (the first two prompts)

and the T > 0 distribution check's samples (sampled_plan): many seeded one-sample requests of the first
prompts of each category, a few tokens each, on the method and the baseline engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specgate.figures.completions import Decode, bad_word_tokens

CLASSES = (
    "plain",
    "stop",
    "stop_token",
    "eos",
    "max_tokens",
    "stop_cap",
    "min_tokens",
    "penalties",
    "processors",
    "logprobs",
    "seeded",
)
PENALTIES = {
    "repetition_penalty": 1.5,
    "frequency_penalty": 2.0,
    "presence_penalty": 2.0,
}  # the last two: their maximum
SEEDED = {"temperature": 0.8, "seed": 1234, "n": 3}
SEEDED_PROMPTS = 2  # prompts whose seeded request is sent twice (its n outputs each step, so few at a time)


@dataclass(frozen=True)
class RequestCase:
    id: str  # unique in the matrix, e.g. "stop+incl@code-01:17"
    klass: str  # one of CLASSES
    prompt_id: str
    params: Mapping[str, Any]  # SamplingParams keywords (max_tokens always set)
    stream: bool = True  # streamed chunk by chunk (DELTA), else one final output
    twin: str = ""  # the id of the same request sent the other way (stream vs final), compared with it
    repeat_of: str = ""  # the id of the same request sent before (the seeded class), compared with it
    note: str = ""  # what the case is meant to exercise, for messages
    # Requests that change the output on purpose (penalties, bans) must change the baseline's own
    # output against the plain request of their prompt: else they test nothing.
    must_change: bool = False

    @property
    def samples(self) -> int:
        """How many samples the request asks for (its `n`, 1 when unset)."""
        return int(self.params.get("n") or 1)


@dataclass(frozen=True)
class SampledPrompt:
    prompt_id: str
    category: str
    samples: int
    max_tokens: int
    temperature: float = 1.0


@dataclass
class Matrix:
    cases: list[RequestCase] = field(default_factory=list)
    window: int = 0  # k + 1
    prompts: list[str] = field(default_factory=list)
    not_exercised: dict[str, str] = field(default_factory=dict)  # class -> why it has no case here

    def by_id(self) -> dict[str, RequestCase]:
        return {c.id: c for c in self.cases}

    def add(self, case: RequestCase) -> None:
        self.cases.append(case)


def _token_ends(ids: Sequence[int], decode: Decode) -> list[int]:
    """The text offset where each token's text ends in decode(ids)."""
    return [len(decode(list(ids[: i + 1]))) for i in range(len(ids))]


def stop_string_at(ids: Sequence[int], j: int, decode: Decode, ends: list[int] | None = None) -> str | None:
    """A stop string from the output's own text that first completes in token j: the text of tokens
    j-1..j (more tokens leftwards while it occurs earlier), without leading whitespace; None if none is unique."""
    ends = ends or _token_ends(ids, decode)
    full = decode(list(ids))
    for back in range(1, 5):
        start = ends[j - back] if j - back >= 0 else 0
        candidate = full[start : ends[j]].lstrip()
        if not candidate.strip():
            continue
        at = full.find(candidate)
        if at + len(candidate) == ends[j] and (j == 0 or ends[j - 1] < ends[j]):
            return candidate
        if j - back < 0:
            break
    return None


def window_start(ids: Sequence[int], decode: Decode, width: int, ends: list[int]) -> int | None:
    """The first position p (past the first few tokens) where every position of p..p+width-1 has a unique
    stop string, leaving room after the window; None when the output has none."""
    for p in range(max(2, len(ids) // 4), len(ids) - width - 1):
        if all(stop_string_at(ids, j, decode, ends) is not None for j in range(p, p + width)):
            return p
    return None


def build(
    prompts,
    greedy: Mapping[str, Sequence[int]],
    decode: Decode,
    eos: int | None,
    k: int,
    max_tokens: int,
    per_category: int = 1,
    encode=None,
) -> Matrix:
    """The matrix for `prompts` (specgate.prompts.TokenizedPrompt) from the baseline's plain greedy
    outputs `greedy` (prompt id -> token ids); `encode` (text -> ids) finds a bad word vLLM bans as one
    of the output's own tokens (no bad_words case without it)."""
    width = k + 1
    matrix = Matrix(window=width)
    chosen: dict[str, int] = {}
    for p in prompts:
        ids = list(greedy.get(p.id, ()))
        if chosen.get(p.category, 0) >= per_category or len(ids) < 3 * width + 4:
            continue
        ends = _token_ends(ids, decode)
        start = window_start(ids, decode, width, ends)
        if start is None:
            continue
        chosen[p.category] = chosen.get(p.category, 0) + 1
        matrix.prompts.append(p.id)
        _cases_for(matrix, p.id, ids, decode, eos, start, width, max_tokens, ends, encode)
    if not matrix.prompts:
        why = f"no prompt's greedy output is long enough (at least {3 * width + 4} tokens; max_tokens {max_tokens})"
        matrix.not_exercised.update(dict.fromkeys(CLASSES, why))
        return matrix
    # EOS: any prompt of the profile whose greedy output ends there (the chosen ones rarely do)
    ended = [p.id for p in prompts if eos is not None and len(greedy.get(p.id, ())) > 1 and greedy[p.id][-1] == eos]
    for pid in ended[:per_category]:
        _eos_cases(matrix, pid, list(greedy[pid]), width, max_tokens)
    if not ended:
        matrix.not_exercised["eos"] = f"no prompt's greedy output ends at EOS within max_tokens {max_tokens}"
    return matrix


def _eos_cases(matrix, pid, ids, width, max_tokens) -> None:
    base = {"max_tokens": max_tokens, "temperature": 0.0}
    note = f"greedy ends at EOS after {len(ids)} tokens"
    matrix.add(RequestCase(f"eos@{pid}", "eos", pid, base, note=note))
    matrix.add(RequestCase(f"eos+ignore@{pid}", "eos", pid, {**base, "ignore_eos": True}, note=note))
    matrix.add(
        RequestCase(
            f"min_tokens+eos@{pid}",
            "min_tokens",
            pid,
            {**base, "min_tokens": min(max_tokens, len(ids) + width)},
            note=note,
        )
    )


def _cases_for(matrix, pid, ids, decode, eos, start, width, max_tokens, ends, encode) -> None:
    add = matrix.add
    window = range(start, start + width)
    base = {"max_tokens": max_tokens, "temperature": 0.0}
    add(RequestCase(f"plain@{pid}", "plain", pid, base))
    for j in window:
        stop = stop_string_at(ids, j, decode, ends)
        for include in (False, True):
            tag = "+incl" if include else ""
            params = {**base, "stop": [stop], "include_stop_str_in_output": include}
            cid = f"stop{tag}@{pid}:{j}"
            note = f"stop string {stop!r} completes in token {j}"
            if not include:
                add(RequestCase(cid, "stop", pid, params, twin=f"{cid}/final", note=note))
                add(RequestCase(f"{cid}/final", "stop", pid, params, stream=False, twin=cid, note=note))
            else:
                add(RequestCase(cid, "stop", pid, params, note=note))
        add(RequestCase(f"cap@{pid}:{j}", "max_tokens", pid, {**base, "max_tokens": j + 1}, note=f"cap at token {j}"))
    _stop_cases(add, pid, ids, decode, eos, start, width, base, ends)
    _processor_cases(matrix, pid, ids, decode, eos, start, width, base, max_tokens, encode)


def _stop_cases(add, pid, ids, decode, eos, start, width, base, ends) -> None:
    """A prompt's stop tokens, a stop string against the token cap around it, and min_tokens over it."""
    seen, tokens = set(), []
    for j, t in enumerate(ids):
        if t not in seen and j >= start and t != eos:
            tokens.append((j, t))
        seen.add(t)
        if len(tokens) == width:
            break
    for j, t in tokens:
        add(
            RequestCase(
                f"stop_token@{pid}:{j}",
                "stop_token",
                pid,
                {**base, "stop_token_ids": [t]},
                note=f"stop token {t} first emitted at token {j}",
            )
        )
    stop = stop_string_at(ids, start, decode, ends)
    for cap in range(start, start + width + 1):  # the cap a token before the stop, at it, and past it
        add(
            RequestCase(
                f"stop_cap@{pid}:{cap}",
                "stop_cap",
                pid,
                {**base, "stop": [stop], "max_tokens": cap + 1},
                note=f"stop string {stop!r} completes in token {start}, max_tokens {cap + 1}",
            )
        )
    # min_tokens: the window's stop is ignored up to min_tokens (vLLM searches stop strings only past it)
    add(
        RequestCase(
            f"min_tokens@{pid}",
            "min_tokens",
            pid,
            {**base, "stop": [stop], "min_tokens": start + width},
            note=f"stop string {stop!r} at token {start}, inside min_tokens {start + width}",
        )
    )


def _processor_cases(matrix, pid, ids, decode, eos, start, width, base, max_tokens, encode) -> None:
    """A prompt's penalties, logits processors, bad words, logprobs and seeded repeats."""
    add = matrix.add
    repeats = len(set(ids)) < len(ids)  # frequency and presence penalties act on tokens the output repeats
    for name, value in PENALTIES.items():
        if repeats or name == "repetition_penalty":  # which counts the prompt's tokens too
            add(RequestCase(f"{name}@{pid}", "penalties", pid, {**base, name: value}, must_change=True))
    banned = ids[start]
    add(
        RequestCase(
            f"logit_bias@{pid}",
            "processors",
            pid,
            {**base, "logit_bias": {banned: -100.0}},
            must_change=True,
            note=f"token {banned} (emitted at token {start}) biased away",
        )
    )
    add(
        RequestCase(
            f"min_p@{pid}",
            "processors",
            pid,
            {**base, "temperature": 0.8, "seed": 7, "min_p": 0.2},
            note="min_p at T 0.8 (seeded)",
        )
    )
    allowed = sorted(set(ids) - {banned} | ({eos} if eos is not None else set()))
    add(
        RequestCase(
            f"allowed_token_ids@{pid}",
            "processors",
            pid,
            {**base, "allowed_token_ids": allowed},
            must_change=True,
            note=f"the output's own tokens but {banned} (emitted at token {start})",
        )
    )
    for j in range(start, len(ids)) if encode is not None else ():
        word = decode([ids[j]]).strip()
        if word and [ids[j]] in bad_word_tokens([word], encode):  # a word vLLM bans as this very token
            add(
                RequestCase(
                    f"bad_words@{pid}",
                    "processors",
                    pid,
                    {**base, "bad_words": [word]},
                    must_change=True,
                    note=f"bad word {word!r} (token {ids[j]}, emitted at token {j})",
                )
            )
            break
    for n in (1, 5):
        cid = f"logprobs{n}@{pid}"
        add(RequestCase(cid, "logprobs", pid, {**base, "logprobs": n}, twin=f"{cid}/final"))
        add(RequestCase(f"{cid}/final", "logprobs", pid, {**base, "logprobs": n}, stream=False, twin=cid))
    add(RequestCase(f"prompt_logprobs@{pid}", "logprobs", pid, {**base, "prompt_logprobs": 5}, stream=False))
    if len(matrix.prompts) <= SEEDED_PROMPTS:  # n samples of a seeded request are sent few at a time: not every prompt
        seeded = {**base, **SEEDED, "max_tokens": min(max_tokens, 2 * width + 2)}
        add(RequestCase(f"seeded@{pid}", "seeded", pid, seeded))
        add(RequestCase(f"seeded@{pid}/again", "seeded", pid, seeded, repeat_of=f"seeded@{pid}"))


def sampled_plan(
    prompts, per_category: int, samples: int, tokens: int, temperature: float = 1.0
) -> list[SampledPrompt]:
    """The first `per_category` prompts of each category, `samples` seeded samples of `tokens` tokens each.
    (Not the shortest ones: on cpu-tiny's shortest prompts ngram's samples passed the two-sample test
    as shipped, vllm#55005 and all; on the first prompts every method's failed it.)"""
    out, seen = [], {}
    for p in prompts:
        if seen.get(p.category, 0) < per_category:
            seen[p.category] = seen.get(p.category, 0) + 1
            out.append(SampledPrompt(p.id, p.category, samples, tokens, temperature))
    return out
