"""Tie-aware greedy equivalence: a speculative method must reproduce the baseline's greedy tokens.

Exact match is the rule. Under `tie-aware`, a divergence is forgiven as numerical only when, at the
first differing position, the baseline's own top-k logprobs hold both tokens and their gap is within
the margin: bf16 arithmetic in a different batch shape can flip such a near-tie, a broken drafter or
verifier cannot hide behind one. Everything after the first divergence is incomparable and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from specgate.profile import Equivalence


@dataclass(frozen=True)
class GreedyOutput:
    """Baseline tokens plus, per position, the top-k {token_id: logprob} the baseline saw."""

    token_ids: tuple[int, ...]
    top_logprobs: tuple[Mapping[int, float], ...] = ()


@dataclass(frozen=True)
class Divergence:
    position: int
    baseline_token: int | None  # None: the baseline ended here
    method_token: int | None  # None: the method ended here
    gap: float | None  # logprob(baseline token) - logprob(method token), when both are in the top-k
    numerical: bool  # True: a near-tie the rule forgives

    def describe(self, decode: Callable[[int], str], margin: float, mode: str) -> str:
        def tok(t: int | None) -> str:
            return "<end of output>" if t is None else f"{decode(t)!r} (id {t})"

        if self.gap is None:
            why = (
                "a length mismatch"
                if self.baseline_token is None or self.method_token is None
                else "the method's token is not in the baseline's top-k"
            )
            detail = f"gap unknown: {why}"
        else:
            detail = (
                f"logprob gap {self.gap:.4g} nats {'<=' if self.numerical else '>'} margin {margin:g} (mode {mode})"
            )
        return (
            f"at token {self.position}: baseline {tok(self.baseline_token)} vs method {tok(self.method_token)}; "
            f"{detail}"
        )


def first_divergence(baseline: Sequence[int], method: Sequence[int]) -> int | None:
    """Index of the first differing token, the shorter length if one is a prefix, None if equal."""
    for i, (a, b) in enumerate(zip(baseline, method)):
        if a != b:
            return i
    return None if len(baseline) == len(method) else min(len(baseline), len(method))


def compare(baseline: GreedyOutput, method_ids: Sequence[int], rule: Equivalence) -> Divergence | None:
    """None when the method reproduces the baseline; otherwise the first divergence, classified."""
    pos = first_divergence(baseline.token_ids, method_ids)
    if pos is None:
        return None
    b = baseline.token_ids[pos] if pos < len(baseline.token_ids) else None
    m = method_ids[pos] if pos < len(method_ids) else None
    gap = None
    if b is not None and m is not None and pos < len(baseline.top_logprobs):
        top = baseline.top_logprobs[pos]
        if b in top and m in top:
            gap = float(top[b]) - float(top[m])
    numerical = rule.mode == "tie-aware" and gap is not None and gap <= rule.logprob_margin
    return Divergence(pos, b, m, gap, numerical)


@dataclass
class Comparison:
    """Every prompt of a set held to the reference's greedy tokens under one rule."""

    compared: int = 0
    identical: int = 0
    forgiven: list[tuple[str, Divergence]] = field(default_factory=list)  # (prompt id, near-tie the rule forgives)
    failures: list[str] = field(default_factory=list)  # one line per prompt that diverged for real
    gaps: list[tuple[int, float]] = field(default_factory=list)  # (position, gap) of every divergence with a known gap

    @property
    def diverged(self) -> int:
        return len(self.failures)

    def too_forgiving(self, rule: Equivalence, of: int | None = None) -> str | None:
        """Why this many near-ties cannot all be numerical, or None: more than `max_forgiven_share` of
        the prompts (`of`, default those compared) were forgiven (A/A runs forgive a few; a verifier
        bug, many)."""
        total = self.compared if of is None else of
        if rule.mode != "tie-aware" or not total:
            return None
        allowed = rule.max_forgiven_share * total
        if len(self.forgiven) <= allowed:
            return None
        gaps = sorted(d.gap for _, d in self.forgiven if d.gap is not None)
        return (
            f"{len(self.forgiven)} of {total} prompts diverge at near-ties the tie-aware rule would forgive "
            f"(gaps {', '.join(f'{g:.3g}' for g in gaps[:8])}{' ...' if len(gaps) > 8 else ''} nats, margin "
            f"{rule.logprob_margin:g}), more than max_forgiven_share {rule.max_forgiven_share:g} allows "
            f"({allowed:.1f}): honest bf16 near-ties are rare, a verifier that emits the wrong token is not"
        )


def compare_all(
    reference: Mapping[str, GreedyOutput],
    outputs: Mapping[str, Sequence[int]],
    prompts,
    rule: Equivalence,
    decode: Callable[[int], str],
    label: Callable[[object], str],
) -> Comparison:
    """Each prompt's tokens in `outputs` against `reference` (both by prompt id); `label(prompt)` names a
    prompt in a failure line."""
    result = Comparison()
    for prompt in prompts:
        result.compared += 1
        div = compare(reference[prompt.id], outputs[prompt.id], rule)
        if div is not None and div.gap is not None:
            result.gaps.append((div.position, div.gap))
        if div is None:
            result.identical += 1
        elif div.numerical:
            result.forgiven.append((prompt.id, div))
        else:
            result.failures.append(f"{label(prompt)} {div.describe(decode, rule.logprob_margin, rule.mode)}")
    return result
