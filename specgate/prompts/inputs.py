"""A run's prompts as the engines get them: tokenized once with the target's tokenizer (the chat
template applied here, not by the engine), fitted into the room the profile leaves (max_model_len -
max_tokens: a prompt too long is an error, skipped or truncated as its entry says), per use: the
profile's prompts for equivalence and acceptance, `[speedup] prompts` for the load, the structured
scenario's own. Loading and validating the sets is specgate.prompts'.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specgate.errors import PromptSetError
from specgate.profile.prompt_sources import PromptSource
from specgate.prompts import Prompt, draw_order, load_source, sample_per_category, unique_ids


@dataclass(frozen=True)
class TokenizedPrompt:
    id: str
    category: str
    token_ids: tuple[int, ...]


def encode(p: Prompt, tokenizer) -> list[int]:
    """The token ids the engines get: the chat template applied by us (not the engine), or BOS + text."""
    if p.messages is not None:
        if not getattr(tokenizer, "chat_template", None):
            raise PromptSetError(
                f"prompt {p.id} ({p.source}) is a chat prompt, but the target's tokenizer has no chat template."
            )
        ids = tokenizer.apply_chat_template(list(p.messages), add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
    else:
        ids = tokenizer.encode(p.text, add_special_tokens=False)
        if tokenizer.bos_token_id is not None:
            ids = [tokenizer.bos_token_id, *ids]
    return [int(i) for i in ids]


def _too_long(p: Prompt, n: int, max_prompt_tokens: int) -> PromptSetError:
    return PromptSetError(
        f"prompt {p.id} ({p.source}) has {n} tokens; the profile leaves room for {max_prompt_tokens} "
        "(max_model_len - max_tokens). Shorten it or raise max_model_len (or give its prompts entry "
        'too_long = "skip" or "truncate").'
    )


def tokenize(prompts: list[Prompt], tokenizer, max_prompt_tokens: int) -> list[TokenizedPrompt]:
    """Token ids for each prompt, once; a prompt past `max_prompt_tokens` is an error."""
    out = []
    for p in prompts:
        ids = encode(p, tokenizer)
        if len(ids) > max_prompt_tokens:
            raise _too_long(p, len(ids), max_prompt_tokens)
        out.append(TokenizedPrompt(p.id, p.category, tuple(ids)))
    return out


def truncate(p: Prompt, tokenizer, max_prompt_tokens: int) -> list[int]:
    """Token ids of `p` with the middle of its longest message (or of its text) cut out until it fits:
    a long prompt's instructions open it and its question closes it, the bulk between is context."""
    ids = encode(p, tokenizer)
    for attempt in range(8):
        over = len(ids) - max_prompt_tokens
        if over <= 0:
            return ids
        if p.text is not None:
            body = p.text
        else:
            longest = max(range(len(p.messages)), key=lambda i: len(p.messages[i]["content"]))
            body = p.messages[longest]["content"]
        body_ids = tokenizer.encode(body, add_special_tokens=False)
        keep = len(body_ids) - over - 4 * 2**attempt  # slack: the seam may tokenize differently
        if keep < 2:
            break
        head = keep // 2
        cut = tokenizer.decode(body_ids[:head]) + tokenizer.decode(body_ids[len(body_ids) - (keep - head) :])
        if p.text is not None:
            p = replace(p, text=cut)
        else:
            p = replace(
                p, messages=tuple(dict(m, content=cut) if i == longest else m for i, m in enumerate(p.messages))
            )
        ids = encode(p, tokenizer)
    raise PromptSetError(
        f"prompt {p.id} ({p.source}) does not fit in {max_prompt_tokens} tokens even with the middle of its longest "
        "message cut out (the rest of it and the chat template take the room); raise max_model_len or use "
        'too_long = "skip".'
    )


@dataclass
class Fitted:
    """A prompt set after tokenization: what was sent, and what did not fit as it was."""

    prompts: list[TokenizedPrompt]
    skipped: list[str]  # longer than the room left: left out (the next in the draw took its place)
    truncated: list[str]  # longer than the room left: the middle cut out


