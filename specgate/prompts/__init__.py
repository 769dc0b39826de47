"""A run's prompts: the sets loaded and validated (this module), and the inputs the engines get
(inputs: tokenized once with the target's tokenizer, fitted into the room the profile leaves).

Neighbours: below is profile/ (the entries of `prompts = [...]`: profile.prompt_sources; the zoo's
models: specgate.models); above are run/ (the session tokenizes once per run) and release/ (the
rehearsal). Nothing here boots an engine.

Prompt sets: load category-tagged JSONL, reject sets that look like random tokens, sample per
category (tokenizing them, once per run: specgate.prompts.inputs).

Our schema, one line per prompt:
    {"id": "short_qa-01", "category": "short_qa", "messages": [{"role": "user", "content": "..."}]}
    {"id": "code-01", "category": "code_continuation", "text": "def parse(..."}
`messages` get the target's chat template (applied here, not by the engine); `text` is sent as raw
text after the BOS token. Either way the suite sends token ids, so every method sees identical input.

Chat files a team already has (its own traffic, or SPEED-Bench prepared for vLLM's `vllm bench serve
--dataset-name speed_bench`) need only `category` and `messages` per row; other keys are ignored and
ids are derived (the row's `id` or `question_id`, else a hash of its content), so they stay stable
when rows are added or reordered. A profile entry may take `per_category` prompts from each
category: the lowest hashes of (seed, id), the same prompts every run.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.errors import PromptSetError
from specgate.profile.prompt_sources import SPEED_BENCH_PREPARE, PromptSource

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
# Statistics of the first characters of each prompt: enough words, and a 32k-token split stays fast
# (our own sets' prompts are all shorter, so their verdicts do not depend on it).
JUDGE_CHARS_PER_PROMPT = 4000
# A chat file from elsewhere may hold a few characters split at a token boundary (SPEED-Bench pads and
# cuts its long prompts with tiktoken); token salad has them in most prompts.
FOREIGN_UNDECODABLE_SHARE = 0.05
_UNDECODABLE = re.compile("[\ufffd\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# What nvidia/SPEED-Bench holds before its preparation script fetched the real prompts.
SPEED_BENCH_PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE"


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


def load_prompt_set(path: Path | str) -> list[Prompt]:
    """Parse one JSONL prompt file; every problem names the file and line."""
    path = Path(path)
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for lineno, rec in _json_lines(path):
        where = f"prompt set {path}, line {lineno}"
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
    messages = _checked_messages(rec["messages"], where)
    if messages[-1]["role"] != "user":
        raise PromptSetError(f"{where}: the last message must be from the user (the model answers it).")
    return Prompt(rec["id"], rec["category"], path, messages=messages)


def _checked_messages(messages: Any, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(messages, list) or not messages:
        raise PromptSetError(f"{where}: 'messages' must be a non-empty list.")
    for i, m in enumerate(messages):
        if not (
            isinstance(m, dict)
            and set(m) == {"role", "content"}
            and m["role"] in ROLES
            and isinstance(m["content"], str)
        ):
            raise PromptSetError(
                f"{where}: messages[{i}] must be {{'role': one of {sorted(ROLES)}, 'content': string}}, got {m!r}."
            )
        if not m["content"].strip():
            raise PromptSetError(f"{where}: messages[{i}] ({m['role']}) has empty content.")
        if m["content"].startswith(SPEED_BENCH_PLACEHOLDER):
            raise PromptSetError(
                f"{where}: messages[{i}] is SPEED-Bench's placeholder ({SPEED_BENCH_PLACEHOLDER!r}): this file is the "
                f"split as the hub ships it, before its prompts were fetched from their sources. {SPEED_BENCH_PREPARE}."
            )
    return tuple(dict(m) for m in messages)


def load_chat_set(path: Path | str, first_turn: bool = False) -> list[Prompt]:
    """A chat JSONL without our ids: every row needs `category` and `messages` (other keys are ignored).

    Ids: `<file stem>/<row id>` from the row's `id` or `question_id`, else `<file stem>/<content hash>`.
    `first_turn`: send a multi-turn row as its first user turn (and any system message before it), as
    vLLM's speed_bench loader does: SPEED-Bench's later turns expect the model's own answers in between,
    which a single prompt cannot carry. Every problem names the file and line."""
    path = Path(path)
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for lineno, rec in _json_lines(path):
        where = f"prompt set {path}, line {lineno}"
        if not isinstance(rec, dict):
            raise PromptSetError(f"{where}: each line must be a JSON object.")
        if "messages" not in rec:
            raise PromptSetError(
                f"{where}: no 'messages'; every row of a chat prompt file needs 'messages' "
                "(a list of {'role', 'content'}) and 'category'."
            )
        category = rec.get("category")
        if not isinstance(category, str) or not category.strip():
            raise PromptSetError(f"{where}: 'category' must be a non-empty string, got {category!r}.")
        messages = _checked_messages(rec["messages"], where)
        if first_turn:
            first_user = next((i for i, m in enumerate(messages) if m["role"] == "user"), None)
            if first_user is None:
                raise PromptSetError(f"{where}: no message from the user (the model answers the first one).")
            messages = messages[: first_user + 1]
        elif messages[-1]["role"] != "user":
            raise PromptSetError(f"{where}: the last message must be from the user (the model answers it).")
        raw = next(
            (rec[k] for k in ("id", "question_id") if isinstance(rec.get(k), (str, int)) and str(rec[k]).strip()), None
        )
        if raw is None:
            content = json.dumps([category, rec["messages"]], sort_keys=True, ensure_ascii=False)
            raw = hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]
        pid = f"{path.stem}/{raw}"
        if pid in first_line:
            raise PromptSetError(
                f"{where}: the same prompt as line {first_line[pid]} (id {pid!r}); drop one of them, or give the rows "
                "distinct 'id' values."
            )
        first_line[pid] = lineno
        prompts.append(Prompt(pid, category, path, messages=messages))
    if not prompts:
        raise PromptSetError(f"prompt set {path}: no prompts.")
    return prompts


def _json_lines(path: Path):
    """(line number, parsed record) of every non-blank line; unreadable files and bad JSON name file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise PromptSetError(f"prompt set {path}: file not found.") from None
    except UnicodeDecodeError as exc:
        raise PromptSetError(f"prompt set {path}: not UTF-8 ({exc}).") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield lineno, json.loads(line)
        except json.JSONDecodeError as exc:
            raise PromptSetError(f"prompt set {path}, line {lineno}: not valid JSON ({exc.msg}).") from None


