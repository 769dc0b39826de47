"""Closed-loop load: exactly C requests in flight, each streamed; per-request and per-run latencies.

A `TokenStream` is anything that, given a prompt's token ids, yields the new token ids each streamed
step brought (backend.StreamingBackend.stream_tokens: the in-process engine or an OpenAI-compatible
server). The same driver measures both, and keeps each request's tokens: the load gate compares them
with the baseline engine's at every concurrency level (checks/load.py), at no cost to the trial.

Closed loop: C workers each send a request, wait for its last token and send the next, until the
trial's requests are used up. Throughput is counted over the steady window only: from the C-th
completion (the first wave, which all started together, is warm-up) to the completion that leaves
fewer than C requests in flight (the tail).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specgate.figures.stats import percentile


class TokenStream(Protocol):
    def __call__(self, token_ids: Sequence[int], max_tokens: int, tag: str) -> AsyncIterator[Sequence[int]]: ...


@dataclass
class RequestTrace:
    """One request as the client saw it: when it was sent and when each streamed chunk arrived."""

    index: int
    prompt_id: str
    submitted: float
    arrivals: list[tuple[float, int]] = field(default_factory=list)  # (time, tokens in this chunk)
    token_ids: list[int] = field(default_factory=list)  # what it emitted, in order

    @property
    def output_tokens(self) -> int:
        return sum(n for _, n in self.arrivals)

    @property
    def finished(self) -> float:
        return self.arrivals[-1][0] if self.arrivals else self.submitted

    @property
    def ttft(self) -> float | None:
        return self.arrivals[0][0] - self.submitted if self.arrivals else None

    @property
    def e2e(self) -> float:
        return self.finished - self.submitted

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first (vLLM's benchmark definition)."""
        if self.output_tokens < 2:
            return None
        return (self.finished - self.arrivals[0][0]) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        """Gaps between streamed chunks. With speculation one chunk carries accepted + 1 tokens."""
        times = [t for t, _ in self.arrivals]
        return [b - a for a, b in zip(times, times[1:])]


@dataclass
class LoadRun:
    """One closed-loop trial at one concurrency."""

    concurrency: int
    requests: list[RequestTrace]
    started: float
    ended: float
    interrupted: bool = False  # the engine stopped before the trial ended: its requests possibly cut short

    @property
    def window(self) -> tuple[float, float]:
        """(start, end) of the steady window: C requests in flight all along."""
        done = sorted(r.finished for r in self.requests)
        c = self.concurrency
        if len(done) < 2 * c:
            raise ValueError(
                f"a closed loop at C={c} needs at least {2 * c} requests for a steady window, got {len(done)}"
            )
        return done[c - 1], done[len(done) - c]

    @property
    def window_tokens(self) -> int:
        start, end = self.window
        return sum(n for r in self.requests for t, n in r.arrivals if start < t <= end)

    @property
    def throughput(self) -> float:
        """Output tokens per second over the steady window."""
        start, end = self.window
        if end <= start:
            raise ValueError(f"empty steady window at C={self.concurrency}: every request finished at once")
        return self.window_tokens / (end - start)

    @property
    def measured(self) -> list[RequestTrace]:
        """Requests for latency statistics: all but the first wave (warm-up)."""
        return [r for r in self.requests if r.index >= self.concurrency]

    def latency_summary(self) -> dict[str, float]:
        """Percentiles in milliseconds, user tokens/s (median per request), output tokens."""
        reqs = self.measured
        ttft = [r.ttft for r in reqs if r.ttft is not None]
        tpot = [r.tpot for r in reqs if r.tpot is not None]
        itl = [gap for r in reqs for gap in r.itls]
        e2e = [r.e2e for r in reqs]
        out: dict[str, float] = {
            "requests": float(len(reqs)),
            "output_tokens": float(sum(r.output_tokens for r in reqs)),
        }
        for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2e", e2e)):
            for q in (50, 90, 95, 99):
                out[f"{name}_p{q}_ms"] = percentile(values, q) * 1000 if values else float("nan")
        out["user_tok_s_p50"] = 1.0 / percentile(tpot, 50) if tpot else float("nan")
        return out


def trial_prompts(prompts: Sequence, concurrency: int, num_requests: int, seed: int) -> list:
    """The requests of every trial at this concurrency: the categories in turn (each category's
    prompts in a seeded order), so a trial mixes them evenly. Every trial and every engine sends the
    same list: the trial-to-trial spread of a throughput ratio is then timing noise, not a
    different mix of easy and hard prompts."""
    rng = random.Random(f"{seed}/{concurrency}")
    by_category: dict[str, list] = {}
    for p in prompts:
        by_category.setdefault(getattr(p, "category", ""), []).append(p)
    queues = [rng.sample(group, len(group)) for group in by_category.values()]
    order: list = []
    while len(order) < num_requests:
        for queue in queues:
            order.append(queue[(len(order) // len(queues)) % len(queue)])
    return order[:num_requests]


async def closed_loop(
    stream: TokenStream,
    prompts: Sequence,
    concurrency: int,
    max_tokens: int,
    clock: Callable[[], float] = time.perf_counter,
    traces: list[RequestTrace] | None = None,
) -> LoadRun:
    """Send `prompts` (objects with .id and .token_ids) keeping exactly `concurrency` in flight. `traces`, when
    given, is filled as the requests go: what an interrupted trial streamed stays with the caller."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    pending = iter(enumerate(prompts))
    traces = [] if traces is None else traces

    async def worker() -> None:
        for index, prompt in pending:  # one shared iterator: each worker takes the next request
            trace = RequestTrace(index, prompt.id, clock())
            traces.append(trace)
            async for new in stream(prompt.token_ids, max_tokens, f"load-{prompt.id}"):
                trace.arrivals.append((clock(), len(new)))
                trace.token_ids.extend(new)

    started = clock()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return LoadRun(concurrency, sorted(traces, key=lambda t: t.index), started, clock())
