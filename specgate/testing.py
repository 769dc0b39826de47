"""A scripted engine for testing gate logic without vLLM (as httpx ships a mock transport).

    FakeEngine     a backend.Backend whose outputs, counters, memory and speed follow a FakeScript
    FakeBoot       the boot function: `GateSession(plan, selection, boot=FakeBoot(script))`
    FakeScript     what each method's engine does: {"machine": {...}, "methods": {NAME: {...}}}

As a pytest plugin (`pytest -p specgate.testing`) it answers `pytest_specgate_boot_engine` with fake
engines scripted by the JSON in $SPECGATE_FAKE, so a whole gate run (ordering, verdicts, baselines,
reports) can be exercised in a second of CPU. Defaults: every engine emits tokens 10..14 for every
prompt (up to max_tokens: 10..14 again and again; with the machine's `echo`, the prompt's own tokens),
two tokens per speculative step; a plain step takes 10 ms of virtual time, a speculative step `step_cost`
(1.2) plain steps, so a healthy method's speedup is 2 / 1.2 = 1.67. Requests with their own parameters
(run_requests: the requests and edges scenarios) are decoded by specgate.engines.scripted under vLLM's
rules, with the target's tokenizer; the KV cache counts preemptions (under num_gpu_blocks_override) and
prefix-cache hits by whole blocks.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specgate.backend import BatchResult, RequestsResult, ShutdownReport
from specgate.engines.scripted import ScriptedModel
from specgate.errors import EngineBootError, NotMeasurable
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Completion, Reply
from specgate.figures.equivalence import GreedyOutput
from specgate.figures.kvstats import KvStats
from specgate.figures.load import LoadRun, RequestTrace
from specgate.figures.memory import MemoryReading

__all__ = ["FakeBoot", "FakeEngine", "FakeScript", "fake_session"]  # the public surface (specgate.PUBLIC)

SCRIPT_ENV = "SPECGATE_FAKE"
MIB = 1024**2
TOKENS = (10, 11, 12, 13, 14)
WRONG_TOKEN = 99


@dataclass(frozen=True)
class FakeMethod:
    """How one method's fake engine behaves."""

    diverge_at: int | None = None  # emit `wrong_token` at this output position (a broken verifier)
    wrong_token: int = WRONG_TOKEN  # 98 is in the baseline's top-k (gap 2.9 nats), 99 is not
    boot_error: str | None = None  # refuse to boot; the engine's own one-line error
    accepted: float = 1.0  # draft tokens accepted per verification step (a worse drafter: less)
    step_cost: float = 1.2  # a speculative step's time in plain steps (raise it: a slower proposer)
    drafter_mib: float = 0.0  # weights the worker reports for the drafter (None for model-free)
    drafter_shared: tuple[str, ...] = ()  # the drafter's tensors the worker reports as the target's
    extra_kv_tokens_lost: int = 0
    runner: str = "v1"  # the model runner the engine reports ('v1' / 'v2')
    timers: bool = True  # whether the runner offers step timers (the model check's step costs)
    draft_call_s: float | None = None  # one drafting call as the worker's timer sees it (default 1 ms per draft token)
    chunk_steps: int = 1  # engine steps per streamed chunk (> 1: a lagging consumer, merged DELTAs)
    # Stops producing at its first batch or trial: its "engine core" (a real, idle child process) never
    # answers, so the watchdog's deadline (the profile's stall_timeout_s) has to end the wait.
    stalls: bool = False
    # > 0: closed loops after this many (the warm-up is the first) stop producing half-way, as `stalls` does
    stalls_after: int = 0
    # In closed-loop trials at this concurrency and above (0: never), a bug only large batches meet: outputs
    # wrong at `large_diverge_at` and/or `large_accepted` drafts accepted per step instead of `accepted`.
    large_from: int = 0
    large_diverge_at: int | None = None
    large_accepted: float | None = None
    sampling_probe: str = ""  # what sampling_broken() says (the repair then changes nothing: the fake samples soundly)


