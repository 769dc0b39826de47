"""The only module that talks to vLLM: boot, generate, metrics, shutdown.

`boot_engine(...)` returns a live `Engine`; `Engine.shutdown()` stops it and verifies that its
processes are gone and the machine's memory came back. The engine's own log (it runs in child
processes) goes to a file per method, so a boot failure can quote its tail instead of a stack dump.
vLLM is imported lazily: the rest of specgate (profiles, reports, unit tests) never needs it.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.acceptance import SpecCounters, counters_from_metrics
from specgate.equivalence import GreedyOutput
from specgate.errors import EngineBootError
from specgate.profile import Method, Profile
from specgate.prompts import TokenizedPrompt
from specgate.zoo import resolve as resolve_model

GIB = 1024**3
# After shutdown the machine's available memory must be back within this much of its pre-boot level.
# The engine lives in child processes; what the parent keeps (imported modules, allocator caches)
# measured ~0.1-0.3 GiB on cpu-tiny, a leaked engine costs >= its KV cache (1+ GiB).
RELEASE_SLACK_BYTES = int(0.5 * GIB)
SHUTDOWN_WAIT_S = 30.0
LOG_TAIL_LINES = 25


@dataclass
class ShutdownReport:
    method: str
    shutdown_s: float
    leftover_pids: list[int]
    available_before_boot: int
    available_after_shutdown: int

    @property
    def memory_not_returned(self) -> int:
        return max(0, self.available_before_boot - self.available_after_shutdown)

    @property
    def released(self) -> bool:
        return not self.leftover_pids and self.memory_not_returned <= RELEASE_SLACK_BYTES

    def describe(self) -> str:
        return (
            f"engine '{self.method}' shut down in {self.shutdown_s:.1f} s; processes left: "
            f"{self.leftover_pids or 'none'}; memory not returned: {self.memory_not_returned / GIB:.2f} GiB "
            f"(allowed {RELEASE_SLACK_BYTES / GIB:.2f} GiB)"
        )


def engine_kwargs(profile: Profile, method: Method, root: Path) -> dict[str, Any]:
    """Everything handed to `vllm.LLM(...)` for this method; zoo references become local paths."""
    kwargs: dict[str, Any] = dict(
        model=resolve_model(profile.target, root),
        dtype=profile.dtype,
        max_model_len=profile.max_model_len,
        seed=profile.seed,
        disable_log_stats=False,  # the spec-decode counters need stats on
    )
    kwargs.update(profile.engine_kwargs)
    kwargs.update(method.engine_kwargs)
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


def log_tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of an engine log that explain a failure (errors first, else the plain tail)."""
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return ""
    # Keep the last traceback / error block: that is what the engine core died of.
    starts = [i for i, line in enumerate(text) if "Traceback (most recent call last)" in line or " ERROR " in line]
    block = text[starts[-1] - 2 if len(starts) and starts[-1] >= 2 else 0 :] if starts else text
    return "\n".join(block[-lines:])


def engine_error_line(exc: BaseException, tail: str) -> str:
    """The one line that says why: the last `SomethingError: ...` of the log, else the exception."""
    for line in reversed(tail.splitlines()):
        stripped = line.strip()
        head = stripped.split(":", 1)[0]
        if ":" in stripped and (head.endswith("Error") or head.endswith("Exception")) and " " not in head:
            return stripped
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Engine:
    method: Method
    llm: Any
    log_path: Path
    boot_s: float
    available_before_boot: int
    children_before_boot: set[int]
    env_before: dict[str, str | None] = field(default_factory=dict)
    alive: bool = True

    def tokenizer(self):
        return self.llm.get_tokenizer()

    def counters(self) -> SpecCounters:
        return counters_from_metrics(self.llm.get_metrics())

    def greedy(
        self, prompts: list[TokenizedPrompt], max_tokens: int, top_logprobs: int = 0
    ) -> dict[str, GreedyOutput]:
        """Greedy continuations of every prompt in one batch (and top-k logprobs when asked)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=top_logprobs or None)
        with _output_to(self.log_path):
            outputs = self.llm.generate(
                [TokensPrompt(prompt_token_ids=list(p.token_ids)) for p in prompts], params, use_tqdm=False
            )
        result = {}
        for prompt, out in zip(prompts, outputs):
            completion = out.outputs[0]
            tops: tuple[Mapping[int, float], ...] = ()
            if top_logprobs and completion.logprobs:
                tops = tuple({int(t): float(lp.logprob) for t, lp in pos.items()} for pos in completion.logprobs)
            result[prompt.id] = GreedyOutput(tuple(int(t) for t in completion.token_ids), tops)
        return result

    def kv_capacity_tokens(self) -> int | None:
        cache = self.llm.llm_engine.vllm_config.cache_config
        if cache.num_gpu_blocks is None:
            return None
        return int(cache.num_gpu_blocks) * int(cache.block_size)

    def shutdown(self) -> ShutdownReport:
        """Stop the engine, wait for its processes to exit, and measure what memory came back."""
        start = time.monotonic()
        if self.alive:
            self.alive = False
            with _output_to(self.log_path):
                with contextlib.suppress(Exception):
                    self.llm.llm_engine.engine_core.shutdown()
                self.llm = None
                gc.collect()
            _restore_env(self.env_before)
        leftover = _wait_for_exit(self.children_before_boot)
        # Memory is returned to the OS a moment after the processes exit; poll briefly.
        deadline = time.monotonic() + 10
        available = _available_memory()
        while available < self.available_before_boot - RELEASE_SLACK_BYTES and time.monotonic() < deadline:
            time.sleep(0.5)
            available = _available_memory()
        return ShutdownReport(self.method.name, time.monotonic() - start, leftover, self.available_before_boot, available)


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
    # Import vLLM before measuring: its modules stay loaded in this process for the whole run.
    from vllm import LLM

    gc.collect()
    children_before = _children()
    available_before = _available_memory()
    env_before = {k: os.environ.get(k) for k in profile.engine_env}
    os.environ.update(profile.engine_env)
    start = time.monotonic()
    try:
        with _output_to(log_path):
            print(f"specgate: booting engine '{method.name}' with {kwargs}", flush=True)
            llm = LLM(**kwargs)
    except Exception as exc:
        _restore_env(env_before)
        _kill(_wait_for_exit(children_before, wait_s=5.0))  # vLLM usually reaps them itself
        tail = log_tail(log_path)
        raise EngineBootError(
            f"engine for method '{method.name}' (profile {profile.name}, {profile.path}) failed to boot: "
            f"{engine_error_line(exc, tail)}. Full engine log: {log_path}. Check the method's "
            "speculative_config and model paths in the profile, or run with --specgate-methods to skip it.",
            log_tail=tail,
            method=method.name,
        ) from None
    return Engine(method, llm, log_path, time.monotonic() - start, available_before, children_before, env_before)


def _kill(pids: list[int]) -> None:
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
