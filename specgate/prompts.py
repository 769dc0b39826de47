"""Prompt sets: load category-tagged JSONL, reject sets that look like random tokens, tokenize once.

One line per prompt:
    {"id": "short_qa-01", "category": "short_qa", "messages": [{"role": "user", "content": "..."}]}
    {"id": "code-01", "category": "code_continuation", "text": "def parse(..."}
`messages` get the target's chat template (applied here, not by the engine); `text` is sent as raw
text after the BOS token. Either way the suite sends token ids, so every method sees identical input.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.errors import PromptSetError

ROLES = frozenset({"system", "user", "assistant"})

# Random-token detection works on a whole prompt file (thousands of words), where text statistics are
# stable; single short prompts are too noisy to judge. Measured on our sets and on "salad" decoded
# from uniformly random token ids of the zoo tokenizer, and on salad drawn from a set's own words
# (what a large-vocabulary tokenizer's random ids look like):
#   share of words covered by the 50 most common words:  ours 0.33-0.38, salads 0.08-0.12
#   share of words shaped like words (word_shape_score):  ours >= 0.99,   zoo-token salad 0.80
MIN_TOP_WORD_COVERAGE = 0.2
MIN_WORD_SHAPE_SCORE = 0.9
MIN_WORDS_TO_JUDGE = 500
TOP_WORDS = 50

@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    source: Path
    messages: tuple[dict[str, str], ...] | None = None
    text: str | None = None

    @property
    def plain_text(self) -> str:
        if self.text is not None:
            return self.text
        return "\n".join(m["content"] for m in self.messages or ())


@dataclass(frozen=True)
class TokenizedPrompt:
    id: str
    category: str
    token_ids: tuple[int, ...]


def load_prompt_set(path: Path | str) -> list[Prompt]:
    """Parse one JSONL prompt file; every problem names the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PromptSetError(f"prompt set {path}: file not found.") from None
    except UnicodeDecodeError as exc:
        raise PromptSetError(f"prompt set {path}: not UTF-8 ({exc}).") from None
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"prompt set {path}, line {lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"{where}: not valid JSON ({exc.msg}).") from None
        prompts.append(_parse_record(rec, where, path))
        if prompts[-1].id in seen:
            raise PromptSetError(f"{where}: id {prompts[-1].id!r} is used twice; ids must be unique.")
        seen.add(prompts[-1].id)
    if not prompts:
        raise PromptSetError(f"prompt set {path}: no prompts.")
    return prompts


def _parse_record(rec: Any, where: str, path: Path) -> Prompt:
    if not isinstance(rec, dict):
        raise PromptSetError(f"{where}: each line must be a JSON object.")
    unknown = set(rec) - {"id", "category", "messages", "text"}
    if unknown:
        raise PromptSetError(f"{where}: unknown keys {sorted(unknown)}; allowed: id, category, messages, text.")
    for key in ("id", "category"):
        if not isinstance(rec.get(key), str) or not rec[key].strip():
            raise PromptSetError(f"{where}: '{key}' must be a non-empty string.")
    has_messages, has_text = "messages" in rec, "text" in rec
    if has_messages == has_text:
        raise PromptSetError(f"{where}: give exactly one of 'messages' (chat) or 'text' (raw completion).")
    if has_text:
        if not isinstance(rec["text"], str) or not rec["text"].strip():
            raise PromptSetError(f"{where}: 'text' must be a non-empty string.")
        return Prompt(rec["id"], rec["category"], path, text=rec["text"])
    messages = rec["messages"]
    if not isinstance(messages, list) or not messages:
        raise PromptSetError(f"{where}: 'messages' must be a non-empty list.")
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and set(m) == {"role", "content"} and m["role"] in ROLES and isinstance(m["content"], str)):
            raise PromptSetError(
                f"{where}: messages[{i}] must be {{'role': one of {sorted(ROLES)}, 'content': string}}, got {m!r}."
            )
    if messages[-1]["role"] != "user":
        raise PromptSetError(f"{where}: the last message must be from the user (the model answers it).")
    return Prompt(rec["id"], rec["category"], path, messages=tuple(dict(m) for m in messages))


_WORD = re.compile(r"[^\W\d_]+")
_SHAPES = re.compile(
    r"^(?:[a-z\u00c0-\u024f]+|[A-Z][a-z\u00c0-\u024f]+|[A-Z]+|[a-z]+(?:[A-Z][a-z]+)+|[A-Z][a-z]+(?:[A-Z][a-z]+)+)$"
)
_LATIN_VOWELS = set("aeiouyAEIOUYàâäéèêëîïôöùûüÿæœáíóúñ")


