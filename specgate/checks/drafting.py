"""How often a method drafted, judged: figures of the acceptance check (per category: the greedy pass) and of the
load check (per concurrency level: the speedup trials' streams), beside the mean acceptance length they qualify.

vLLM's mean acceptance length is that of the steps that verified drafts: a drafter that stops proposing for some
requests of a large batch (vLLM #49548, #27379) leaves it where it was, and costs only speed. The share of decode
steps that drafted and the draft tokens proposed per output token (specgate.figures.acceptance.Drafting) see it.

    bounds(drafting, stored, rtol, schedule, source) -> [Bound]   each figure held to its stored one x (1 - rtol);
                                                                   a dynamic-speculation schedule's draft tokens
                                                                   per output token also x (1 + rtol): its policy
    rows(record, stored, rtol, schedule, **where) -> [Row]        the same figures for the results table
    batch_k(schedule, batch) -> k                                  what a schedule drafts at a batch size
    unjudged(judgements, update) -> line or ''                     the keys whose stored record predates them

A figure of the existing checks, not a gate of its own: it qualifies their acceptance length, is stored in their
records (the portable group) and read from the same step of the run; a gate of its own would add a row per
(method, key) to the summary and a test per key for figures the acceptance and load tests already hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specgate.checks import ROUNDING, Row
from specgate.figures.acceptance import DRAFT_SHARE, DRAFT_TOKENS_PER_TOKEN, Drafting

POLICY = "draft_tokens_per_token_policy"  # the ceiling a dynamic-speculation schedule puts on the same figure
SCHEDULE = "num_speculative_tokens_per_batch_size"  # vLLM's speculative_config key (0.32+, CUDA and CPU)
WHAT = {
    DRAFT_SHARE: "share of decode steps that drafted",
    DRAFT_TOKENS_PER_TOKEN: "draft tokens per output token",
}


@dataclass(frozen=True)
class Bound:
    """One figure against its stored value: `fails()` is None when it holds, else the failure message."""

    what: str
    measured: float | None
    bound: float
    baseline: float
    source: str
    said: str  # the tolerance and what the counts were
    ceiling: bool = False

    def fails(self) -> str | None:
        if self.measured is not None and (
            self.measured <= self.bound + ROUNDING if self.ceiling else self.measured >= self.bound - ROUNDING
        ):
            return None
        measured = "none (no output)" if self.measured is None else f"{self.measured:.4g}"
        return (
            f"{self.what}: measured {measured}, baseline {self.baseline:.4g} ({self.source}), "
            f"{'ceiling' if self.ceiling else 'floor'} {self.bound:.4g} ({self.said})"
        )


def batch_k(schedule: Sequence[Sequence[int]], batch: int) -> int:
    """The draft tokens a dynamic-speculation schedule [(first, last, k), ...] gives a step of `batch` requests:
    the range holding it, else the last range before it (vLLM carries a k forward over a gap and past the last
    range: build_dynamic_sd_schedule_lookup, vllm/v1/spec_decode/dynamic/utils.py, 0.32.0)."""
    ranges = sorted((int(a), int(b), int(k)) for a, b, k in schedule)
    k = ranges[0][2]
    for first, _, value in ranges:
        if first <= batch:
            k = value
    return k


def _policy(schedule, batch: int | None) -> str:
    where = f"; a step of {batch} requests drafts {batch_k(schedule, batch)}" if batch else ""
    return f"its drafting policy: {SCHEDULE} {[list(r) for r in schedule]}{where}"


def bounds(
    drafting: Drafting | None, stored: dict | None, rtol: float, schedule=None, source: str = "", batch: int = 0
) -> list[Bound]:
    """The figures of `drafting` against `stored` (a record of the same key): floors, and for a method with a
    dynamic-speculation `schedule` a ceiling on draft tokens per output token too. `batch`: the requests a step
    of this key holds at most (the level, the category's prompts), for the message."""
    if drafting is None or not stored:
        return []
    now = drafting.record()
    counts = {
        DRAFT_SHARE: f"{drafting.num_drafts} of {drafting.decode_steps} decode steps drafted",
        DRAFT_TOKENS_PER_TOKEN: f"{drafting.num_draft_tokens} draft tokens for {drafting.output_tokens} output tokens",
    }
    out = []
    for metric in (DRAFT_SHARE, DRAFT_TOKENS_PER_TOKEN):
        if metric not in stored:
            continue
        base = float(stored[metric])
        said = f"draft_rtol {rtol}; {counts[metric]}"
        out.append(Bound(WHAT[metric], now.get(metric), base * (1 - rtol), base, source, said))
        if metric == DRAFT_TOKENS_PER_TOKEN and schedule:
            said = f"{said}; {_policy(schedule, batch)}"
            out.append(Bound(f"{WHAT[metric]} (policy)", now.get(metric), base * (1 + rtol), base, source, said, True))
    return out


def rows(record: dict, stored: dict | None, rtol: float, schedule=None, **where) -> list[Row]:
    """The figures as the results table shows them (`where`: the Row's concurrency, when a level's)."""
    base, out = stored or {}, []
    for metric in (DRAFT_SHARE, DRAFT_TOKENS_PER_TOKEN):
        if metric not in record:
            continue
        value, b = record[metric], base.get(metric)
        floor = None if b is None else b * (1 - rtol)
        out.append(Row(metric, value, b, floor, failing=floor is not None and value < floor - ROUNDING, **where))
        if metric == DRAFT_TOKENS_PER_TOKEN and schedule and b is not None:
            ceiling = b * (1 + rtol)
            out.append(Row(POLICY, value, b, ceiling, failing=value > ceiling + ROUNDING, **where))
    return out


def unjudged(judgements, update: str) -> str:
    """The summary's line for the acceptance and load keys whose stored record was written before drafting was
    measured (an acceptance length stored, no draft share): their figures are shown, not judged, until `update`
    (the command that stores them) writes them; '' when there is none."""
    keys = []
    for j in judgements:
        shown = {r.metric: r for r in j.rows if r.position is None}
        head, share = shown.get("mean_acceptance_length"), shown.get(DRAFT_SHARE)
        if head is not None and head.baseline is not None and share is not None and share.baseline is None:
            keys.append(f"{j.method} {j.key}")
    if not keys:
        return ""
    return (
        f"drafted steps (draft share, draft tokens per output token) shown, not judged, at {len(keys)} key(s) "
        f"({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}): their stored figures were written before "
        f"drafting was measured; `{update}` stores them"
    )
