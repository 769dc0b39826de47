"""The processes an engine runs in, seen from this (pytest) process: which are ours, how much
memory they hold, whether they are still running, how they ended, and stopping them.

psutil is imported lazily, as vLLM is: profiles, reports and unit tests never need it.
"""

from __future__ import annotations

import contextlib
import signal
import time
from pathlib import Path

SHUTDOWN_WAIT_S = 30.0


def available_memory() -> int:
    import psutil

    return psutil.virtual_memory().available


def rss(pids=()) -> int:
    """Resident bytes of this process plus the given processes (those that still exist)."""
    import psutil

    total = psutil.Process().memory_info().rss
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def children() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


def exit_words(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def engine_processes(children_before: set[int]) -> dict[int, str]:
    """The processes the engine started (pid -> name, e.g. VLLM::EngineCore_DP0)."""
    import psutil

    out = {}
    for pid in sorted(children() - children_before):
        with contextlib.suppress(psutil.Error):
            out[pid] = psutil.Process(pid).name()
    return out


def peak_rss(pid: int) -> int:
    """Peak resident memory of a process (Linux VmHWM), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def wait_for_exit(children_before: set[int], wait_s: float = SHUTDOWN_WAIT_S) -> list[int]:
    """PIDs of engine processes still alive after `wait_s` (ignoring long-lived helpers)."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        leftover = []
        for pid in children() - children_before:
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


def kill(pids: list[int]) -> None:
    import psutil

    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()


def stop_tree(pids, grace_s: float = 5.0) -> list[int]:
    """Stop these processes and everything under them: SIGTERM (and SIGCONT, so a stopped process
    can act on it), then SIGKILL whatever is left after `grace_s`. Returns the pids still alive."""
    import psutil

    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                procs[p.pid] = p
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for p in procs.values():
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
    alive = _wait_gone(list(procs.values()), grace_s)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return sorted(p.pid for p in _wait_gone(alive, 5.0))


def _wait_gone(procs: list, timeout_s: float) -> list:
    """Those of `procs` still running after up to `timeout_s`. A zombie counts as gone: it holds no
    memory, and one whose parent has died may never be reaped where PID 1 does not reap."""
    import psutil

    deadline = time.monotonic() + timeout_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    with contextlib.suppress(psutil.Error):
                        p.wait(timeout=0)  # reaps it when it is our own child
                    continue
            except psutil.NoSuchProcess:
                continue
            except psutil.Error:
                pass
            alive.append(p)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)
