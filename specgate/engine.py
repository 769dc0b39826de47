"""The only module that drives a vLLM engine: boot, generate, stream, metrics, memory, shutdown.

The engine is vLLM's AsyncLLM in this process, on an event loop thread of its own, so the load
generator can keep exactly C requests in flight and see every streamed step. `boot_engine(...)`
returns a live `Engine` (a backend.StreamingBackend); `Engine.shutdown()` stops it and verifies that
its processes are gone and the machine's memory came back; `running(...)` is both as one context
manager. The engine's own log (it runs in child
processes) goes to a file per method, so a boot failure can quote its tail instead of a stack dump.
vLLM is imported lazily: the rest of specgate (profiles, reports, unit tests) never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.acceptance import SpecCounters, counters_from_metrics
from specgate.backend import ShutdownReport, StreamingBackend
from specgate import vllm_compat as compat
from specgate.errors import EngineBootError, EngineDied
from specgate.models import resolve as resolve_model
from specgate.profile import Method, Profile

SHUTDOWN_WAIT_S = 30.0
LOG_TAIL_LINES = 25
MAX_REASON = 400  # characters of the engine's one-line reason kept in messages


def engine_kwargs(profile: Profile, method: Method, root: Path) -> dict[str, Any]:
    """The engine arguments (vLLM EngineArgs fields) for this method; zoo references become local paths."""
    kwargs: dict[str, Any] = dict(
        model=resolve_model(profile.target, root),
        dtype=profile.dtype,
        max_model_len=profile.max_model_len,
        seed=profile.seed,
        disable_log_stats=False,  # the spec-decode counters need stats on
    )
    kwargs.update(profile.engine_kwargs)
    kwargs.update(method.engine_kwargs)
    for key in ("model", "tokenizer"):  # a method may bring its own target (MTP lives in the target)
        if key in kwargs:
            kwargs[key] = resolve_model(kwargs[key], root)
    if method.speculative_config is not None:
        sc = dict(method.speculative_config)
        for key in ("model", "tokenizer"):
            if key in sc:
                sc[key] = resolve_model(sc[key], root)
        kwargs["speculative_config"] = sc
    return kwargs


def _available_memory() -> int:
    import psutil

    return psutil.virtual_memory().available


def _rss(pids=()) -> int:
    """Resident bytes of this process plus the given processes (those that still exist)."""
    import psutil

    total = psutil.Process().memory_info().rss
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def _children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[None]:
    """Send fd 1/2 (inherited by the engine's child processes) and vLLM's logger to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    saved = [os.dup(1), os.dup(2)]
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    vllm_logger = logging.getLogger("vllm")
    with open(log_path, "ab", buffering=0) as fh:
        try:
            os.dup2(fh.fileno(), 1)
            os.dup2(fh.fileno(), 2)
            vllm_logger.addHandler(handler)
            yield
        finally:
            vllm_logger.removeHandler(handler)
            handler.close()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


_EXCEPTION_LINE = re.compile(r"(?:^|\] |\s)([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")


def explain_failure(log_path: Path, exc: BaseException) -> tuple[str, str]:
    """(the line that says why, the log lines leading up to it) for an engine that died.

    The root cause is the first traceback in the log that is not an "Exception ignored" notice: the
    worker's own error comes first, the wrappers re-raised by the engine core and this process later.
    """
    try:
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        lines = []
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" not in line or (i and "Exception ignored" in lines[i - 1]):
            continue
        for j in range(i + 1, len(lines)):
            match = _EXCEPTION_LINE.search(lines[j])
            if match:
                tail = "\n".join(lines[max(i, j - LOG_TAIL_LINES + 1) : j + 1])
                return f"{match.group(1)}: {match.group(2)}"[:MAX_REASON], tail
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"[:MAX_REASON], "\n".join(lines[-LOG_TAIL_LINES:])


class EventLoopThread:
    """An asyncio loop on its own thread: vLLM's AsyncLLM lives on it, the (synchronous) tests
    submit coroutines to it. One per engine, stopped with the engine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="specgate-engine-loop", daemon=True)
        self.thread.start()

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        async def cancel_pending():
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_pending())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


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
    _requests: int = 0

    @property
    def method_name(self) -> str:
        return self.method.name

    def counters(self) -> SpecCounters:
        return counters_from_metrics(compat.metrics_snapshot())

    def _request_id(self, tag: str) -> str:
        self._requests += 1
        return f"{tag}#{self._requests}"

    async def steps(self, token_ids, max_tokens: int, tag: str, top_logprobs: int = 0, temperature: float = 0.0,
                    seed: int | None = None):
        """The request's new tokens (and top-k logprobs) as the engine emits them, step by step."""
        params = compat.sampling_params(max_tokens, top_logprobs, temperature, seed)
        async for out in self.client.generate(compat.tokens_prompt(token_ids), params, self._request_id(tag)):
            completion = out.outputs[0]
            if (metrics := getattr(completion, "spec_decode_metrics", None)) is not None:  # the finished output
                self.step_histograms[tag] = list(metrics.histogram)
            top = []
            if top_logprobs and completion.logprobs:
                top = [{int(t): float(lp.logprob) for t, lp in pos.items()} for pos in completion.logprobs]
            yield [int(t) for t in completion.token_ids], top

    def run(self, coro):
        """Run a coroutine on the engine's loop (from the test's thread) with the engine's log. An
        engine that died raises EngineDied, saying which process ended how and what vLLM logged."""
        if self.died is not None:
            coro.close()
            raise self.died.again()
        with _output_to(self.log_path):
            try:
                return self.loop.run(coro)
            except Exception as exc:
                if not (compat.is_engine_dead(exc) or getattr(self.client, "errored", False)):
                    raise
                self.died = self._diagnose(exc)
        raise self.died

    def _diagnose(self, exc: BaseException) -> EngineDied:
        reason, tail = explain_failure(self.log_path, exc)
        ended = []
        for name, pid, code in compat.engine_core_processes(self.client):
            if code:
                ended.append(f"{name} (pid {pid}) {_exit_words(code)}")
        gone = [f"{name} (pid {pid})" for pid, name in self.processes.items() if not _running(pid)]
        if not ended and gone:
            ended.append(f"{', '.join(gone)} exited")
        how = "; ".join(ended) or "its processes are still running"
        if compat.is_engine_dead(exc) and reason.startswith(type(exc).__name__):
            reason = f"{reason.split(':')[0]}: {how}"  # nothing in the log but vLLM's wrapper: the exit says more
        return EngineDied(
            f"the engine for method '{self.method.name}' died while generating ({compat.release()}): {reason}. "
            f"Processes: {how}. Last lines of its log ({self.log_path}):\n{tail}",
            self.method.name, reason,
        )

    def take_step_histograms(self, tags) -> dict[str, list[int]]:
        return {t: self.step_histograms.pop(t) for t in tags if t in self.step_histograms}

    def collective_rpc(self, fn):
        """Call `fn(worker)` in every worker process (results in rank order)."""
        return self.run(self.client.collective_rpc(fn))

    def timed_steps(self, work) -> dict[str, float] | None:
        """Run `work()` with timers in the worker around the target's forward pass and the drafter:
        seconds and calls of each (rank 0), or None when this vLLM's runner lacks the hooks."""
        if not all(self.collective_rpc(_start_step_timer)):
            return None
        try:
            work()
        finally:
            timings = self.collective_rpc(_stop_step_timer)
        return timings[0]

    def memory_reading(self):
        """KV capacity, the engine processes' peak memory, and the drafter's own weights (measured in
        every worker: tensors the drafter does not share with the target, summed over the tensor-
        parallel ranks that each hold a shard)."""
        from specgate.memory import MemoryReading

        pids = sorted(_children() - self.children_before_boot)
        try:
            per_rank = self.collective_rpc(_drafter_weight_bytes)
            drafter = None if any(b is None for b in per_rank) else sum(per_rank)
        except EngineDied:
            raise
        except Exception:  # an engine without the worker API (or a refused RPC) still gets the rest
            drafter = None
        device, source = _device_bytes(pids)
        return MemoryReading(
            kv_capacity_tokens=compat.kv_capacity_tokens(self.client),
            peak_process_bytes=sum(_peak_rss(pid) for pid in pids),
            device_bytes=device,
            drafter_weight_bytes=drafter,
            device_source=source,
        )

    def shutdown(self) -> ShutdownReport:
        """Stop the engine, wait for its processes to exit, and measure what memory came back."""
        start = time.monotonic()
        footprint = _rss(_children() - self.children_before_boot)
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
            _restore_env(self.env_before)
        leftover = _wait_for_exit(self.children_before_boot)
        gc.collect()
        return ShutdownReport(
            self.method.name,
            time.monotonic() - start,
            leftover,
            self.rss_before_boot,
            _rss(),
            footprint,
            _available_memory() - self.available_before_boot,
        )


def _exit_words(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _engine_processes(children_before: set[int]) -> dict[int, str]:
    """The processes the engine started (pid -> name, e.g. VLLM::EngineCore_DP0)."""
    import psutil

    out = {}
    for pid in sorted(_children() - children_before):
        with contextlib.suppress(psutil.Error):
            out[pid] = psutil.Process(pid).name()
    return out


def _runner_kind(worker) -> str:
    """Runs inside the vLLM worker: which model runner it uses."""
    from specgate import vllm_compat

    return vllm_compat.runner_kind(worker.model_runner)


def _drafter_weight_bytes(worker) -> int | None:
    """Runs inside the vLLM worker: bytes of the drafter's weights that are not the target's.

    Modules the drafter shares with the target (EAGLE's embedding and LM head) are skipped by
    identity. On CPU, vLLM moves linear weights into oneDNN / packed kernels and leaves an empty
    parameter behind, so those count by the layer's declared shape. None: no drafter at all.
    """
    import torch

    from specgate import vllm_compat

    runner = worker.model_runner
    has_drafter, model = vllm_compat.drafter_model(runner)
    if model is None:
        return 0 if has_drafter else None  # ngram / suffix draft without weights
    target = runner.get_model() if hasattr(runner, "get_model") else runner.model
    target_modules = {id(m) for m in target.modules()}
    target_tensors = {p.data_ptr() for p in target.parameters() if p.numel()}
    seen: set[int] = set()
    total = 0
    for module in model.modules():
        if id(module) in target_modules:
            continue
        for name, p in module.named_parameters(recurse=False):
            shape = _declared_weight_shape(module) if p.numel() == 0 and name == "weight" else None
            if shape:
                elem = torch.empty(0, dtype=getattr(module, "params_dtype", p.dtype)).element_size()
                total += shape[0] * shape[1] * elem
            elif p.numel() and p.data_ptr() not in target_tensors and p.data_ptr() not in seen:
                seen.add(p.data_ptr())
                total += p.numel() * p.element_size()
    return total


def _start_step_timer(worker) -> bool:
    """Runs inside the vLLM worker: wrap the runner's target forward pass and its drafting call with
    timers (vllm_compat.step_timers says which, for either model runner). On CUDA each timed call
    synchronizes the device, so only a dedicated trial uses them."""
    import time as _time

    import torch

    from specgate import vllm_compat

    runner = worker.model_runner
    timers = vllm_compat.step_timers(runner)
    if not all(hasattr(owner, attr) for owner, attr, _ in timers.values()):
        return False
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    totals = {f"{name}_{what}": 0.0 for name in timers for what in ("s", "calls")}

    def timed(name, fn, skip):
        def wrapper(*args, **kwargs):
            if skip is not None and skip(kwargs):
                return fn(*args, **kwargs)
            sync()
            start = _time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sync()
                totals[f"{name}_s"] += _time.perf_counter() - start
                totals[f"{name}_calls"] += 1

        return wrapper

    # an instance attribute shadows the method; one set before (slow_steps) is put back afterwards
    runner._specgate_timed = [(owner, attr, owner.__dict__.get(attr)) for owner, attr, _ in timers.values()]
    for name, (owner, attr, skip) in timers.items():
        setattr(owner, attr, timed(name, getattr(owner, attr), skip))
    runner._specgate_step_totals = totals
    return True


def _slow_drafting(worker, share: float) -> bool:
    """Runs inside the vLLM worker (calibration only): every drafting call also sleeps `share` of the
    mean interval between engine steps, measured as it runs: a proposer that much slower."""
    import time as _time

    from specgate import vllm_compat

    runner = worker.model_runner
    timers = vllm_compat.step_timers(runner)
    if "propose" not in timers:
        return False
    owner, attr, skip = timers["propose"]
    state = {"last": None, "mean": 0.0, "n": 0, "slept": 0.0}
    propose = getattr(owner, attr)

    def slowed(*args, **kwargs):
        now = _time.perf_counter()
        if state["last"] is not None and now - state["last"] < 1.0:  # one step, without our own sleep in it
            state["n"] += 1
            state["mean"] += (now - state["last"] - state["slept"] - state["mean"]) / state["n"]
        state["last"], state["slept"] = now, 0.0
        out = propose(*args, **kwargs)
        if not (skip and skip(kwargs)) and state["n"] >= 8:
            state["slept"] = share * state["mean"]
            _time.sleep(state["slept"])
        return out

    setattr(owner, attr, slowed)
    return True


def _stop_step_timer(worker) -> dict[str, float]:
    """Runs inside the vLLM worker: remove the timers, return their totals."""
    runner = worker.model_runner
    for owner, attr, before in runner.__dict__.pop("_specgate_timed", []):
        if before is None:
            owner.__dict__.pop(attr, None)
        else:
            setattr(owner, attr, before)
    return runner.__dict__.pop("_specgate_step_totals", {})


def _declared_weight_shape(module) -> tuple[int, int] | None:
    """(out, in) of a vLLM linear layer whose weight was moved into a packed CPU kernel."""
    for out_attr, in_attr in (("output_size_per_partition", "input_size_per_partition"), ("output_size", "input_size")):
        out, inp = getattr(module, out_attr, None), getattr(module, in_attr, None)
        if isinstance(out, int) and isinstance(inp, int):
            return out, inp
    return None


def _peak_rss(pid: int) -> int:
    """Peak resident memory of a process (Linux VmHWM), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _device_bytes(pids: list[int]) -> tuple[int | None, str]:
    """(GPU memory of the engine, how it was read): NVML's per-process figures for these PIDs, or,
    when NVML lists none of them (in a container it reports host PIDs), the memory used on the
    visible devices as a whole. (None, "") without NVIDIA devices."""
    try:
        import pynvml
    except ImportError:
        return None, ""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None, ""
    try:
        from specgate.scaleout import visible_devices

        visible = visible_devices()
        handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            if not visible or str(i) in visible or str(uuid) in visible:
                handles.append(handle)
        per_process = [p.usedGpuMemory for h in handles for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)
                       if p.pid in pids and p.usedGpuMemory]
        if per_process:
            return sum(per_process), "process"
        return sum(pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles), "device"
    except pynvml.NVMLError:
        return None, ""
    finally:
        pynvml.nvmlShutdown()


def _restore_env(saved: dict[str, str | None]) -> None:
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _wait_for_exit(children_before: set[int], wait_s: float = SHUTDOWN_WAIT_S) -> list[int]:
    """PIDs of engine processes still alive after `wait_s` (ignoring long-lived helpers)."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        leftover = []
        for pid in _children() - children_before:
            try:
                proc = psutil.Process(pid)
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                # multiprocessing's resource tracker is shared by the whole pytest process.
                if "resource_tracker" in " ".join(proc.cmdline()):
                    continue
            except psutil.Error:
                continue
            leftover.append(pid)
        if not leftover or time.monotonic() > deadline:
            return sorted(leftover)
        time.sleep(0.25)


def boot_engine(profile: Profile, method: Method, root: Path, log_path: Path) -> Engine:
    """Start a vLLM engine for `method`; raise EngineBootError with the log tail if it will not start."""
    kwargs = engine_kwargs(profile, method, root)
    # The memory reading sends one small function to the worker (collective_rpc), which vLLM only
    # serializes with this set. The engine is ours and local; no input crosses a trust boundary.
    # Set before vLLM is imported: it reads some (VLLM_ENGINE_READY_TIMEOUT_S) once, at import.
    env = {"VLLM_ALLOW_INSECURE_SERIALIZATION": "1", **profile.engine_env}
    env_before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    # Import vLLM before measuring: its modules stay loaded in this process for the whole run.
    AsyncEngineArgs, AsyncLLM = compat.engine_classes()
    if method.speculative_config is not None and compat.PER_REQUEST_METRICS in compat.engine_arg_names():
        # each request's own accepted-tokens histogram: the stream's chunks are not steps when merged
        kwargs.setdefault(compat.PER_REQUEST_METRICS, "summary")

    gc.collect()
    children_before = _children()
    rss_before = _rss()
    available_before = _available_memory()
    start = time.monotonic()
    loop = EventLoopThread()

    async def create():
        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    try:
        with _output_to(log_path):
            print(f"specgate: booting engine '{method.name}' with {kwargs}", flush=True)
            client = loop.run(create())
    except Exception as exc:
        loop.close()
        _restore_env(env_before)
        _kill(_wait_for_exit(children_before, wait_s=5.0))  # vLLM usually reaps them itself
        reason, tail = explain_failure(log_path, exc)
        raise EngineBootError(
            f"engine for method '{method.name}' (profile {profile.name}, {profile.path}) failed to boot on "
            f"{compat.release()}: {reason} Full engine log: {log_path}. Check the method's "
            "speculative_config and model paths in the profile, or run with --specgate-methods to skip it.",
            log_tail=tail,
            method=method.name,
            reason=reason,
            detail=f"{type(exc).__name__}: {exc}",
        ) from None
    engine = Engine(method, client, loop, log_path, time.monotonic() - start, rss_before, available_before,
                    children_before, env_before, processes=_engine_processes(children_before))
    with contextlib.suppress(Exception):  # the record says which runner measured; nothing depends on it
        engine.runner = engine.collective_rpc(_runner_kind)[0]
    if method.slow_steps and not all(engine.collective_rpc(functools.partial(_slow_drafting, share=method.slow_steps))):
        engine.shutdown()
        raise EngineBootError(f"method '{method.name}': slow_steps needs a drafting call to slow down, and this "
                              f"runner has none ({engine.runner or 'unknown runner'})", method=method.name,
                              reason="slow_steps: no drafting call")
    return engine


def _kill(pids: list[int]) -> None:
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


@contextlib.contextmanager
def running(profile: Profile, method: Method, root: Path, log_path: Path) -> Iterator[Engine]:
    """`with running(profile, method, root, log) as engine:` boots the engine and always shuts it down."""
    engine = boot_engine(profile, method, root, log_path)
    try:
        yield engine
    finally:
        engine.shutdown()
