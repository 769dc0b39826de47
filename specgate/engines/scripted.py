"""The language model specgate.testing's fake engines answer requests with: no weights, the rules of vLLM's
SamplingParams (stops, caps, min_tokens, penalties, bans, logit bias, min_p, n, seeds, logprobs), and text from
the target's tokenizer, so the requests and edges scenarios judge a scripted engine as they judge vLLM.

    ScriptedModel(tokenizer, first)    first(prompt, i): the token greedy decoding emits at output position i
    ScriptedModel.decode_request(prompt, params, rng) -> Decoded
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from specgate.figures.completions import bad_word_tokens


@dataclass(frozen=True)
class Decoded:
    """One output as vLLM would give it (completions.Completion's fields less the streaming)."""

    token_ids: tuple[int, ...]
    text: str
    finish_reason: str  # 'stop' | 'length'
    stop_reason: int | str | None
    logprobs: tuple[dict[int, float], ...] | None  # with params' `logprobs`: the emitted token's and the top n
    prompt_logprobs: tuple[dict[int, float] | None, ...] | None


class ScriptedModel:
    """At output position i of prompt P three candidates: `first(P, i)` (greedy emits it) at logit 3.0, and two
    tokens P does not hold at 2.5 and 2.0, so a penalty, a ban or sampling reaches them as a real model's would;
    every other token far below. Logprobs are the unprocessed ones (vLLM's default)."""

    LOGITS, FLOOR = (3.0, 2.5, 2.0), -8.0

    def __init__(self, tokenizer, first: Callable[[Sequence[int], int], int]):
        self.tok, self.first, self.vocab = tokenizer, first, len(tokenizer)
        self.special, self.eos = set(tokenizer.all_special_ids), tokenizer.eos_token_id
        floor = sum(math.exp(self.raw(t, {})) for t in range(self.vocab))
        self.lse = math.log(floor + sum(math.exp(x) for x in self.LOGITS))

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def raw(self, t: int, cands: Mapping[int, float]) -> float:
        return cands[t] if t in cands else self.FLOOR - (1.0 if t == self.eos else t / self.vocab)

    def candidates(self, prompt: Sequence[int], i: int) -> dict[int, float]:
        held, out = set(prompt) | self.special, {self.first(prompt, i): self.LOGITS[0]}
        t = (31 * next(iter(out)) + 17 * i) % self.vocab
        while len(out) < len(self.LOGITS):
            if t not in held and t not in out:
                out[t] = self.LOGITS[len(out)]
            t = (t + 1) % self.vocab
        return out

    def top(self, cands: Mapping[int, float], n: int, chosen: int | None = None) -> dict[int, float]:
        """The n likeliest tokens' logprobs, and `chosen`'s."""
        ranked = sorted(cands, key=cands.get, reverse=True)[:n]
        rest = (t for t in range(self.vocab) if t not in cands and t != self.eos)
        ranked += itertools.islice(rest, max(0, n - len(ranked)))
        return {t: self.raw(t, cands) - self.lse for t in [*ranked, *([chosen] if chosen is not None else [])]}

    def pick(self, prompt, ids: list[int], params: Mapping, rng: random.Random, banned: set[int]) -> tuple[int, dict]:
        """The next token under `params` (SamplingParams keywords), and the candidates it was chosen from."""
        cands = self.candidates(prompt, len(ids))
        allowed = params.get("allowed_token_ids")
        pool = [t for t in cands if t not in banned and (allowed is None or t in allowed)]
        if not pool:  # every candidate masked: the likeliest token left
            order = sorted(allowed) if allowed is not None else range(self.vocab)
            pool = [next(t for t in order if t not in banned and t not in cands)]
        seen, rep = set(prompt) | set(ids), float(params.get("repetition_penalty") or 1.0)
        bias = {int(t): float(b) for t, b in (params.get("logit_bias") or {}).items()}
        frequency, presence = float(params.get("frequency_penalty") or 0), float(params.get("presence_penalty") or 0)
        scores = {}
        for t in pool:
            x = self.raw(t, cands) + bias.get(t, 0.0)
            x = (x / rep if x > 0 else x * rep) if t in seen else x
            scores[t] = x - frequency * ids.count(t) - presence * (t in ids)
        temperature = float(params.get("temperature", 1.0))
        if not temperature:
            return max(scores, key=scores.get), cands
        weights = {t: math.exp((x - max(scores.values())) / temperature) for t, x in scores.items()}
        keep = [t for t, w in weights.items() if w >= float(params.get("min_p") or 0) * max(weights.values())]
        return rng.choices(keep, [weights[t] for t in keep])[0], cands

    def decode_request(self, prompt: Sequence[int], params: Mapping, rng: random.Random) -> Decoded:
        """One output: tokens up to a stop token (stop_token_ids, EOS unless ignore_eos), a stop string (searched
        past the first min_tokens tokens' text) or max_tokens; stop tokens masked before min_tokens."""
        stop_ids = set(params.get("stop_token_ids") or ())
        ends = stop_ids | ({self.eos} if self.eos is not None and not params.get("ignore_eos") else set())
        stops = [params["stop"]] if isinstance(params.get("stop"), str) else list(params.get("stop") or ())
        bad = bad_word_tokens(params.get("bad_words") or (), self.encode)
        min_tokens, n_top = int(params.get("min_tokens") or 0), params.get("logprobs")
        include = bool(params.get("include_stop_str_in_output"))
        ids, tops, finish, reason, text = [], [], "length", None, None
        for i in range(int(params.get("max_tokens") or 16)):
            banned = {seq[-1] for seq in bad if ids[len(ids) - len(seq) + 1 :] == seq[:-1]}
            t, cands = self.pick(prompt, ids, params, rng, banned | (ends if i < min_tokens else set()))
            ids.append(t)
            if n_top is not None:
                tops.append(self.top(cands, int(n_top), t))
            if t in ends:
                finish, reason = "stop", t if t in stop_ids else None
                break
            full = self.decode(ids)
            start = len(self.decode(ids[:min_tokens])) if min_tokens else 0
            if hit := min(((full.find(s, start), s) for s in stops if full.find(s, start) >= 0), default=None):
                finish, reason = "stop", hit[1]
                text = full[: hit[0] + (len(hit[1]) if include else 0)]
                break
        if text is None:
            text = self.decode(ids[:-1] if finish == "stop" and not include else ids)
        prompt_logprobs = None
        if params.get("prompt_logprobs") is not None:
            prompt_logprobs = (None, *({t: -1.0} for t in list(prompt)[1:]))
        logprobs = tuple(tops) if n_top is not None else None
        return Decoded(tuple(ids), text, finish, reason, logprobs, prompt_logprobs)