_WORD = re.compile(r"[^\W\d_]+")
_SHAPES = re.compile(
    r"^(?:[a-z\u00c0-\u024f]+|[A-Z][a-z\u00c0-\u024f]+|[A-Z]+|[a-z]+(?:[A-Z][a-z]+)+|[A-Z][a-z]+(?:[A-Z][a-z]+)+)$"
)
_LATIN_VOWELS = set("aeiouyAEIOUYàâäéèêëîïôöùûüÿæœáíóúñ")


def word_shape_score(words: list[str]) -> float:
    """Share of alphabetic words shaped like real words.

    Text decoded from random token ids glues sub-word fragments into long, vowel-less or
    case-flipping "words" ("ationReturnxQ"), which real prose and real code rarely contain.
    Scripts without case (CJK, ...) count as well-shaped, and so do other scripts' words in one case
    (Cyrillic, Greek, Vietnamese: SPEED-Bench's multilingual category); the check targets token salad,
    not language.
    """
    good = 0
    for w in words:
        one_case = len(w) <= 20 and (w.islower() or w.isupper() or w.istitle())
        if not w.isascii() and (one_case or not any(unicodedata.category(c) in ("Lu", "Ll") for c in w)):
            good += 1  # another script's word in one case, or a caseless script
        elif len(w) <= 20 and _SHAPES.match(w) and not (len(w) >= 5 and w.isascii() and not set(w) & _LATIN_VOWELS):
            good += 1
    return good / len(words) if words else 1.0


def top_word_coverage(words: list[str], top: int = TOP_WORDS) -> float:
    """Share of words that are among the `top` most common (Zipf: real text reuses its function words)."""
    counts = Counter(w.lower() for w in words)
    return sum(n for _, n in counts.most_common(top)) / len(words) if words else 1.0


