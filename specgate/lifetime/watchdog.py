"""Deadlines of the suite's own for every engine and server it drives, so that a run always ends.

vLLM's timeouts do not bound a boot (VLLM_ENGINE_READY_TIMEOUT_S is read only after the start-up
handshake, inside which the model loads and graphs are captured: v1/engine/core_client.py 0.33:762
vs v1/engine/utils.py 0.33:1392-1451), and nothing in vLLM bounds a step that never ends. So:

    Watch        one engine's or server's deadlines and what counts as progress: a token it streamed
                 (`progress()`) or a new line in its log (vLLM's periodic stats lines excepted: they
                 come on a timer, whether the engine moves or not; once booted, its lines that say a
                 process still waits on another too). `boot_s` bounds a boot as a whole, `stall_s` any
                 wait without progress.
    wait(future, watch, what)
                 the future's result, polling so that Ctrl-C is seen at once; raises `Overdue` when a
                 deadline passes (the caller stops the processes and says what they were doing)
    dump_stacks(pids, path)
                 each process's Python stacks: py-spy when it can read them, else the faulthandler
                 signal every engine process registers at start (specgate/lifetime/_stacks/sitecustomize.py)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.5
# The faulthandler signal engine processes register (specgate/lifetime/_stacks); vLLM uses neither SIGUSR.
STACKS_SIGNAL = signal.SIGUSR2
STACKS_ENV = "SPECGATE_STACKS_FILE"
STACKS_DIR = Path(__file__).parent / "_stacks"
# Lines vLLM logs on a timer (the server's periodic stats), which say nothing about progress.
_PERIODIC = ("Avg prompt throughput", "SpecDecoding metrics", "Avg generation throughput")
# What the engine core logs every VLLM_RINGBUFFER_WARNING_INTERVAL (60 s) while its worker has not answered a step
# (vllm/distributed/device_communicators/shm_broadcast.py, 0.32.0): a hang's sign, not progress. Counted as
# progress before, it kept a worker hung inside verification alive past any stall_timeout_s above 60 s, until
# vLLM's own VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s) ended it as a crash (issue 74). During a boot it still
# counts: a long compile or graph capture may log nothing else, and boot_timeout_s bounds the boot.
_WAITING = ("No available shared memory broadcast block found",)


class Overdue(Exception):
    """A deadline passed: `kind` 'boot' (the whole boot took too long) or 'stall' (no progress)."""

    def __init__(self, kind: str, waited_s: float, idle_s: float, what: str, last_line: str):
        super().__init__(f"{kind}: {what}")
        self.kind, self.waited_s, self.idle_s, self.what, self.last_line = kind, waited_s, idle_s, what, last_line


@dataclass
class Watch:
    """Deadlines for one engine or server, and the progress it made (monotonic seconds)."""

    stall_s: float
    boot_s: float | None = None
    log_path: Path | None = None
    last: float = field(default_factory=time.monotonic)
    last_line: str = ""
    longest_idle_s: float = 0.0  # the longest wait without progress that did not stall: evidence for stall_s
    _offset: int = 0
    _partial: bytes = b""

    def progress(self) -> None:
        now = time.monotonic()
        self.longest_idle_s = max(self.longest_idle_s, now - self.last)
        self.last = now

    def restart(self) -> None:
        """A new wait begins: idle time before it (the suite's own work) is not the engine's."""
        self.last = time.monotonic()
        self._read_log()  # what the log said in between is not progress of this wait

    def _read_log(self) -> bool:
        """Whether the log got a line that is not a periodic one since the last look."""
        if self.log_path is None:
            return False
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(self._offset)
                chunk = fh.read(1 << 20)
        except OSError:
            return False
        if not chunk:
            return False
        self._offset += len(chunk)
        # Progress bars redraw one line with carriage returns: a redraw is progress too.
        text = (self._partial + chunk).replace(b"\r", b"\n")
        lines, _, self._partial = text.rpartition(b"\n")
        moved = False
        ignored = _PERIODIC if self.boot_s is not None else (*_PERIODIC, *_WAITING)
        for raw in lines.split(b"\n"):
            line = raw.decode("utf-8", "replace").strip()
            if line and not any(p in line for p in ignored):
                self.last_line, moved = line, True
        return moved or bool(self._partial.strip())

    def check(self, started: float, what: str) -> None:
        """Raise Overdue when a deadline has passed for the wait that began at `started`."""
        if self._read_log():
            self.progress()
        now = time.monotonic()
        idle = now - self.last
        if self.boot_s is not None and now - started > self.boot_s:
            raise Overdue("boot", now - started, idle, what, self.last_line)
        if idle > self.stall_s:
            raise Overdue("stall", now - started, idle, what, self.last_line)


def wait(future: concurrent.futures.Future, watch: Watch | None, what: str):
    """The future's result; with a watch, Overdue when one of its deadlines passes first. Polling
    keeps this thread in Python code, so SIGINT / SIGTERM raise here within POLL_S."""
    started = time.monotonic()
    if watch is not None:
        watch.restart()
    while True:
        try:
            result = future.result(timeout=POLL_S)
        except concurrent.futures.TimeoutError:
            if watch is not None:
                watch.check(started, what)
            continue
        if watch is not None:
            watch.progress()
        return result


def describe(over: Overdue, name: str, stall_s: float, boot_s: float | None, source: str, stacks: Path | None) -> str:
    """The one-line verdict for a deadline that passed, naming the setting and where it is set."""
    if over.kind == "boot":
        head = (
            f"{name} did not finish booting within {boot_s:.0f} s (boot_timeout_s in {source}); the boot was at: "
            f"{_short(over.last_line) or 'nothing logged yet'!r}, the log silent for the last {over.idle_s:.0f} s"
        )
    else:
        head = f"no progress for {over.idle_s:.0f} s while {over.what} (stall_timeout_s {stall_s:.0f} in {source})"
        if over.last_line:
            head += f"; the log's last line: {_short(over.last_line)!r}"
    where = f"; stacks in {stacks}" if stacks else ""
    return f"{head}{where}"


def _short(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def stop_overdue(
    over: Overdue, name: str, processes: dict[int, str], stacks: Path, stall_s: float, boot_s: float | None, source: str
) -> str:
    """A deadline passed for `name` (an engine): write its processes' stacks to `stacks`, stop them and
    everything under them, and return the one-paragraph message that says so."""
    from specgate.lifetime.processes import stop_tree

    dumped = dump_stacks(processes, stacks)
    left = stop_tree(list(processes))
    listed = ", ".join(f"{n} (pid {p})" for p, n in processes.items()) or "none yet"
    return (
        f"{describe(over, name, stall_s, boot_s, source, dumped)}. Its processes ({listed}) were stopped"
        f"{f', but {left} would not die' if left else ''}; the other methods still run"
    )


def python_stacks_env(stacks_file: Path) -> dict[str, str]:
    """Environment that makes every Python process started with it register the faulthandler
    signal, dumping all its threads' stacks into `stacks_file` (see specgate/lifetime/_stacks)."""
    paths = [str(STACKS_DIR), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)), STACKS_ENV: str(stacks_file)}