def fit(source: PromptSource, prompts: list[Prompt], tokenizer, max_prompt_tokens: int, seed: int) -> Fitted:
    """Tokenize one entry's draw: per category, prompts in draw order until `per_category` fit. A prompt
    that does not fit is an error, skipped (the next one drawn takes its place) or truncated, as the
    entry says; a category left with no prompt is an error (its acceptance would measure nothing)."""
    out = Fitted([], [], [])
    position = {p.id: i for i, p in enumerate(prompts)}
    taken: list[tuple[int, TokenizedPrompt]] = []
    for category, drawn in draw_order(prompts, source.per_category, seed).items():
        want, got = source.per_category or len(drawn), 0
        for p in drawn:
            if got == want:
                break
            ids = encode(p, tokenizer)
            if len(ids) > max_prompt_tokens:
                if source.too_long == "error":
                    raise _too_long(p, len(ids), max_prompt_tokens)
                if source.too_long == "skip":
                    out.skipped.append(p.id)
                    continue
                ids = truncate(p, tokenizer, max_prompt_tokens)
                out.truncated.append(p.id)
            taken.append((position[p.id], TokenizedPrompt(p.id, p.category, tuple(ids))))
            got += 1
        if not got:
            raise PromptSetError(
                f"prompt set {source.label}: every prompt of category {category!r} is longer than the "
                f"{max_prompt_tokens} tokens the profile leaves (max_model_len - max_tokens), so the category would "
                'measure nothing; raise max_model_len, pick a shorter split, or set too_long = "truncate" on its '
                "prompts entry."
            )
    out.prompts = [t for _, t in sorted(taken, key=lambda x: x[0])]
    return out