def word_shape_score(words: list[str]) -> float:
    """Share of alphabetic words shaped like real words.

    Text decoded from random token ids glues sub-word fragments into long, vowel-less or
    case-flipping "words" ("ationReturnxQ"), which real prose and real code rarely contain.
    Scripts without case (CJK, ...) count as well-shaped; the check targets token salad, not language.
    """
    good = 0
    for w in words:
        if not w.isascii() and not any(unicodedata.category(c) in ("Lu", "Ll") for c in w):
            good += 1  # caseless script
        elif len(w) <= 20 and _SHAPES.match(w) and not (len(w) >= 5 and w.isascii() and not set(w) & _LATIN_VOWELS):
            good += 1
    return good / len(words) if words else 1.0


def top_word_coverage(words: list[str], top: int = TOP_WORDS) -> float:
    """Share of words that are among the `top` most common (Zipf: real text reuses its function words)."""
    counts = Counter(w.lower() for w in words)
    return sum(n for _, n in counts.most_common(top)) / len(words) if words else 1.0


def naturalness_problems(prompts: list[Prompt]) -> list[str]:
    """Why a prompt set looks like random tokens rather than text (empty when it looks real)."""
    problems = []
    bad = [p.id for p in prompts if any(c == "\ufffd" or (unicodedata.category(c) == "Cc" and c not in "\n\t\r") for c in p.plain_text)]
    if bad:
        problems.append(f"prompts {bad[:5]} contain replacement/control characters (undecodable bytes)")
    words = [w for p in prompts for w in _WORD.findall(p.plain_text)]
    if len(words) >= MIN_WORDS_TO_JUDGE:
        coverage = top_word_coverage(words)
        if coverage < MIN_TOP_WORD_COVERAGE:
            problems.append(
                f"its {TOP_WORDS} most common words cover only {coverage:.0%} of its {len(words)} words "
                f"(real text: >= {MIN_TOP_WORD_COVERAGE:.0%})"
            )
        shape = word_shape_score(words)
        if shape < MIN_WORD_SHAPE_SCORE:
            problems.append(f"only {shape:.0%} of its words are shaped like words (real text: >= {MIN_WORD_SHAPE_SCORE:.0%})")
    return problems


def validate_prompt_set(prompts: list[Prompt], min_per_category: int = 1) -> None:
    """Reject sets that look like random tokens or have categories too small to measure."""
    problems = naturalness_problems(prompts)
    if problems:
        raise PromptSetError(
            f"prompt set {prompts[0].source} looks like random tokens rather than text: {'; '.join(problems)}. "
            "Acceptance measured on token salad says nothing about real traffic; write real prompts."
        )
    counts = Counter(p.category for p in prompts)
    small = {c: n for c, n in counts.items() if n < min_per_category}
    if small:
        raise PromptSetError(
            f"prompt set {prompts[0].source}: categories {small} have fewer than {min_per_category} prompts each."
        )


def load_prompts(paths, min_per_category: int = 1) -> list[Prompt]:
    """Load and validate every file; ids must be unique across files too."""
    prompts: list[Prompt] = []
    for path in paths:
        batch = load_prompt_set(path)
        validate_prompt_set(batch, min_per_category)
        prompts.extend(batch)
    dupes = [i for i, n in Counter(p.id for p in prompts).items() if n > 1]
    if dupes:
        raise PromptSetError(f"prompt ids {dupes[:5]} appear in more than one prompt file; make them unique.")
    return prompts


def tokenize(prompts: list[Prompt], tokenizer, max_prompt_tokens: int) -> list[TokenizedPrompt]:
    """Token ids for each prompt, once, with the chat template applied by us (not the engine)."""
    out = []
    for p in prompts:
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
        if len(ids) > max_prompt_tokens:
            raise PromptSetError(
                f"prompt {p.id} ({p.source}) has {len(ids)} tokens; the profile leaves room for {max_prompt_tokens} "
                "(max_model_len - max_tokens). Shorten it or raise max_model_len."
            )
        out.append(TokenizedPrompt(p.id, p.category, tuple(int(i) for i in ids)))
    return out


class PromptInputs:
    """A profile's prompts: loaded and validated once (cheap, for collection), tokenized once with the
    target's tokenizer when an engine first needs them."""

    def __init__(self, profile, root: Path):
        self.profile, self.root = profile, Path(root)
        self._loaded: list[Prompt] | None = None
        self._tokenized: list[TokenizedPrompt] | None = None
        self._tokenizer = None

    def loaded(self) -> list[Prompt]:
        if self._loaded is None:
            self._loaded = load_prompts(self.profile.prompts)
        return self._loaded

    def categories(self) -> list[str]:
        """Prompt categories in file order (no tokenizer needed)."""
        return list(dict.fromkeys(p.category for p in self.loaded()))

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            from specgate.models import resolve

            self._tokenizer = AutoTokenizer.from_pretrained(resolve(self.profile.target, self.root))
        return self._tokenizer

    def tokenized(self) -> list[TokenizedPrompt]:
        if self._tokenized is None:
            budget = self.profile.max_model_len - self.profile.max_tokens
            self._tokenized = tokenize(self.loaded(), self.tokenizer(), budget)
        return self._tokenized

    def decode(self, token_id: int) -> str:
        return self.tokenizer().decode([token_id])
