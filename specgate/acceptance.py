"""Spec-decode counters -> acceptance length, rate and per-position rates.

vLLM exports monotone counters (`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
`..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`). A measurement is the difference of two
snapshots taken around one batch, so counters from earlier batches or earlier engines in the same
process cancel out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COUNTER_NAMES = {
    "vllm:spec_decode_num_drafts": "num_drafts",
    "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"


@dataclass(frozen=True)
class SpecCounters:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: tuple[int, ...] = field(default_factory=tuple)

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(earlier.accepted_per_pos))
        a = self.accepted_per_pos + (0,) * (n - len(self.accepted_per_pos))
        b = earlier.accepted_per_pos + (0,) * (n - len(earlier.accepted_per_pos))
        return SpecCounters(
            self.num_drafts - earlier.num_drafts,
            self.num_draft_tokens - earlier.num_draft_tokens,
            self.num_accepted_tokens - earlier.num_accepted_tokens,
            tuple(x - y for x, y in zip(a, b)),
        )

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per verification step: 1 (the target's own token) + accepted per draft."""
        return None if self.num_drafts == 0 else 1.0 + self.num_accepted_tokens / self.num_drafts

    @property
    def acceptance_rate(self) -> float | None:
        return None if self.num_draft_tokens == 0 else self.num_accepted_tokens / self.num_draft_tokens

    @property
    def per_position_rates(self) -> tuple[float, ...]:
        """Share of drafts whose token at position i was accepted (non-increasing in i)."""
        if self.num_drafts == 0:
            return ()
        return tuple(n / self.num_drafts for n in self.accepted_per_pos)


def counters_from_metrics(metrics) -> SpecCounters:
    """Sum the spec-decode counters over every engine in a `get_metrics()` snapshot (data parallel)."""
    totals = dict.fromkeys(COUNTER_NAMES.values(), 0)
    per_pos: list[int] = []
    for m in metrics:
        if m.name in COUNTER_NAMES:
            totals[COUNTER_NAMES[m.name]] += int(m.value)
        elif m.name == PER_POSITION:
            values = list(m.values)
            per_pos += [0] * (len(values) - len(per_pos))
            for i, v in enumerate(values):
                per_pos[i] += int(v)
    return SpecCounters(accepted_per_pos=tuple(per_pos), **totals)