def _py_spy() -> str | None:
    """py-spy next to this interpreter, or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


def dump_stacks(processes: dict[int, str], path: Path, timeout_s: float = 20.0) -> Path | None:
    """Write what each process (pid -> name) is doing into `path`: its Python stacks (py-spy, native
    frames where it can; else the process's own faulthandler, woken with SIGCONT if it was stopped)
    and its state. None when there was nothing to dump."""
    import psutil

    if not processes:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    spy = _py_spy()
    with open(path, "a", encoding="utf-8") as out:
        out.write(f"specgate: stacks of {len(processes)} process(es) at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        for pid, name in processes.items():
            try:
                proc = psutil.Process(pid)
                state, cpu = proc.status(), sum(proc.cpu_times()[:2])
            except psutil.Error:
                out.write(f"\n--- {name} (pid {pid}): already gone\n")
                continue
            out.write(f"\n--- {name} (pid {pid}): state {state}, {cpu:.1f} s of CPU so far\n")
            out.flush()
            if spy and _spy_dump(spy, pid, out, timeout_s):
                continue
            _faulthandler_dump(pid, out)
    return path


def _spy_dump(spy: str, pid: int, out, timeout_s: float) -> bool:
    """py-spy's view of the process (without pausing it: a stopped or wedged process is read as is)."""
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        out.write(f"(py-spy failed: {exc})\n")
        return False
    if done.returncode != 0 or not done.stdout.strip():
        out.write(f"(py-spy could not read it: {(done.stderr or done.stdout).strip()[:300]})\n")
        return False
    out.write(done.stdout)
    return True


def _faulthandler_dump(pid: int, out) -> None:
    """Ask the process to write its own stacks (the faulthandler signal specgate/lifetime/_stacks registered
    at its start) into the file `out` is. A stopped process only handles it once continued, so it is
    continued: it is about to be stopped for good anyway."""
    out.write(f"(faulthandler, signal {STACKS_SIGNAL.name}; its stacks follow from the process itself)\n")
    out.flush()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, STACKS_SIGNAL)
        os.kill(pid, signal.SIGCONT)
    time.sleep(1.0)  # the handler writes asynchronously; one process at a time keeps them apart
