"""Spec-decode counters -> acceptance length, rate and per-position rates, and how often a method drafted.

vLLM exports monotone counters (`vllm:spec_decode_num_drafts`, `..._num_draft_tokens`,
`..._num_accepted_tokens`, `..._num_accepted_tokens_per_pos`). A measurement is the difference of two
snapshots taken around one batch, so counters from earlier batches or earlier engines in the same
process cancel out.

The counters see only the steps that verified drafts: vLLM's mean acceptance length is that of the steps
that drafted, so a drafter that stops proposing for some requests leaves it where it was. `Drafting` puts the
counters beside the output the same requests gave (Drafting: the share of decode steps that drafted, draft
tokens per output token).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgate.figures import distribution

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

    def _combine(self, other: SpecCounters, sign: int) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + (0,) * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + (0,) * (n - len(other.accepted_per_pos))
        return SpecCounters(
            self.num_drafts + sign * other.num_drafts,
            self.num_draft_tokens + sign * other.num_draft_tokens,
            self.num_accepted_tokens + sign * other.num_accepted_tokens,
            tuple(x + sign * y for x, y in zip(a, b)),
        )

    def __sub__(self, earlier: SpecCounters) -> SpecCounters:
        return self._combine(earlier, -1)

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, +1)

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


@dataclass(frozen=True)
class Drafting:
    """How often a batch's requests drafted: vLLM's counters beside the tokens the requests emitted.

    A request's first token comes from its prefill; every later step of it (a decode step) emits its accepted
    drafts + 1 (vLLM's scheduler: `num_accepted = len(generated) - 1` for a step with drafts, one token for a
    step without). So the decode steps are output tokens - requests - accepted drafts, and the steps that drafted
    are the counters' num_drafts. Where a stop or the cap ends an output inside a step's accepted run, the
    scheduler counts that step's accepted drafts before it trims the tokens after the end (vllm#56101): the
    counters then hold up to k accepted drafts per request that the output does not, and the decode steps read
    that many fewer (cpu-tiny's greedy pass: 2-24 of 208-406 steps per category, docs/traffic-shapes.md). The
    figures are vLLM's counters' view, deterministic where the outputs are; a share is never above 1 (a method
    that drafts at every step reads 1.0). A request preempted and resumed samples a token from its second
    prefill too: counted here as a decode step without drafts (the plain gate preempts none)."""

    num_drafts: int  # steps that verified drafts (the counters')
    num_draft_tokens: int  # draft tokens proposed (the counters')
    num_accepted_tokens: int
    output_tokens: int  # what the requests emitted
    requests: int

    @property
    def decode_steps(self) -> int:
        """Steps after each request's prefill: at least the steps that drafted (the surplus above)."""
        return max(self.num_drafts, self.output_tokens - self.requests - self.num_accepted_tokens)

    @property
    def draft_share(self) -> float | None:
        """The share of decode steps that drafted (None: no decode step)."""
        steps = self.decode_steps
        return self.num_drafts / steps if steps else None

    @property
    def draft_tokens_per_token(self) -> float | None:
        """Draft tokens proposed per output token: what the method's drafting costs the verifier per token it
        gives (a dynamic-speculation policy that drafts fewer tokens in large batches shows here)."""
        return self.num_draft_tokens / self.output_tokens if self.output_tokens else None

    @classmethod
    def of(cls, counters: SpecCounters, output_tokens: int, requests: int) -> Drafting:
        c = counters
        return cls(c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens, output_tokens, requests)

    def record(self) -> dict[str, float]:
        """The figures a baseline file stores (none where they are undefined)."""
        rec = {}
        if (share := self.draft_share) is not None:
            rec[DRAFT_SHARE] = round(share, 6)
        if (per_token := self.draft_tokens_per_token) is not None:
            rec[DRAFT_TOKENS_PER_TOKEN] = round(per_token, 6)
        return rec


DRAFT_SHARE, DRAFT_TOKENS_PER_TOKEN = "draft_share", "draft_tokens_per_token"


@dataclass(frozen=True)
class AcceptanceResult:
    """What one method accepted on one prompt category."""

    counters: SpecCounters
    # histogram[n] = verification steps that emitted n tokens (n = accepted + 1): from vLLM's own
    # per-request spec-decode metrics where the engine gives them ("engine"), else from the streamed
    # outputs ("stream"; each request's first output, the prefill step, left out). A streamed chunk
    # is one step only while the consumer keeps up: vLLM merges DELTA outputs of a lagging consumer
    # (RequestOutputCollector.put), so chunks of more than k + 1 tokens are counted as merged.
    histogram: tuple[int, ...]
    source: str = "stream"
    merged_chunks: int = 0
    # each request's acceptance length and its by output window (specgate.figures.distribution), where the
    # batch's outputs were given
    requests: dict[str, distribution.RequestAcceptance] = field(default_factory=dict)
    window_tokens: int = distribution.WINDOW_TOKENS
    drafting: Drafting | None = None  # where the batch's output tokens were given

    @classmethod
    def from_batch(
        cls,
        counters: SpecCounters,
        tokens_per_step: dict[str, list[int]],
        k: int,
        step_histograms: dict[str, list[int]] | None = None,
        outputs: dict[str, tuple[int, ...]] | None = None,
        step_series: dict[str, list[int]] | None = None,
        window_tokens: int = distribution.WINDOW_TOKENS,
        emitted: tuple[int, int] | None = None,
    ) -> AcceptanceResult:
        """`outputs` (prompt id -> token ids) given, each request's figures too (k > 0: a method's); `emitted`
        (output tokens, requests) of the batch, or of `outputs` where they are given, how often it drafted."""
        if emitted is None and outputs is not None:
            emitted = (sum(len(ids) for ids in outputs.values()), len(outputs))
        drafting = Drafting.of(counters, *emitted) if emitted is not None and k else None
        per_request = {}
        if outputs and k:
            per_request = distribution.requests(
                outputs, tokens_per_step, step_histograms or {}, step_series or {}, window_tokens
            )
        hist = [0] * (k + 2)
        if step_histograms:  # index j = accepted draft tokens in a step, so j + 1 tokens emitted
            for counts in step_histograms.values():
                for j, n in enumerate(counts):
                    hist[min(j + 1, k + 1)] += n
            return cls(counters, tuple(hist), "engine", 0, per_request, window_tokens, drafting)
        merged = 0
        for steps in tokens_per_step.values():
            for n in steps[1:]:
                merged += n > k + 1
                hist[min(n, k + 1)] += 1
        return cls(counters, tuple(hist), "stream", merged, per_request, window_tokens, drafting)

    def record(self) -> dict[str, float | list[float]]:
        """The values stored in a baseline file."""
        c = self.counters
        rec: dict[str, float | list[float]] = {
            "num_drafts": c.num_drafts,
            "tokens_per_step_histogram": list(self.histogram),
        }
        if self.merged_chunks:  # the histogram above is not per step: said, and kept apart from clean ones
            rec["merged_stream_chunks"] = self.merged_chunks
        if c.mean_acceptance_length is not None:
            rec["mean_acceptance_length"] = round(c.mean_acceptance_length, 6)
            rec["acceptance_rate"] = round(c.acceptance_rate or 0.0, 6)
            rec["per_position"] = [round(r, 6) for r in c.per_position_rates]
        if self.drafting is not None:
            rec.update(self.drafting.record())
        if self.requests:  # [length, window 0, window 1, ...] per prompt; the category's windows together
            rec["window_tokens"] = self.window_tokens
            rec["windows"] = list(distribution.windows(self.requests))
            # where they came from (the share vLLM gave, the rest streamed): figures of other sources do not compare
            rec.update(distribution.sources(self.requests))
            rec["requests"] = {pid: r.record() for pid, r in sorted(self.requests.items())}
        return rec
