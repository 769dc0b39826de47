"""What one request gave, as a user of the engine sees it, and whether it agrees with itself.

    Completion          one output of a request (one of its n): token ids, text, finish and stop reason,
                        logprobs, usage, how many tokens each streamed chunk brought
    Reply               a request's outputs, or vLLM's words when it refused the request
    inconsistencies()   what an output says about itself that cannot all be true: the text is not the
                        detokenized ids up to the stop rule, a logprob entry per token missing, more tokens
                        than max_tokens, usage that is not the ids, a finish reason the output contradicts,
                        a banned token emitted

The engine (specgate.engines.engine), an endpoint (specgate.engines.endpoint) and the fake engine (specgate.testing)
fill these in; specgate.checks.requests compares them across engines. No vLLM in here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Decode = Callable[[Sequence[int]], str]  # the target tokenizer's decode (special tokens skipped)
# What a decode shows for the bytes of a character the output has not finished; vLLM's incremental
# detokenizer holds them back instead, so an output cut inside a character ends without it.
INCOMPLETE = "\ufffd"


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]
    text: str
    finish_reason: str | None  # "stop" | "length" | "abort" | None (not finished)
    stop_reason: int | str | None = None  # the stop string or stop token id; None for EOS (or length)
    logprobs: tuple[Mapping[int, float], ...] | None = None  # per generated token: {token id: logprob}
    prompt_logprobs: tuple[Mapping[int, float] | None, ...] | None = None  # per prompt token (the first: None)
    usage: int | None = None  # completion tokens as the engine reports them to a client
    chunks: tuple[int, ...] = ()  # tokens per streamed chunk (empty: not streamed)
    index: int = 0  # which of the request's n outputs


@dataclass(frozen=True)
class Reply:
    """A request's outputs (index order), or `refused`: vLLM's own sentence, when it refused the request."""

    outputs: tuple[Completion, ...] = ()
    refused: str = ""
    # vLLM's per-request spec-decode figures of each output, where it gives them: (accepted, drafted,
    # verification steps)
    spec_counts: tuple[tuple[int, int, int], ...] = field(default_factory=tuple)

    @property
    def first(self) -> Completion | None:
        return self.outputs[0] if self.outputs else None


def collect(parts: dict[int, dict], piece: Mapping[str, Any], stream: bool) -> None:
    """Fold one chunk of output `piece` (index, text, token_ids, finish_reason, stop_reason, logprobs,
    spec, usage) into `parts` (index -> what that output has so far): streamed chunks add up, a final
    output replaces. The engine and the endpoint both collect their outputs this way."""
    part = parts.setdefault(
        piece["index"], {"text": "", "ids": [], "logprobs": None, "chunks": [], "finish": None, "stop": None}
    )
    ids, logprobs = list(piece.get("token_ids") or ()), piece.get("logprobs")
    if stream:
        part["text"] += piece.get("text") or ""
        part["ids"] += ids
        if ids:
            part["chunks"].append(len(ids))
        if logprobs is not None:
            part["logprobs"] = (part["logprobs"] or []) + list(logprobs)
    else:
        part.update(text=piece.get("text") or "", ids=ids, logprobs=None if logprobs is None else list(logprobs))
    if piece.get("finish_reason") is not None:
        part["finish"], part["stop"] = piece["finish_reason"], piece.get("stop_reason")
    if piece.get("spec") is not None:
        part["spec"] = tuple(piece["spec"])
    if piece.get("usage") is not None:
        part["usage"] = int(piece["usage"])


def reply_of(parts: dict[int, dict], prompt_logprobs, stream: bool) -> Reply:
    """The Reply of what `collect` gathered. Usage is what a client is told: the server's own figure
    where one came (an endpoint), else what it counts, the tokens it was sent (the engine)."""
    outputs, spec = [], []
    for index in sorted(parts):
        part = parts[index]
        outputs.append(
            Completion(
                tuple(part["ids"]),
                part["text"],
                part["finish"],
                part["stop"],
                None if part["logprobs"] is None else tuple(part["logprobs"]),
                None if prompt_logprobs is None else tuple(prompt_logprobs),
                part.get("usage", len(part["ids"])),
                tuple(part["chunks"]) if stream else (),
                index,
            )
        )
        if "spec" in part:
            spec.append(part["spec"])
    return Reply(tuple(outputs), spec_counts=tuple(spec))


def _stop_strings(params: Mapping[str, Any]) -> list[str]:
    stop = params.get("stop") or []
    return [stop] if isinstance(stop, str) else list(stop)


def stop_at(ids: Sequence[int], stop: str, decode: Decode, min_tokens: int = 0) -> tuple[int, int] | None:
    """Where `stop` first completes in these ids as vLLM searches for it (only past the first min_tokens
    tokens' text): (its start in the detokenized text, the index of the token that completes it)."""
    full = decode(list(ids))
    at = full.find(stop, len(decode(list(ids[:min_tokens]))) if min_tokens else 0)
    if at < 0:
        return None
    end = at + len(stop)
    for i in range(len(ids)):
        if len(decode(list(ids[: i + 1]))) >= end:
            return at, i
    return at, len(ids) - 1


def expected_text(out: Completion, params: Mapping[str, Any], decode: Decode) -> str | None:
    """The text the stop rule leaves of these ids (None: it cannot be told from the ids alone). A stop
    string cuts the text at its start (or end, with include_stop_str_in_output); a stop token or EOS that
    ended the output is not part of the text unless include_stop_str_in_output."""
    include = bool(params.get("include_stop_str_in_output"))
    ids = list(out.token_ids)
    if out.finish_reason == "stop" and isinstance(out.stop_reason, str):
        found = stop_at(ids, out.stop_reason, decode, int(params.get("min_tokens") or 0))
        if found is None:
            return None
        full = decode(ids)
        return full[: found[0] + len(out.stop_reason)] if include else full[: found[0]]
    if out.finish_reason == "stop" and ids and not include:
        return decode(ids[:-1])
    return decode(ids)


def inconsistencies(
    out: Completion, params: Mapping[str, Any], decode: Decode, eos: int | None, streamed: Completion | None = None
) -> list[str]:
    """What this output contradicts about itself under the request's parameters (empty: consistent).
    `streamed` is the same request's streamed twin, whose concatenated chunks must equal it."""
    problems = []
    ids, max_tokens = list(out.token_ids), params.get("max_tokens")
    if max_tokens is not None and len(ids) > max_tokens:
        problems.append(f"{len(ids)} tokens for max_tokens {max_tokens}")
    if out.usage is not None and out.usage != len(ids):
        problems.append(f"usage says {out.usage} completion tokens, the output has {len(ids)}")
    if params.get("logprobs") is not None:
        if out.logprobs is None or len(out.logprobs) != len(ids):
            problems.append(f"{0 if out.logprobs is None else len(out.logprobs)} logprob entries for {len(ids)} tokens")
        else:
            missing = [i for i, (t, entry) in enumerate(zip(ids, out.logprobs)) if t not in entry]
            if missing:
                problems.append(f"the logprob entry of token {missing[0]} does not hold the token emitted there")
    want = expected_text(out, params, decode)
    if want is None:
        problems.append(f"finished on stop string {out.stop_reason!r}, which the detokenized ids do not hold")
    elif out.text.rstrip(INCOMPLETE) != want.rstrip(INCOMPLETE):  # an output cut inside a character
        problems.append(f"the text is not what the stop rule leaves of the ids: {_first_difference(out.text, want)}")
    problems += _finish_problems(out, params, decode, eos)
    if (allowed := params.get("allowed_token_ids")) is not None and (outside := sorted(set(ids) - set(allowed))):
        problems.append(f"tokens outside allowed_token_ids emitted: {outside[:5]}")
    if streamed is not None:
        if streamed.token_ids != out.token_ids or streamed.text != out.text:
            where = (
                f"ids differ at token {_first_index(streamed.token_ids, out.token_ids)}"
                if streamed.token_ids != out.token_ids
                else _first_difference(streamed.text, out.text)
            )
            problems.append(f"the streamed chunks do not add up to the final output: {where}")
        if streamed.usage is not None and streamed.usage != len(out.token_ids):
            problems.append(f"streamed usage {streamed.usage} against {len(out.token_ids)} tokens in the final output")
    return problems


def _finish_problems(out: Completion, params: Mapping[str, Any], decode: Decode, eos: int | None) -> list[str]:
    """The finish reason against what the output holds: a stop that should have ended it earlier, a
    length finish short of max_tokens, a stop token that is not the last one."""
    ids, problems = list(out.token_ids), []
    min_tokens = int(params.get("min_tokens") or 0)
    stop_ids = set(params.get("stop_token_ids") or ())
    if eos is not None and not params.get("ignore_eos"):
        stop_ids.add(eos)
    # a stop token is checked on every token (min_tokens masks it from being sampled, not from stopping)
    early = [i for i, t in enumerate(ids[:-1]) if t in stop_ids]
    if early:
        problems.append(f"stop token {ids[early[0]]} at token {early[0]}, yet the output goes on")
    for s in _stop_strings(params):
        found = stop_at(ids, s, decode, min_tokens)
        if found is not None and found[1] < len(ids) - 1:
            problems.append(
                f"stop string {s!r} completes at token {found[1]}, yet the output goes on to {len(ids)} tokens "
                "(tokens after the stop are kept)"
            )
    if out.finish_reason == "length":
        if (cap := params.get("max_tokens")) and len(ids) < cap:
            problems.append(f"finish reason 'length' after {len(ids)} of max_tokens {cap}")
    elif out.finish_reason == "stop":
        if isinstance(out.stop_reason, str):
            if out.stop_reason not in _stop_strings(params):
                problems.append(f"stop_reason {out.stop_reason!r} is not one of the request's stop strings")
        elif isinstance(out.stop_reason, int):
            if not ids or ids[-1] != out.stop_reason or out.stop_reason not in (params.get("stop_token_ids") or ()):
                problems.append(f"stop_reason {out.stop_reason} is not the last token and a requested stop token")
        elif eos is None or not ids or ids[-1] != eos or params.get("ignore_eos"):
            problems.append("finished 'stop' with no stop reason, but the last token is not EOS")
        if min_tokens and len(ids) < min_tokens:
            problems.append(f"stopped after {len(ids)} tokens, min_tokens {min_tokens}")
    elif out.finish_reason is None:
        problems.append("the output never finished")
    return problems


def bad_word_tokens(words, encode: Callable[[str], list[int]]) -> list[list[int]]:
    """The token sequences vLLM bans for `bad_words` (SamplingParams.update_from_tokenizer's rule, 0.29-0.33):
    each word without its leading whitespace, and with one leading space only where that gives another
    first token and as many tokens (so ' must' is not banned where 'must' is two tokens)."""
    out: list[list[int]] = []
    for word in words:
        plain = encode(word.lstrip())
        if plain:
            out.append(plain)
        spaced = encode(" " + word.lstrip())
        if spaced and plain and spaced[0] != plain[0] and len(spaced) == len(plain):
            out.append(spaced)
    return out


def _first_index(a: Sequence, b: Sequence) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _first_difference(got: str, want: str) -> str:
    i = _first_index(got, want)
    return f"at character {i}: {got[max(0, i - 20) : i + 20]!r} vs {want[max(0, i - 20) : i + 20]!r}"
