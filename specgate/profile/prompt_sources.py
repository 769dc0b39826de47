"""Where a profile's prompts come from: the entries of `prompts = [...]` (and `[speedup] prompts`).

    prompts = ["fixtures/prompts/embedded.jsonl",                       our schema, a path
               { chat = "traffic.jsonl", per_category = 20 },            rows with messages and category
               { speed_bench = "qualitative", fallback = "fixtures/prompts/general.jsonl" }]

Each entry is read in two steps, as the profile is: `parse_sources` checks what the entry says (one
kind, per_category, too_long; a SPEED-Bench split's name) without touching the disk, and
`resolve_sources` finds the file it reads: a path against the checkout, a SPEED-Bench split in the
directory the entry's `dir` or $SPECGATE_SPEED_BENCH_DIR names. A SPEED-Bench entry whose directory
is not configured on this machine reads its `fallback` instead, saying so, so one profile collects
everywhere. Loading the prompts themselves is specgate.prompts'.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specgate.profile.schema import Checker, did_you_mean

# SPEED-Bench (nvidia/SPEED-Bench): the layout vLLM's `vllm bench serve --dataset-name speed_bench`
# reads, a directory of <split>.jsonl files, one row per prompt with `category` and `messages`.
SPEED_BENCH_ENV = "SPECGATE_SPEED_BENCH_DIR"
SPEED_BENCH_SPLITS = (
    "qualitative",
    "throughput_1k",
    "throughput_2k",
    "throughput_8k",
    "throughput_16k",
    "throughput_32k",
)
SPEED_BENCH_PREPARE = (
    "Prepare it as vLLM's speed_bench dataset expects (the recipe vLLM's SpeedBench class names): `pip install "
    "datasets tiktoken`, then `curl -LsSf https://raw.githubusercontent.com/NVIDIA-NeMo/Skills/refs/heads/main/"
    "nemo_skills/dataset/speed-bench/prepare.py | python3 - --config all --output_dir DIR`; it fetches "
    "nvidia/SPEED-Bench (NVIDIA Evaluation Dataset License) and the public datasets its prompts are built from, "
    "some of which ask you to accept their terms on the hub first (see the dataset card)"
)
# What happens to a prompt longer than max_model_len - max_tokens (after the chat template).
TOO_LONG = ("error", "skip", "truncate")
KINDS = ("file", "chat", "speed_bench")
ENTRY_KEYS = {
    "file": str,
    "chat": str,
    "speed_bench": str,
    "dir": str,
    "fallback": str,
    "per_category": object,
    "too_long": str,
}
EXAMPLE = '{ speed_bench = "qualitative", per_category = 10 }'


@dataclass(frozen=True)
class PromptSource:
    """One entry of `prompts = [...]` (or `[speedup] prompts`), resolved to the file that is read.

    kind "file": our schema (id, category, messages or text); "chat": rows with `messages` and `category`
    (a team's own traffic; other keys ignored, ids derived); "speed_bench": a prepared SPEED-Bench split
    (a chat file whose multi-turn rows are sent as their first turn, as vLLM's speed_bench loader does).
    A SPEED-Bench entry whose directory is not configured on this machine resolves to its `fallback`
    file, with `note` saying so, so the same profile collects everywhere."""

    kind: str
    path: Path
    per_category: int | None = None  # prompts drawn from each category (seeded, stable); None = all
    too_long: str = "error"  # a prompt past max_model_len - max_tokens: error | skip (and refill) | truncate
    split: str = ""  # the SPEED-Bench split
    name: str = ""  # as the profile wrote it, for summaries
    note: str = ""  # why this is a fallback file
    # As the entry was written, until resolve_sources finds its file: its key, the path key, dir, fallback.
    key: str = field(default="", repr=False, compare=False)
    path_key: str = field(default="", repr=False, compare=False)
    dir: str = field(default="", repr=False, compare=False)
    fallback: str | None = field(default=None, repr=False, compare=False)

    @property
    def label(self) -> str:
        return self.name or str(self.path)


def parse_sources(check: Checker, key: str, entries: list) -> tuple[PromptSource, ...]:
    """`prompts = [...]` entries as written: a path (our schema, as ever) or a table naming a file, a chat
    JSONL or a SPEED-Bench split, with per_category and too_long. No file is looked at."""
    if not entries:
        raise check.fail(key, "must list at least one prompt file.")
    out = []
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if isinstance(entry, str):
            out.append(PromptSource("file", Path(entry), name=entry, key=where, path_key=where))
            continue
        if not isinstance(entry, dict):
            raise check.fail(where, f"must be a path string or a table like {EXAMPLE}, got {entry!r}.")
        check.table(entry, ENTRY_KEYS, where + ".")
        kinds = [k for k in KINDS if k in entry]
        if len(kinds) != 1:
            raise check.fail(
                where,
                "must name exactly one of file = PATH (our schema, with ids), chat = PATH (rows with "
                f"messages and category) or speed_bench = SPLIT; got {', '.join(kinds) or 'none'}.",
            )
        kind = kinds[0]
        per_category = _per_category(check, where + ".per_category", entry.get("per_category", "all"))
        too_long = entry.get("too_long", "skip" if kind == "speed_bench" else "error")
        if too_long not in TOO_LONG:
            raise check.fail(
                where + ".too_long",
                f"must be one of {', '.join(map(repr, TOO_LONG))}{did_you_mean(too_long, TOO_LONG)}, got {too_long!r}.",
            )
        for extra in ("dir", "fallback"):
            if extra in entry and kind != "speed_bench":
                raise check.fail(f"{where}.{extra}", "only applies to a speed_bench entry.")
        if kind != "speed_bench":
            out.append(
                PromptSource(
                    kind,
                    Path(entry[kind]),
                    per_category,
                    too_long,
                    name=entry[kind],
                    key=where,
                    path_key=f"{where}.{kind}",
                )
            )
            continue
        split = entry["speed_bench"]
        if split not in SPEED_BENCH_SPLITS and not re.fullmatch(r"throughput_\d+k", split):
            raise check.fail(
                where + ".speed_bench",
                f"names split {split!r}{did_you_mean(split, SPEED_BENCH_SPLITS)}; "
                f"SPEED-Bench has: {', '.join(SPEED_BENCH_SPLITS)}.",
            )
        out.append(
            PromptSource(
                "speed_bench",
                Path(),
                per_category,
                too_long,
                split=split,
                key=where,
                dir=entry.get("dir", ""),
                fallback=entry.get("fallback"),
            )
        )
    return tuple(out)


def _per_category(check: Checker, key: str, value: Any) -> int | None:
    if value == "all":
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise check.fail(key, f'must be a whole number >= 1 or "all", got {value!r}.')
    return value


def resolve_sources(check: Checker, sources: tuple[PromptSource, ...], root: Path) -> tuple[PromptSource, ...]:
    """Each parsed entry with the file it reads: a path against `root` that must exist; a SPEED-Bench
    split in its configured directory, or its fallback where none is configured."""
    out = []
    for source in sources:
        if source.kind != "speed_bench":
            out.append(replace(source, path=prompt_file(check, source.path_key, source.name, root)))
        else:
            out.append(_speed_bench(check, source, root))
    return tuple(out)


def prompt_file(check: Checker, key: str, p: str, root: Path) -> Path:
    """A file the profile names (relative to the checkout), which must exist."""
    resolved = (root / Path(p).expanduser()).resolve()
    if not resolved.is_file():
        raise check.fail(key, f"names {p!r}, but {resolved} does not exist.")
    return resolved


def _speed_bench(check: Checker, source: PromptSource, root: Path) -> PromptSource:
    """The split's file in the configured directory (the entry's `dir`, else $SPECGATE_SPEED_BENCH_DIR). With
    no directory configured, the entry's `fallback` file stands in, saying so; a configured directory that
    does not hold the split is an error (someone meant to use it)."""
    where, split, fallback = source.key, source.split, source.fallback
    fallback_path = prompt_file(check, where + ".fallback", fallback, root) if fallback is not None else None
    configured = source.dir or os.environ.get(SPEED_BENCH_ENV, "")
    origin = f"{where}.dir = {source.dir!r}" if source.dir else f"${SPEED_BENCH_ENV} = {configured!r}"
    if not configured:
        if fallback_path is None:
            raise check.fail(
                where,
                f"names SPEED-Bench split {split!r}, but no SPEED-Bench directory is configured: set "
                f'${SPEED_BENCH_ENV} (or dir = "..." in this entry) to a directory holding {split}.jsonl. '
                f'{SPEED_BENCH_PREPARE}. Or add fallback = "fixtures/prompts/general.jsonl" to gate on that '
                "file where the data is absent.",
            )
        note = (
            f"SPEED-Bench {split} is not on this machine (set ${SPEED_BENCH_ENV} to its directory), "
            f"so {fallback} stands in"
        )
        return PromptSource("file", fallback_path, name=fallback, note=note)
    directory = Path(configured).expanduser()
    directory = directory if directory.is_absolute() else root / directory
    if not directory.is_dir():
        raise check.fail(
            where,
            f"names SPEED-Bench split {split!r} in {origin}, but {directory} is not a directory. "
            f"{SPEED_BENCH_PREPARE.replace('DIR', str(directory))}.",
        )
    path = directory / f"{split}.jsonl"
    if not path.is_file():
        raise check.fail(
            where,
            f"names SPEED-Bench split {split!r}, but {directory} (from {origin}) has no {split}.jsonl. "
            + SPEED_BENCH_PREPARE.replace("--config all", f"--config {split}").replace("DIR", str(directory))
            + ".",
        )
    return PromptSource(
        "speed_bench",
        path.resolve(),
        source.per_category,
        source.too_long,
        split=split,
        name=f"SPEED-Bench {split} ({path})",
    )
