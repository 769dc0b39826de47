"""The only module that drives a vLLM engine: boot, generate, stream, metrics, memory, shutdown.

The engine is vLLM's AsyncLLM in this process, on an event loop thread of its own, so the load
generator can keep exactly C requests in flight and see every streamed step. `boot_engine(...)`
returns a live `Engine` (a backend.StreamingBackend); `Engine.shutdown()` stops it and verifies that
its processes are gone and the machine's memory came back; `running(...)` is both as one context
manager. The engine's own log (it runs in child processes) goes to a file per method, so a boot failure
can quote its tail instead of a stack dump.
vLLM is imported lazily: the rest of specgate (profiles, reports, unit tests) never needs it.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate import vllm_compat as compat
from specgate.backend import ShutdownReport, StreamingBackend
from specgate.engines import enginelog, in_vllm_worker, logstream, plants
from specgate.engines.engine_args import engine_kwargs, vllm_env
from specgate.engines.eventloop import EventLoopThread
from specgate.errors import EngineBootError, EngineDied, EngineStalled
from specgate.figures import kvstats
from specgate.figures.acceptance import SpecCounters, counters_from_metrics
from specgate.figures.completions import Reply, collect, reply_of
from specgate.figures.memory import device_bytes
from specgate.lifetime import ipc as ipc_dirs
from specgate.lifetime import processes as procs
from specgate.lifetime import reaper
from specgate.lifetime.watchdog import Overdue, Watch, stop_overdue
from specgate.profile import Method, Profile


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[None]:
    """Send fd 1/2 (inherited by the engine's child processes) and vLLM's log records to `log_path`
    (the records stay routed there until another engine's log takes over: specgate.engines.logstream)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    logstream.STREAM.route_to(log_path)
    logstream.take_vllm_records()
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "ab", buffering=0) as fh:
        try:
            os.dup2(fh.fileno(), 1)
            os.dup2(fh.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


@dataclass
class Engine(StreamingBackend):
    """A live vLLM engine (AsyncLLM, in this process; its core and workers in child processes)."""

    method: Method
    client: Any  # vllm.v1.engine.async_llm.AsyncLLM
    loop: EventLoopThread
    log_path: Path
    boot_s: float
    rss_before_boot: int
    available_before_boot: int
    children_before_boot: set[int]
    env_before: dict[str, str | None] = field(default_factory=dict)
    alive: bool = True
    processes: dict[int, str] = field(default_factory=dict)  # the engine's own: pid -> process name
    runner: str = ""  # the worker's model runner: 'v1' or 'v2' (vllm_compat.runner_kind)
    died: EngineDied | None = None
    step_histograms: dict[str, list[int]] = field(default_factory=dict)  # tag -> vLLM's per-request histogram
    step_series: dict[str, list[int]] = field(default_factory=dict)  # tag -> its accepted drafts, step by step
    watch: Watch | None = None  # the no-progress deadline (profile [engine] stall_timeout_s)
    profile_path: str = ""  # where the deadlines are set, for messages
    undo: Any = None  # what takes a plant's front-end patch out again at shutdown (specgate.engines.plants)
    ipc_dir: Path | None = None  # where its ZeroMQ sockets are (specgate.lifetime.ipc), removed at shutdown
    _requests: int = 0

    @property
    def method_name(self) -> str:
        return self.method.name

    def counters(self) -> SpecCounters:
        return counters_from_metrics(compat.metrics_snapshot())

    def kv_stats(self) -> kvstats.KvStats:
        return kvstats.from_metrics(compat.metrics_snapshot())

    def token_budget(self) -> int | None:  # the scheduler's tokens per step (max_num_batched_tokens), as configured
        return compat.token_budget(self.client)

    def kv_block_size(self) -> int | None:  # tokens per KV-cache block, as this engine was configured
        return compat.kv_block_size(self.client)

    def reset_prefix_cache(self) -> None:
        self.run(compat.reset_prefix_cache(self.client), "emptying the prefix cache")

    def _request_id(self, tag: str) -> str:
        self._requests += 1
        return f"{tag}#{self._requests}"

    async def steps(self, token_ids, max_tokens: int, tag: str, top_logprobs: int = 0, temperature: float = 0.0,
                    seed: int | None = None, schema: dict | None = None):  # fmt: skip
        """The request's new tokens (and top-k logprobs) as the engine emits them, step by step."""
        params = compat.sampling_params(max_tokens, top_logprobs, temperature, seed, schema)
        async for out in self.client.generate(compat.tokens_prompt(token_ids), params, self._request_id(tag)):
            completion = out.outputs[0]
            if (metrics := getattr(completion, "spec_decode_metrics", None)) is not None:  # the finished output
                self.step_histograms[tag] = list(metrics.histogram)
                if series := getattr(metrics, "per_step_accepted", None):  # 'detailed': in order, steps with drafts
                    self.step_series[tag] = list(series)
            top = []
            if top_logprobs and completion.logprobs:
                top = [{int(t): float(lp.logprob) for t, lp in pos.items()} for pos in completion.logprobs]
            if self.watch is not None:
                self.watch.progress()
            yield [int(t) for t in completion.token_ids], top

    async def complete(self, token_ids, params: dict, tag: str, stream: bool = True) -> Reply:
        """One request as a user sends it (SamplingParams keywords `params`), streamed step by step or
        answered once: each of its n outputs, or vLLM's own words when it refuses the request."""
        try:
            sampling = compat.request_params(params, stream)
        except Exception as exc:
            if words := compat.refusal(exc):
                return Reply(refused=words)
            raise
        parts: dict[int, dict] = {}
        prompt_logprobs = None
        try:
            async for out in self.client.generate(compat.tokens_prompt(token_ids), sampling, self._request_id(tag)):
                if prompt_logprobs is None:
                    prompt_logprobs = compat.prompt_logprob_fields(out)
                for completion in out.outputs:
                    collect(parts, compat.completion_fields(completion), stream)
                if self.watch is not None:
                    self.watch.progress()
        except Exception as exc:
            if words := compat.refusal(exc):
                return Reply(refused=words)
            raise
        return reply_of(parts, prompt_logprobs, stream)

    def run(self, coro, what: str = "waiting for the engine"):
        """Run a coroutine on the engine's loop (from the test's thread) with the engine's log. An
        engine that died raises EngineDied, saying which process ended how and what vLLM logged; one
        that makes no progress for stall_timeout_s is stopped and raises EngineStalled."""
        if self.died is not None:
            coro.close()
            raise self.died.again()
        what = f"{what} (engine '{self.method.name}')"
        reaper.set_phase(what)
        with _output_to(self.log_path):
            try:
                return self.loop.run(coro, self.watch, what)
            except Overdue as over:
                self.died = self._overdue(over)
            except Exception as exc:
                if not (compat.is_engine_dead(exc) or getattr(self.client, "errored", False)):
                    raise
                self.died = self._diagnose(exc)
        raise self.died

    def _overdue(self, over: Overdue) -> EngineStalled:
        """No progress: record what the engine's processes were doing, stop them, and say so."""
        message = stop_overdue(
            over,
            f"the engine for method '{self.method.name}'",
            procs.engine_processes(self.children_before_boot),
            self.log_path.with_suffix(".stacks"),
            self.watch.stall_s,
            None,
            self.profile_path,
        )
        return EngineStalled(
            f"{message}. If an honest step takes this long here, raise [engine] stall_timeout_s. "
            f"Engine log: {self.log_path}",
            self.method.name,
            f"no progress for {over.idle_s:.0f} s while {over.what}",
        )

    def _diagnose(self, exc: BaseException) -> EngineDied:
        reason, tail = enginelog.root_cause(self.log_path, exc)
        ended = []
        for name, pid, code in compat.engine_core_processes(self.client):
            if code:
                ended.append(f"{name} (pid {pid}) {procs.exit_words(code)}")
        gone = [f"{name} (pid {pid})" for pid, name in self.processes.items() if not procs.running(pid)]
        if not ended and gone:
            ended.append(f"{', '.join(gone)} exited")
        how = "; ".join(ended) or "its processes are still running"
        if compat.is_engine_dead(exc) and reason.startswith(type(exc).__name__):
            reason = f"{reason.split(':')[0]}: {how}"  # nothing in the log but vLLM's wrapper: the exit says more
        return EngineDied(
            f"the engine for method '{self.method.name}' died while generating ({compat.release()}): {reason}. "
            f"Processes: {how}. Last lines of its log ({self.log_path}):\n{tail}",
            self.method.name,
            reason,
        )

    def take_step_histograms(self, tags) -> dict[str, list[int]]:
        return {t: self.step_histograms.pop(t) for t in tags if t in self.step_histograms}

    def take_step_series(self, tags) -> dict[str, list[int]]:
        return {t: self.step_series.pop(t) for t in tags if t in self.step_series}

    def collective_rpc(self, fn):
        """Call `fn(worker)` in every worker process (results in rank order)."""
        return self.run(self.client.collective_rpc(fn), f"a call into the workers ({getattr(fn, '__name__', 'rpc')})")

    def sampling_broken(self) -> str:
        """The probe's finding where this vLLM has vllm-project/vllm#55005 (sampling_repaired repairs it), or ''. The
        bug is in V1's sampler (expand_batch_to_tokens): an engine on Model Runner V2 verifies with V2's own."""
        return "" if self.runner == "v2" else compat.sampled_verification_broken()

    @contextlib.contextmanager
    def sampling_repaired(self):
        """While active, where the probe shows vllm-project/vllm#55005, the workers' sampler carries the
        repair the property suite uses; yields the probe's finding ('' where nothing was repaired)."""
        why, repair = self.sampling_broken(), in_vllm_worker.repair_sampled_verification
        if not why or not all(self.collective_rpc(functools.partial(repair, on=True))):
            yield ""
            return
        try:
            yield why
        finally:
            self.collective_rpc(functools.partial(repair, on=False))

    def timed_steps(self, work) -> dict[str, float] | None:
        """Run `work()` with timers in the worker around the target's forward pass and the drafter:
        seconds and calls of each (rank 0), or None when this vLLM's runner lacks the hooks."""
        if not all(self.collective_rpc(in_vllm_worker.start_step_timer)):
            return None
        try:
            work()
        finally:
            timings = self.collective_rpc(in_vllm_worker.stop_step_timer)
        return timings[0]

    def memory_reading(self):
        """KV capacity, the engine processes' peak memory, and the drafter's own weights (measured in
        every worker: tensors the drafter does not share with the target, each counted once per
        distinct tensor-parallel shard: memory.drafter_weights)."""
        from specgate.figures.memory import MemoryReading, drafter_weights

        pids = sorted(procs.children() - self.children_before_boot)
        try:
            drafter = drafter_weights(self.collective_rpc(in_vllm_worker.drafter_shards))
        except EngineDied:
            raise
        except Exception:  # an engine without the worker API (or a refused RPC) still gets the rest
            drafter = {}
        device, source = device_bytes(pids)
        return MemoryReading(
            kv_capacity_tokens=compat.kv_capacity_tokens(self.client),
            peak_process_bytes=sum(procs.peak_rss(pid) for pid in pids),
            device_bytes=device,
            device_source=source,
            **drafter,
        )

    def shutdown(self) -> ShutdownReport:
        """Stop the engine, wait for its processes to exit, and measure what memory came back."""
        start = time.monotonic()
        footprint = procs.rss(procs.children() - self.children_before_boot)
        if self.alive:
            self.alive = False
            with _output_to(self.log_path):
                with contextlib.suppress(Exception):
                    self.client.shutdown()
                    # vLLM's __del__ shuts down again; if something keeps the object until interpreter
                    # exit, that second call fails on torn-down module globals. Once is enough.
                    self.client.shutdown = lambda *args, **kwargs: None
                self.loop.close()
                self.client = None
                gc.collect()
            if self.undo is not None:
                self.undo()
            _restore_env(self.env_before)
        leftover = procs.wait_for_exit(self.children_before_boot)
        if leftover:  # reported (the lifecycle gate fails on them), and stopped: nothing stays running
            procs.stop_tree(leftover)
        ipc_dirs.remove(self.ipc_dir)
        stacks = self.log_path.with_suffix(".stacks")
        with contextlib.suppress(OSError):
            if stacks.exists() and not stacks.stat().st_size:
                stacks.unlink()  # registered at start, never needed
        gc.collect()
        return ShutdownReport(
            self.method.name,
            time.monotonic() - start,
            leftover,
            self.rss_before_boot,
            procs.rss(),
            footprint,
            procs.available_memory() - self.available_before_boot,
        )


def _restore_env(saved: dict[str, str | None]) -> None:
    os.environ.update({k: v for k, v in saved.items() if v is not None})
    for key in [k for k, v in saved.items() if v is None]:
        os.environ.pop(key, None)


def engine_env(profile: Profile, stacks: Path, ipc: Path | None) -> dict[str, str]:
    """The variables an engine runs under. The memory reading's collective_rpc needs insecure serialization:
    the engine is ours and local, no input crosses a trust boundary."""
    return {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1", **logstream.ENV, **vllm_env(profile, stacks, ipc)}


def _overlay_env(env: dict[str, str]) -> dict[str, str | None]:
    """`env` over os.environ for the engine's lifetime (vLLM reads it here, some at import; its children
    inherit it); returns what it replaced, which Engine.shutdown or an abandoned boot puts back."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return saved


def boot_engine(profile: Profile, method: Method, root: Path, log_path: Path) -> Engine:
    """Start a vLLM engine for `method`; raise EngineBootError with the log tail if it will not start,
    or does not finish starting within the profile's boot_timeout_s (or goes stall_timeout_s without
    a line in its log): then its processes are stopped, saying what the boot was doing."""
    kwargs = engine_kwargs(profile, method, root)
    stacks = log_path.with_suffix(".stacks")
    ipc = ipc_dirs.make()
    env_before = _overlay_env(engine_env(profile, stacks, ipc))  # before vLLM is imported
    # Import vLLM before measuring: its modules stay loaded in this process for the whole run.
    AsyncEngineArgs, AsyncLLM = compat.engine_classes()
    if method.speculative_config is not None and compat.PER_REQUEST_METRICS in compat.engine_arg_names():
        # each request's own accepted-tokens histogram and, in order, its steps' (the stream's chunks are not steps
        # when merged): acceptance per request and by output position (specgate.figures.distribution)
        kwargs.setdefault(compat.PER_REQUEST_METRICS, "detailed")

    reaper.ensure(root)  # whatever happens to this process, the engine's do not outlive it
    gc.collect()
    children_before = procs.children()
    rss_before = procs.rss()
    available_before = procs.available_memory()
    start = time.monotonic()
    loop = EventLoopThread()
    watch = Watch(profile.stall_timeout_s, profile.boot_timeout_s, log_path)
    what = f"booting engine '{method.name}'"
    reaper.set_phase(what)

    async def create():
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def give_up() -> None:
        """The boot is abandoned: stop what it started, put the environment back."""
        procs.stop_tree(list(procs.engine_processes(children_before)))
        loop.close(wait_s=5.0)
        _restore_env(env_before)
        ipc_dirs.remove(ipc)

    try:
        with _output_to(log_path):
            print(f"specgate: booting engine '{method.name}' with {kwargs}", flush=True)
            client = loop.run(create(), watch, what)
    except Overdue as over:
        where = f"the engine for method '{method.name}'"
        processes = procs.engine_processes(children_before)
        limits = (profile.stall_timeout_s, profile.boot_timeout_s, str(profile.path))
        message = stop_overdue(over, where, processes, stacks, *limits)
        give_up()
        raise enginelog.boot_overdue(over.kind, over.waited_s, message, method.name, log_path) from None
    except Exception as exc:
        give_up()
        where = f"engine for method '{method.name}' (profile {profile.name}, {profile.path})"
        raise enginelog.boot_failed(exc, where, compat.release(), method.name, log_path) from None
    except BaseException:  # Ctrl-C or SIGTERM during the boot: nothing half-started stays behind
        give_up()
        raise
    engine = Engine(
        method,
        client,
        loop,
        log_path,
        time.monotonic() - start,
        rss_before,
        available_before,
        children_before,
        env_before,
        processes=procs.engine_processes(children_before),
        watch=watch,
        profile_path=str(profile.path),
        ipc_dir=ipc,
    )
    watch.boot_s = None  # booted: from here on only the no-progress deadline holds
    return _fitted(engine, method)


def _fitted(engine: Engine, method: Method) -> Engine:
    """A booted engine with its runner known and the method's plant and slow steps in place (shut down,
    EngineBootError, where the runner has nothing to put them in)."""
    with contextlib.suppress(Exception):  # the record says which runner measured; nothing depends on it
        engine.runner = engine.collective_rpc(in_vllm_worker.runner_kind)[0]
    if method.plant:
        engine.undo = plants.install_frontend(engine.client, method.plant)
    refused = method.plant and next(
        filter(None, engine.collective_rpc(functools.partial(plants.install, name=method.plant))), None
    )
    if refused:
        engine.shutdown()
        raise EngineBootError(
            f"method '{method.name}': {refused}.", method=method.name, reason=f"plant {method.plant}: not plantable"
        )
    if method.slow_steps and not all(
        engine.collective_rpc(functools.partial(in_vllm_worker.slow_drafting, share=method.slow_steps))
    ):
        engine.shutdown()
        raise EngineBootError(
            f"method '{method.name}': slow_steps needs a drafting call to slow down, and this "
            f"runner has none ({engine.runner or 'unknown runner'})",
            method=method.name,
            reason="slow_steps: no drafting call",
        )
    return engine


@contextlib.contextmanager
def running(profile: Profile, method: Method, root: Path, log_path: Path) -> Iterator[Engine]:
    """`with running(profile, method, root, log) as engine:` boots the engine and always shuts it down."""
    engine = boot_engine(profile, method, root, log_path)
    try:
        yield engine
    finally:
        engine.shutdown()