class PromptInputs:
    """A prompt set: loaded and validated once (cheap, for collection), tokenized once with the target's
    tokenizer when an engine first needs it. The profile's prompts serve equivalence and acceptance (and
    the speedup load, unless `[speedup] prompts` gives it its own set: `speedup_inputs()`)."""

    def __init__(
        self, profile, root: Path, sources=None, max_tokens: int | None = None, parent: PromptInputs | None = None
    ):
        self.profile, self.root = profile, Path(root)
        self.sources: tuple[PromptSource, ...] = tuple(sources) if sources is not None else profile.sources
        self.max_tokens = max_tokens or profile.max_tokens
        self._parent = parent
        self._pools: list[list[Prompt]] | None = None
        self._loaded: list[Prompt] | None = None
        self._fitted: list[Fitted] | None = None
        self._tokenizer = None
        self._speedup: PromptInputs | None = None
        self._structured: PromptInputs | None = None

    @property
    def max_prompt_tokens(self) -> int:
        return self.profile.max_model_len - self.max_tokens

    def pools(self) -> list[list[Prompt]]:
        """Every prompt of each entry, validated (ids unique across entries)."""
        if self._pools is None:
            pools = [load_source(source) for source in self.sources]
            unique_ids([p for pool in pools for p in pool])
            self._pools = pools
        return self._pools

    def loaded(self) -> list[Prompt]:
        """The drawn prompts (per_category of each category; no tokenizer needed)."""
        if self._loaded is None:
            self._loaded = [
                p
                for source, pool in zip(self.sources, self.pools())
                for p in sample_per_category(pool, source.per_category, self.profile.seed)
            ]
        return self._loaded

    def categories(self) -> list[str]:
        """Prompt categories in file order (no tokenizer needed)."""
        return list(dict.fromkeys(p.category for p in self.loaded()))

    def tokenizer(self):
        if self._parent is not None:
            return self._parent.tokenizer()
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            from specgate.models import resolve

            self._tokenizer = AutoTokenizer.from_pretrained(resolve(self.profile.target, self.root))
        return self._tokenizer

    def fitted(self) -> list[Fitted]:
        """Per entry: the prompts tokenized, and which were skipped or truncated for length."""
        if self._fitted is None:
            self._fitted = [
                fit(source, pool, self.tokenizer(), self.max_prompt_tokens, self.profile.seed)
                for source, pool in zip(self.sources, self.pools())
            ]
        return self._fitted

    @property
    def is_tokenized(self) -> bool:
        return self._fitted is not None

    def tokenized(self) -> list[TokenizedPrompt]:
        return [t for f in self.fitted() for t in f.prompts]

    def decode(self, token_id: int) -> str:
        return self.tokenizer().decode([token_id])

    def category_of(self, prompt_id: str) -> str:
        """The category of a tokenized prompt ('' for an id these inputs do not hold)."""
        return next((p.category for p in self.tokenized() if p.id == prompt_id), "")

    def speedup_inputs(self) -> PromptInputs:
        """The speedup load's prompts: `[speedup] prompts` with room for `[speedup] max_tokens`, else these."""
        speedup = self.profile.speedup
        if not speedup.prompts:
            return self
        if self._speedup is None:
            self._speedup = PromptInputs(
                self.profile, self.root, speedup.prompts, speedup.max_tokens or None, parent=self
            )
        return self._speedup

    def structured_inputs(self) -> PromptInputs:
        """The structured scenario's prompts ([scenarios.structured] prompts), with room for its max_tokens."""
        structured = self.profile.scenarios.structured
        if self._structured is None:
            self._structured = PromptInputs(
                self.profile,
                self.root,
                (PromptSource("file", structured.prompts),),
                structured.max_tokens or None,
                parent=self,
            )
        return self._structured

    # -- what a run records -----------------------------------------------------------------------
    def notes(self) -> list[str]:
        """Why an entry reads a stand-in file (SPEED-Bench not on this machine)."""
        return [s.note for s in self.sources if s.note]

    def record(self) -> dict[str, Any]:
        """For run.json: each entry, how many prompts per category were used, the ids, and what did not fit.
        Before tokenization (nothing was measured) the draw stands, without the length checks."""
        entries = []
        fitted = self._fitted or [None] * len(self.sources)
        for source, pool, f in zip(self.sources, self.pools(), fitted):
            used = f.prompts if f is not None else sample_per_category(pool, source.per_category, self.profile.seed)
            entries.append(
                {
                    "source": source.label,
                    "kind": source.kind,
                    "path": str(source.path),
                    "split": source.split or None,
                    "per_category": source.per_category or "all",
                    "too_long": source.too_long,
                    "note": source.note or None,
                    "available": dict(Counter(p.category for p in pool)),
                    "used": dict(Counter(p.category for p in used)),
                    "prompt_ids": [p.id for p in used],
                    "skipped_too_long": f.skipped if f is not None else None,
                    "truncated": f.truncated if f is not None else None,
                }
            )
        return {"max_prompt_tokens": self.max_prompt_tokens, "tokenized": self.is_tokenized, "entries": entries}

    def summary(self) -> str:
        """'<source>: 11 categories x 10 of 80 = 110 prompts (seeded draw); 3 longer than 3840 tokens skipped'."""
        parts = []
        for entry in self.record()["entries"]:
            used, available = entry["used"], entry["available"]
            counts = sorted(set(used.values()))
            if len(counts) == 1:
                shape = f"{len(used)} categories x {counts[0]}"
            else:
                shape = f"{len(used)} categories, " + ", ".join(f"{c} {n}" for c, n in used.items())
            if entry["per_category"] != "all":
                shape += f" of {'/'.join(map(str, sorted(set(available.values()))))} (seeded draw)"
            text = f"{entry['source']}: {shape} = {sum(used.values())} prompts"
            for key, verb in (("skipped_too_long", "skipped"), ("truncated", "truncated")):
                if entry[key]:
                    text += f"; {len(entry[key])} longer than {self.max_prompt_tokens} tokens {verb}"
            parts.append(text)
        return "; ".join(parts)