def naturalness_problems(prompts: list[Prompt], undecodable_share: float = 0.0) -> list[str]:
    """Why a prompt set looks like random tokens rather than text (empty when it looks real).
    `undecodable_share`: the share of prompts that may hold replacement/control characters."""
    problems = []
    bad = [p.id for p in prompts if _UNDECODABLE.search(p.plain_text)]
    if len(bad) > undecodable_share * len(prompts):
        problems.append(
            f"prompts {bad[:5]} contain replacement/control characters (undecodable bytes)"
            + (f": {len(bad)} of {len(prompts)}" if undecodable_share else "")
        )
    words = [w for p in prompts for w in _WORD.findall(p.plain_text[:JUDGE_CHARS_PER_PROMPT])]
    if len(words) >= MIN_WORDS_TO_JUDGE:
        coverage = top_word_coverage(words)
        if coverage < MIN_TOP_WORD_COVERAGE:
            problems.append(
                f"its {TOP_WORDS} most common words cover only {coverage:.0%} of its {len(words)} words "
                f"(real text: >= {MIN_TOP_WORD_COVERAGE:.0%})"
            )
        shape = word_shape_score(words)
        if shape < MIN_WORD_SHAPE_SCORE:
            problems.append(
                f"only {shape:.0%} of its words are shaped like words (real text: >= {MIN_WORD_SHAPE_SCORE:.0%})"
            )
    return problems


def validate_prompt_set(prompts: list[Prompt], min_per_category: int = 1, undecodable_share: float = 0.0) -> None:
    """Reject sets that look like random tokens or have categories too small to measure."""
    problems = naturalness_problems(prompts, undecodable_share)
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


def load_source(source: PromptSource | Path | str, min_per_category: int = 1) -> list[Prompt]:
    """Every prompt of one profile entry (a path: our schema), validated."""
    if not isinstance(source, PromptSource):
        source = PromptSource("file", Path(source))
    if source.kind == "file":
        prompts = load_prompt_set(source.path)
    else:
        prompts = load_chat_set(source.path, first_turn=source.kind == "speed_bench")
    validate_prompt_set(prompts, min_per_category, 0.0 if source.kind == "file" else FOREIGN_UNDECODABLE_SHARE)
    return prompts


def load_prompts(paths, min_per_category: int = 1) -> list[Prompt]:
    """Load and validate every file (or PromptSource); ids must be unique across files too."""
    return unique_ids([p for path in paths for p in load_source(path, min_per_category)])


def unique_ids(prompts: list[Prompt]) -> list[Prompt]:
    dupes = [i for i, n in Counter(p.id for p in prompts).items() if n > 1]
    if dupes:
        raise PromptSetError(f"prompt ids {dupes[:5]} appear in more than one prompt file; make them unique.")
    return prompts


def sample_rank(prompt_id: str, seed: int) -> str:
    """A prompt's place in its category's draw: depends on nothing but (seed, id), so adding or reordering
    rows never changes which of the old prompts are drawn."""
    return hashlib.sha256(f"{seed}/{prompt_id}".encode()).hexdigest()


def by_category(prompts: list[Prompt]) -> dict[str, list[Prompt]]:
    groups: dict[str, list[Prompt]] = {}
    for p in prompts:
        groups.setdefault(p.category, []).append(p)
    return groups


def draw_order(prompts: list[Prompt], per_category: int | None, seed: int) -> dict[str, list[Prompt]]:
    """Per category, the prompts in the order they are drawn: by sample_rank when sampling, else file order."""
    groups = by_category(prompts)
    if per_category is None:
        return groups
    return {c: sorted(g, key=lambda p: sample_rank(p.id, seed)) for c, g in groups.items()}


def sample_per_category(prompts: list[Prompt], per_category: int | None, seed: int) -> list[Prompt]:
    """`per_category` prompts of each category (all when None), seeded and stable, in file order."""
    if per_category is None:
        return list(prompts)
    chosen = {p.id for group in draw_order(prompts, per_category, seed).values() for p in group[:per_category]}
    return [p for p in prompts if p.id in chosen]
