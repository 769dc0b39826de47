"""The engine seam: what the gates need from an inference engine, in one interface.

    Backend                the interface (a Protocol): every member the gate reads or calls on an
                           engine, each saying what it returns and how an engine declines
                           (NotMeasurable, None or '') what it cannot do
    StreamingBackend       run_batch / closed_loop / run_requests written once over `steps()` (an async
                           iterator of each engine step's new tokens) and `complete()`, with the declining
                           defaults of the rest; engine.Engine (vLLM's AsyncLLM in this process) and
                           endpoint.Endpoint (a running server) build on it
    specgate.testing.FakeEngine   a scripted engine for tests without vLLM

What the protocol's members take and return is public with it: BatchResult, RequestsResult, ShutdownReport
(here), and from the figures the gate computes with: SpecCounters (spec-decode counters; `-` gives a
measurement's own), GreedyOutput (an output's tokens and top logprobs), LoadRun and RequestTrace (a closed-loop
trial and each request's timed chunks), Reply and Completion (what a request with its own parameters gave),
KvStats (the scheduler's KV-cache counters) and MemoryReading (an engine's memory).

`BootEngine` is how an engine comes to life: `boot(profile, method, root, log_path) -> Backend`;
engine.boot_engine is the real one, and the pytest hook `pytest_specgate_boot_engine` lets a
conftest supply another (see specgate/hooks.py: which attributes of the profile and the method it may read).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from specgate.errors import NotMeasurable
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Completion, Reply
from specgate.figures.equivalence import GreedyOutput
from specgate.figures.kvstats import KvStats
from specgate.figures.load import LoadRun, RequestTrace, closed_loop
from specgate.figures.memory import MemoryReading
from specgate.profile import Method, Profile

# the public surface (specgate.PUBLIC): the protocol, and what its members take and return
__all__ = [
    "Backend",
    "BatchResult",
    "Completion",
    "GreedyOutput",
    "KvStats",
    "LoadRun",
    "MemoryReading",
    "Reply",
    "RequestTrace",
    "RequestsResult",
    "ShutdownReport",
    "SpecCounters",
]

GIB = 1024**3
# After shutdown the engine's processes must be gone and this process's resident memory back within
# this much of its pre-boot level. (The machine-wide "available" figure is reported too, but other
# processes move it.) On cpu-tiny an engine's processes hold ~2-3 GiB; what the parent keeps after
# shutdown (allocator caches, tokenizer) measured < 0.1 GiB; a leaked engine object keeps far more.
RELEASE_SLACK_BYTES = int(0.25 * GIB)


@dataclass(frozen=True)
class BatchResult:
    outputs: dict[str, GreedyOutput]
    tokens_per_step: dict[str, list[int]]  # per prompt: tokens each streamed chunk brought, in order
    counters: SpecCounters  # spec-decode counters of this batch alone
    # per prompt: vLLM's own per-request histogram of accepted draft tokens per step, where it gives one
    step_histograms: dict[str, list[int]] = field(default_factory=dict)
    # per prompt: vLLM's accepted draft tokens of each verification step with drafts, in order, where it gives them
    step_series: dict[str, list[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class RequestsResult:
    replies: dict  # tag -> specgate.figures.completions.Reply
    counters: SpecCounters  # spec-decode counters of this batch alone


@dataclass
class ShutdownReport:
    method: str
    shutdown_s: float
    leftover_pids: list[int]
    rss_before_boot: int  # this (pytest) process
    rss_after_shutdown: int
    footprint: int = 0  # this process + the engine's processes, just before shutdown
    available_change: int = 0  # machine-wide available memory, after shutdown minus before boot

    @property
    def memory_not_returned(self) -> int:
        return max(0, self.rss_after_shutdown - self.rss_before_boot)

    @property
    def released(self) -> bool:
        return not self.leftover_pids and self.memory_not_returned <= RELEASE_SLACK_BYTES

    def describe(self) -> str:
        return (
            f"engine '{self.method}' (footprint {self.footprint / GIB:.2f} GiB) shut down in {self.shutdown_s:.1f} s; "
            f"processes left: {self.leftover_pids or 'none'}; memory this process did not give back: "
            f"{self.memory_not_returned / GIB:.2f} GiB (allowed {RELEASE_SLACK_BYTES / GIB:.2f} GiB); "
            f"machine-wide available memory changed by {self.available_change / GIB:+.2f} GiB"
        )


@runtime_checkable
class Backend(Protocol):
    """A live engine for one method of the profile: every member the gate reads or calls on it, and
    nothing else (an engine written to this protocol runs every gate and scenario: tests/unit/test_backend.py).

    Where an engine cannot do something the protocol says how it declines: a measurement it cannot take
    raises specgate.errors.NotMeasurable (the tests that need it skip, quoting the message), a figure it
    does not know is None, a finding it cannot make is ''. Any other exception fails the tests that
    needed it; specgate.errors.EngineDied (or EngineStalled) says the engine is gone: its method's later
    tests say so in a line instead of asking again. `prompts` are specgate's tokenized prompts: `.id`,
    `.category` and `.token_ids` (ints) each."""

    alive: bool  # False once shut down: the host boots the method's engine again when it is asked for it
    boot_s: float  # the boot's wall time in seconds (the summary)
    runner: str  # the worker's model runner ('v1', 'v2') for the summary; '' when the engine does not say
    # What the last closed_loop streamed (a RequestTrace per request), kept when the trial raised on
    # the way (EngineDied): the load gate reports what the requests emitted before the engine stopped
    last_traces: Sequence[RequestTrace]

    @property
    def method_name(self) -> str:
        """The profile method this engine serves (`Method.name`; 'baseline' for the engine without speculation)."""

    @property
    def longest_idle_s(self) -> float:
        """The longest wait on this engine without a token or a log line, in seconds (evidence for the profile's
        stall_timeout_s, in the summary); 0.0 where nothing watched it."""

    def run_batch(
        self,
        prompts,
        max_tokens: int,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ) -> BatchResult:
        """Continuations of `prompts`, submitted at once: greedy, or sampled at `temperature` with `seed`
        (one per request); under a JSON `schema` when given (structured outputs); with the top
        `top_logprobs` logprobs of each token when > 0. Per prompt the tokens each step emitted, the
        spec-decode counters the batch moved, and per-request step figures where the engine gives them."""

    def run_requests(self, requests, what: str = "the requests scenario", limit: int | None = None) -> RequestsResult:
        """`requests`, (tag, prompt token ids, SamplingParams keywords, stream) each, sent at once (at most
        `limit` in flight when given): each one's Reply by tag (a request the
        engine refuses is a Reply with `refused`, in the engine's words) and the spec-decode counters the
        batch moved. `what` names the wait in messages. NotMeasurable: the engine cannot be sent requests
        with their own parameters (the requests and edges scenarios skip)."""

    def closed_loop(
        self, prompts, concurrency: int, max_tokens: int, temperature: float = 0.0
    ) -> tuple[LoadRun, SpecCounters]:
        """One closed-loop trial (exactly `concurrency` requests in flight, the next sent as one finishes,
        every streamed step's arrival timed) and the spec-decode counters it moved."""

    def kv_stats(self) -> KvStats:
        """The scheduler's KV-cache figures now (preemptions, prefix-cache queries and hits: counters; usage);
        NotMeasurable when the engine does not show them (the preemption and prefix-soak scenarios skip)."""

    def reset_prefix_cache(self) -> None:
        """Empty the prefix cache; NotMeasurable when this engine cannot be told to (the prefix soak skips;
        the edges scenario then does not hold its split prefills to the same prompts prefilled whole)."""

    def kv_block_size(self) -> int | None:
        """Tokens per KV-cache block as the engine was configured; None when it does not say (the edges
        scenario then takes the profile's block_size, else the platform's default)."""

    def token_budget(self) -> int | None:
        """The scheduler's tokens per step (max_num_batched_tokens); None when it does not say (the edges
        scenario then sends no split-prefill class, and seeded requests on CPU are limited as for 2048)."""

    def sampling_broken(self) -> str:
        """Why this engine's sampled verification is known broken (the probe's finding for
        vllm-project/vllm#55005), or '' (sound, or nothing known)."""

    def sampling_repaired(self) -> AbstractContextManager[str]:
        """A context manager the requests scenario enters where sampling_broken() said something: while it is
        active the engine samples with the repair in its workers; it yields the finding it repaired, or ''
        where it put no repair in (an engine that cannot repair yields '': its samples are then judged as
        shipped)."""

    def timed_steps(self, work: Callable[[], Any]) -> dict[str, float] | None:
        """Run `work()` with timers in the worker around the target's forward pass and the drafter: seconds
        and calls of each ({'forward_s', 'forward_calls', 'propose_s', 'propose_calls'}); None when the
        engine has no such timers (it need not run `work()` then: the speedup gate's model check is not made)."""

    def memory_reading(self) -> MemoryReading:
        """The live engine's memory: KV capacity, its processes' peak memory, the drafter's own weights;
        NotMeasurable when it cannot be seen (the memory gate skips)."""

    def shutdown(self) -> ShutdownReport | None:
        """Stop the engine: a report of what came back (processes gone, memory returned: the lifecycle
        gate), or None when there was nothing of this process's to stop. Called when the gate is done with
        the engine (at the latest at the end of the run); `alive` is False after it."""


# boot(profile, method, root, log_path) -> a live engine; raises specgate.errors.EngineBootError when it will not start
BootEngine = Callable[[Profile, Method, Path, Path], Backend]


class StreamingBackend:
    """A Backend's run_batch, closed_loop and run_requests over `steps()` and `complete()`, and the
    declining defaults of the rest (NotMeasurable, None, ''). Subclasses provide `method_name`, `run(coro)`
    (run on their event loop), `counters()` (the spec-decode counters now: monotone, so a measurement is a
    difference), `steps(...)`, an async iterator of (new token ids, top-logprob dicts) per engine step, and
    `complete(...)` for run_requests; `take_step_histograms` / `take_step_series` hand run_batch vLLM's
    per-request figures where the engine keeps them."""

    alive: bool  # subclasses (dataclasses) give the values
    boot_s: float
    runner: str = ""
    last_traces: Sequence[RequestTrace] = ()  # closed_loop keeps a list of its own
    watch = None  # a subclass's specgate.lifetime.watchdog.Watch, where one watches its waits

    @property
    def longest_idle_s(self) -> float:
        return self.watch.longest_idle_s if self.watch is not None else 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def run(self, coro, what: str = ""):
        """The coroutine's result, run on the backend's loop; `what` names the wait in messages."""
        raise NotImplementedError

    def counters(self) -> SpecCounters:
        raise NotImplementedError

    def steps(
        self,
        token_ids,
        max_tokens: int,
        tag: str,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ):
        raise NotImplementedError

    def kv_stats(self):
        raise NotMeasurable(f"engine '{self.method_name}' does not show its KV-cache counters to specgate")

    def reset_prefix_cache(self) -> None:
        raise NotMeasurable(f"engine '{self.method_name}' cannot be told to empty its prefix cache")

    def kv_block_size(self) -> int | None:
        return None

    def token_budget(self) -> int | None:
        return None

    def sampling_broken(self) -> str:
        return ""

    @contextlib.contextmanager
    def sampling_repaired(self) -> Iterator[str]:
        yield ""

    def timed_steps(self, work):
        work()
        return None

    def take_step_histograms(self, tags) -> dict[str, list[int]]:
        """vLLM's per-request accepted-tokens histograms of finished requests (none by default)."""
        return {}

    def take_step_series(self, tags) -> dict[str, list[int]]:
        """vLLM's accepted draft tokens of each verification step, in order, of finished requests (none by
        default)."""
        return {}

    def memory_reading(self):
        raise NotMeasurable(f"the memory of engine '{self.method_name}' is not visible to specgate")

    def shutdown(self) -> ShutdownReport | None:
        self.alive = False
        return None

    async def stream_tokens(self, token_ids, max_tokens: int, tag: str, temperature: float = 0.0):
        """For the load generator: the new token ids each streamed step brought."""
        async for new, _ in self.steps(token_ids, max_tokens, tag, temperature=temperature):
            if new:
                yield new

    def run_batch(
        self,
        prompts,
        max_tokens: int,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ) -> BatchResult:
        """Continuations of `prompts` (greedy, or sampled with a seed per request; under a JSON schema
        when given), all submitted at once, streamed step by step: how many tokens each verification
        step emitted (accepted + 1), and the spec-decode counters read before and after, so the
        batch's own numbers are the difference."""
        tokens: dict[str, list[int]] = {p.id: [] for p in prompts}
        tops: dict[str, list[dict[int, float]]] = {p.id: [] for p in prompts}
        steps: dict[str, list[int]] = {p.id: [] for p in prompts}
        sampling = {"temperature": temperature, "seed": seed} if temperature else {}
        if schema is not None:
            sampling["schema"] = schema

        async def one(p) -> None:
            async for new, top in self.steps(p.token_ids, max_tokens, p.id, top_logprobs, **sampling):
                if new:
                    steps[p.id].append(len(new))
                    tokens[p.id].extend(new)
                    tops[p.id].extend(top)

        async def batch() -> None:
            await asyncio.gather(*(one(p) for p in prompts))

        before = self.counters()
        self.run(batch(), f"generating a batch of {len(prompts)} prompts")
        outputs = {pid: GreedyOutput(tuple(tokens[pid]), tuple(tops[pid])) for pid in tokens}
        tags = list(tokens)
        return BatchResult(
            outputs, steps, self.counters() - before, self.take_step_histograms(tags), self.take_step_series(tags)
        )

    async def complete(self, token_ids, params: dict, tag: str, stream: bool = True):
        """One request with these SamplingParams keywords -> specgate.figures.completions.Reply."""
        raise NotMeasurable(f"engine '{self.method_name}' cannot be sent requests with their own parameters")

    def run_requests(self, requests, what: str = "the requests scenario", limit: int | None = None) -> RequestsResult:
        """`requests` ((tag, token ids, params, stream) each), sent at once (at most `limit` in flight):
        each one's Reply by tag, and the spec-decode counters the batch moved."""
        gate = asyncio.Semaphore(limit) if limit else None

        async def one(tag, ids, params, stream):
            if gate is None:
                return await self.complete(ids, params, tag, stream)
            async with gate:
                return await self.complete(ids, params, tag, stream)

        async def batch():
            return await asyncio.gather(*(one(*r) for r in requests))

        before = self.counters()
        replies = self.run(batch(), f"{what}: {len(requests)} requests")
        return RequestsResult(dict(zip([r[0] for r in requests], replies)), self.counters() - before)

    def closed_loop(self, prompts, concurrency: int, max_tokens: int, temperature: float = 0.0):
        """One closed-loop trial and the spec-decode counters it moved."""

        async def stream(token_ids, max_new, tag):
            async for new in self.stream_tokens(token_ids, max_new, tag, temperature=temperature):
                yield new

        before = self.counters()
        self.last_traces: list = []  # what the trial streamed, kept should the engine stop on the way
        trial = closed_loop(stream, prompts, concurrency, max_tokens, traces=self.last_traces)
        run = self.run(trial, f"a closed-loop trial at C={concurrency}")
        return run, self.counters() - before