@dataclass(frozen=True)
class FakeMachine:
    step_s: float = 0.010  # one plain engine step
    speed: float = 1.0  # another machine: every step this many times faster
    disturbed: bool = False  # the baseline engine runs at half speed once a second engine is up
    # Every output is its prompt again from its start (special tokens left out), not 10..14: text whose stop
    # strings are unique, as the requests scenario's matrix needs (and penalties that change it: the prompt's own
    # tokens are the model's first choice, two tokens it does not hold the next ones; ScriptedModel)
    echo: bool = False
    block_size: int = 128  # KV-cache tokens per block (vLLM's CPU default), where the engine kwargs set none
    token_budget: int | None = 2048  # the scheduler's tokens per step, where the engine kwargs set none


@dataclass(frozen=True)
class FakeScript:
    machine: FakeMachine = field(default_factory=FakeMachine)
    methods: dict[str, FakeMethod] = field(default_factory=dict)

    def method(self, name: str) -> FakeMethod:
        return self.methods.get(name, FakeMethod())

    @classmethod
    def from_dict(cls, data: dict) -> FakeScript:
        return cls(
            FakeMachine(**data.get("machine", {})), {n: FakeMethod(**m) for n, m in data.get("methods", {}).items()}
        )

    @classmethod
    def from_env(cls) -> FakeScript:
        return cls.from_dict(json.loads(os.environ.get(SCRIPT_ENV) or "{}"))


class FakeEngine:
    """A backend.Backend in virtual time; see the module docstring for what it emits."""

    def __init__(
        self,
        method,
        script: FakeScript,
        boots: list[str],
        profile=None,
        log_path: Path | None = None,
        root: Path | None = None,
    ):
        self.method, self.script, self.boots = method, script, boots
        self.behaviour = script.method(method.name)
        self.alive, self.boot_s = True, 0.01
        self.k = method.num_speculative_tokens
        self.runner = self.behaviour.runner
        self.profile, self.log_path, self.root = profile, log_path, root
        self.kwargs = {**(profile.engine_kwargs if profile is not None else {}), **method.engine_kwargs}
        self.core = self._start_core() if self.behaviour.stalls or self.behaviour.stalls_after else None
        self.loops = 0  # closed loops run
        self.last_traces: list[RequestTrace] = []
        self.preemptions = self.prefix_queries = self.prefix_hits = self._requests = 0
        self.cached: set[tuple[int, ...]] = set()  # the prefix cache: every whole-block prefix it holds
        self._lm: ScriptedModel | None = None
        self._echoes: dict[tuple[int, ...], tuple[int, ...]] = {}

    def _start_core(self):
        """A real process standing in for the engine core that stops answering."""
        import subprocess
        import sys

        from specgate.lifetime.watchdog import python_stacks_env

        stacks = Path(self.log_path).with_suffix(".stacks")
        env = {**os.environ, **python_stacks_env(stacks)}
        return subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"], env=env)

    def _stall(self, what: str):
        """Wait on the core that never answers, under the profile's stall_timeout_s, as Engine.run does."""
        import asyncio

        from specgate.engines.eventloop import EventLoopThread
        from specgate.errors import EngineStalled
        from specgate.lifetime.watchdog import Overdue, Watch, stop_overdue

        loop, watch = EventLoopThread(), Watch(self.profile.stall_timeout_s, None, self.log_path)
        try:
            loop.run(asyncio.sleep(3600), watch, what)
        except Overdue as over:
            message = stop_overdue(
                over,
                f"the engine for method '{self.method.name}'",
                {self.core.pid: "fake EngineCore"},
                Path(self.log_path).with_suffix(".stacks"),
                watch.stall_s,
                None,
                str(self.profile.path),
            )
            raise EngineStalled(
                message, self.method.name, f"no progress for {over.idle_s:.0f} s while {what}"
            ) from None
        finally:
            loop.close()

    @property
    def method_name(self) -> str:
        return self.method.name

    @property
    def longest_idle_s(self) -> float:
        return 0.0  # virtual time: no wait is watched

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def counters(self) -> SpecCounters:
        return SpecCounters()

    def _counters(self, steps: int, accepted: float | None = None) -> SpecCounters:
        """Every step drafts k tokens and accepts `accepted` of them, front first."""
        drafts = steps if self.k else 0
        accepted = self.behaviour.accepted if accepted is None else accepted
        per_pos = tuple(round(drafts * min(1.0, max(0.0, accepted - i))) for i in range(self.k))
        return SpecCounters(drafts, drafts * self.k, sum(per_pos), per_pos)

    def _output(self, max_tokens: int, diverge_at: int | None, prompt=()) -> list[int]:
        """The tokens `prompt` gets: 10..14 over and over, up to max_tokens (at least the five); with `echo`
        the prompt's own, up to max_tokens."""
        first = self._first(prompt)
        n = max_tokens if self.script.machine.echo else max(max_tokens, len(TOKENS))
        ids = [first[i % len(first)] for i in range(n)]
        if diverge_at is not None and diverge_at < len(ids):
            ids[diverge_at] = self.behaviour.wrong_token
        return ids

    def run_batch(
        self,
        prompts,
        max_tokens: int,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ) -> BatchResult:
        if self.behaviour.stalls:
            self._stall(f"generating a batch of {len(prompts)} prompts (engine '{self.method.name}')")
        self._through_kv_cache(prompts, max_tokens)
        out, steps = {}, {}
        for p in prompts:
            ids = self._output(max_tokens, self.behaviour.diverge_at, p.token_ids)
            tops = tuple({t: -0.1, 98: -3.0} for t in ids) if top_logprobs else ()
            if top_logprobs and self.script.machine.echo:
                model = self._model()
                tops = tuple(model.top(model.candidates(p.token_ids, i), top_logprobs, t) for i, t in enumerate(ids))
            out[p.id] = GreedyOutput(tuple(ids), tops)
            steps[p.id] = [1, 2, 2]
        return BatchResult(out, steps, self._counters(2 * len(prompts)))

    def closed_loop(self, prompts, concurrency: int, max_tokens: int, temperature: float = 0.0):
        if self.behaviour.stalls:
            self._stall(f"a closed-loop trial at C={concurrency} (engine '{self.method.name}')")
        machine = self.script.machine
        per_step = 2 if self.k else 1
        step = machine.step_s * (self.behaviour.step_cost if self.k else 1.0) / machine.speed
        if machine.disturbed and not self.k and len(self.boots) > 1:
            step *= 2
        b = self.behaviour
        large = bool(b.large_from) and concurrency >= b.large_from
        diverge_at = b.large_diverge_at if large and b.large_diverge_at is not None else b.diverge_at
        lanes, traces, steps = [0.0] * concurrency, [], 0
        for i, p in enumerate(prompts):
            output = self._output(max_tokens, diverge_at, p.token_ids)[:max_tokens]
            lane = min(range(concurrency), key=lambda j: lanes[j])
            t = lanes[lane]
            trace = RequestTrace(i, p.id, t)
            emitted = 0
            while emitted < max_tokens:
                t += step * b.chunk_steps
                n = min(per_step * b.chunk_steps, max_tokens - emitted)
                trace.arrivals.append((t, n))
                trace.token_ids.extend(output[emitted : emitted + n])
                emitted += n
                steps += b.chunk_steps
            lanes[lane] = t
            traces.append(trace)
        self.loops += 1
        if b.stalls_after and self.loops > b.stalls_after:
            self.last_traces = traces[: len(traces) // 2]  # what it streamed before it stopped
            self._stall(f"a closed-loop trial at C={concurrency} (engine '{self.method.name}')")
        accepted = b.large_accepted if large else None
        return LoadRun(concurrency, traces, 0.0, max(lanes)), self._counters(steps, accepted)

    # -- requests with their own parameters (the requests and edges scenarios) ---------------------------
    REFUSAL = "The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."

    def _model(self) -> ScriptedModel:
        """The model run_requests decodes with (echo's tokens too): the profile target's tokenizer, loaded once."""
        if self._lm is None:
            if self.profile is None or self.root is None:
                raise NotMeasurable(f"fake engine '{self.method.name}' has no profile and root to find a tokenizer in")
            from transformers import AutoTokenizer

            from specgate.models import resolve

            tokenizer = AutoTokenizer.from_pretrained(resolve(self.profile.target, self.root))
            self._lm = ScriptedModel(tokenizer, lambda prompt, i: (first := self._first(prompt))[i % len(first)])
        return self._lm

    def _first(self, prompt) -> tuple[int, ...]:
        """The tokens greedy decoding emits for `prompt`, cycling: 10..14, or with `echo` the prompt's own but its
        special tokens (its BOS)."""
        if not self.script.machine.echo:
            return TOKENS
        key = tuple(prompt)
        if key not in self._echoes:
            self._echoes[key] = tuple(t for t in key if t not in self._model().special) or TOKENS
        return self._echoes[key]

    def run_requests(self, requests, what: str = "the requests scenario", limit: int | None = None) -> RequestsResult:
        """Each request decoded by ScriptedModel under its parameters; on a speculative engine min_p (at T > 0) and
        logit_bias are refused, as vLLM refuses them. Steps: the prefill's token, then 1 + `accepted` tokens a
        step; vLLM's per-request figures (accepted, drafted, steps) add up to the counters."""
        if self.behaviour.stalls:
            self._stall(f"{what}: {len(requests)} requests (engine '{self.method.name}')")
        model, replies, total = self._model(), {}, SpecCounters()
        for tag, ids, params, stream in requests:
            self._requests += 1
            if self.k and (params.get("logit_bias") or (params.get("min_p") and params.get("temperature", 1.0))):
                replies[tag] = Reply(refused=self.REFUSAL)
                continue
            outputs, spec = [], []
            for index in range(int(params.get("n") or 1)):
                seed = params.get("seed")
                rng = random.Random(f"{seed}:{index}" if seed is not None else f"unseeded:{self._requests}:{index}")
                d = model.decode_request(list(ids), params, rng)
                chunks, counters = self._steps(len(d.token_ids))
                fields = (d.token_ids, d.text, d.finish_reason, d.stop_reason, d.logprobs, d.prompt_logprobs)
                outputs.append(Completion(*fields, len(d.token_ids), chunks if stream else (), index))
                total = total + counters
                spec.append((counters.num_accepted_tokens, counters.num_draft_tokens, counters.num_drafts))
            replies[tag] = Reply(tuple(outputs), spec_counts=tuple(spec) if self.k else ())
        return RequestsResult(replies, total)

    def _steps(self, emitted: int) -> tuple[tuple[int, ...], SpecCounters]:
        """How `emitted` tokens stream (the prefill's token, then 1 + accepted drafts a step) and what they count."""
        chunks, per_pos, carry = [1], [0] * self.k, 0.0
        while sum(chunks) < emitted:
            carry += self.behaviour.accepted if self.k else 0.0
            accepted = min(int(carry), self.k, emitted - sum(chunks) - 1)
            carry -= int(carry)
            chunks.append(1 + accepted)
            for pos in range(accepted):
                per_pos[pos] += 1
        steps = len(chunks) - 1 if self.k else 0
        return tuple(chunks), SpecCounters(steps, steps * self.k, sum(per_pos), tuple(per_pos))

    # -- the KV cache: preemptions under a small cache, the prefix cache --------------------------------
    def kv_block_size(self) -> int | None:
        return int(self.kwargs.get("block_size") or self.script.machine.block_size)

    def token_budget(self) -> int | None:
        return self.kwargs.get("max_num_batched_tokens") or self.script.machine.token_budget

    def kv_stats(self) -> KvStats:
        return KvStats(self.preemptions, self.prefix_queries, self.prefix_hits, 0.0)

    def reset_prefix_cache(self) -> None:
        self.cached.clear()

    def _through_kv_cache(self, prompts, max_tokens: int) -> None:
        """A batch's prompts looked up in (and added to) the prefix cache by whole blocks; with a KV cache of
        num_gpu_blocks_override blocks, each request that does not fit beside the ones before it is preempted once."""
        size, room = self.kv_block_size(), self.kwargs.get("num_gpu_blocks_override")
        for p in prompts:
            ids, found = tuple(p.token_ids), True
            self.prefix_queries += len(ids)
            for end in range(size, len(ids) + 1, size):
                found = found and ids[:end] in self.cached
                self.prefix_hits += size if found else 0
                self.cached.add(ids[:end])
            need = math.ceil((len(ids) + max_tokens) / size)
            if room is not None:
                self.preemptions += need > room
                room = max(0, room - need)

    # -- the sampler ---------------------------------------------------------------------------------------
    def sampling_broken(self) -> str:
        return self.behaviour.sampling_probe

    @contextlib.contextmanager
    def sampling_repaired(self):
        yield self.behaviour.sampling_probe

    def timed_steps(self, work):
        work()
        if not self.behaviour.timers:
            return None
        draft = self.behaviour.draft_call_s if self.behaviour.draft_call_s is not None else 0.001 * self.k
        return {"forward_s": 0.009, "forward_calls": 1, "propose_s": draft, "propose_calls": 1}

    def memory_reading(self) -> MemoryReading:
        b = self.behaviour
        drafter = None if not self.k else int(b.drafter_mib * MIB)
        kv = 1000 - 10 * self.k - b.extra_kv_tokens_lost
        return MemoryReading(kv, (100 + self.k) * MIB, None, drafter, drafter_shared=tuple(b.drafter_shared))

    def shutdown(self) -> ShutdownReport:
        self.alive = False
        if self.core is not None and self.core.poll() is None:
            self.core.kill()
            self.core.wait()
        return ShutdownReport(self.method.name, 0.01, [], 10, 10, 20, 0)


class FakeBoot:
    """`boot(profile, method, root, log_path)` that hands out FakeEngines and records the order."""

    def __init__(self, script: FakeScript | None = None):
        self.script = script or FakeScript()
        self.boots: list[str] = []

    def __call__(self, profile, method, root: Path, log_path: Path) -> FakeEngine:
        self.boots.append(method.name)
        error = self.script.method(method.name).boot_error
        if error:
            raise EngineBootError(
                f"engine for method '{method.name}' (fake) failed to boot: {error}",
                log_tail=error,
                method=method.name,
                reason=error,
                detail=error,
            )
        return FakeEngine(method, self.script, self.boots, profile, log_path, root)


class FakeEnginePlugin:
    """Registered by `-p specgate.testing` (or passed to pytester's in-process runs)."""

    def __init__(self, script: FakeScript | None = None):
        self.boot = FakeBoot(script)

    @pytest.hookimpl(optionalhook=True)
    def pytest_specgate_boot_engine(self, profile, method, root, log_path):
        return self.boot(profile, method, root, log_path)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:
        terminalreporter.write_line(f"fake engines booted: {', '.join(self.boot.boots) or 'none'}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(FakeEnginePlugin(FakeScript.from_env()), "specgate-fake-engine")


def fake_session(
    profile,
    root: Path,
    script: FakeScript | None = None,
    *,
    methods: list[str] | None = None,
    update_baselines: bool = False,
    strict: bool = False,
    **machine,
):
    """A GateSession over fake engines, for testing verdicts and baseline policy without pytest or vLLM: `fake_session(
    profile, tmp_path).judge(ACCEPTANCE, "ngram", "code")`; `hardware=`, `identity=`: another machine's run."""
    from specgate.run.session import GateSession, RunPlan, Selection

    plan = RunPlan(
        profile,
        profile.select(methods),
        root,
        Path(root) / "results",
        update_baselines=update_baselines,
        strict=strict,
        **machine,
    )
    return GateSession(plan, Selection(levels=tuple(profile.concurrency)), boot=FakeBoot(script))
