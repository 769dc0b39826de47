"""A watcher that outlives the run, so that no engine outlives it: `python -m specgate.lifetime.reaper OWNER STATE`.

The run (a pytest session with gate tests, `specgate rehearse`, `specgate bisect`) starts one reaper in
a session of its own. Twice a second it notes every process under the run's process OWNER (engine
cores, workers, servers, nested runs; with their start times, so a reused pid is never mistaken for
one of them) and keeps the list in the STATE file (`results/.running/<owner pid>.json`). When the
owner ends, however it ends (SIGKILL and a cancelled CI job included), the reaper stops what is left
of those processes and their children, removes their sockets' directories (specgate.lifetime.ipc), then
removes the file and exits.

A state file whose owner and reaper are both gone (the machine's OOM killer took both, say) still
names the processes: the next run finds them (`stale_runs`) and says so, and stops them when asked
(the run's kill_stale setting).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from specgate.lifetime import ipc

POLL_S = 0.5
STATE_DIR = Path("results") / ".running"  # under the project root


def state_path(root: Path, owner: int | None = None) -> Path:
    return Path(root) / STATE_DIR / f"{owner or os.getpid()}.json"


_running: dict[str, object] = {}  # this process's reaper: {"root": Path, "proc": Popen}; reset() forgets it


def reset() -> None:
    """Forget this process's reaper, so that the next ensure() starts one (a test's; the reaper itself
    leaves when this process does)."""
    _running.clear()


def ensure(root: Path) -> None:
    """Start this process's reaper, once (before its first engine or server). Where it cannot start,
    the run goes on without it: its own teardown still stops what it started."""
    if _running:
        return
    path = state_path(root)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "specgate.lifetime.reaper", str(os.getpid()), str(path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
    except OSError:
        return
    _running.update(root=Path(root), proc=proc)


def set_phase(phase: str) -> None:
    """Say what this run is doing now, next to its state file: for a later run that finds processes
    this one left behind, and for tests that interrupt a run at a given phase."""
    if not _running:
        return
    path = state_path(_running["root"]).with_suffix(".phase")
    with contextlib.suppress(OSError):
        tmp = path.with_suffix(".phase.tmp")
        tmp.write_text(phase, encoding="utf-8")
        tmp.replace(path)


def _identity(proc) -> tuple[int, float, str]:
    return proc.pid, proc.create_time(), proc.name()


def _alive(pid: int, created: float):
    """The process if it is still the one that was noted (same start time), else None."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE:
            return proc
    except psutil.Error:
        pass
    return None


def _write(path: Path, state: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1), encoding="utf-8")
    tmp.replace(path)


def watch(owner: int, path: Path) -> int:
    """The reaper's loop (see the module docstring). Returns how many processes it had to stop."""
    import psutil

    try:
        parent = psutil.Process(owner)
        owner_created = parent.create_time()
        owner_cmd = " ".join(parent.cmdline())[:300]
    except psutil.Error:
        return 0
    me = os.getpid()
    seen: dict[int, tuple[float, str]] = {}
    state = {
        "owner": owner,
        "owner_created": owner_created,
        "owner_cmd": owner_cmd,
        "reaper": me,
        "started": time.time(),
        "processes": [],
    }
    _write(path, state)
    phase_path = path.with_suffix(".phase")
    while _alive(owner, owner_created) is not None:
        with contextlib.suppress(psutil.Error):
            for child in parent.children(recursive=True):
                if child.pid != me and child.pid not in seen:
                    with contextlib.suppress(psutil.Error):
                        pid, created, name = _identity(child)
                        seen[pid] = (created, name)
                        state["processes"] = [{"pid": p, "created": c, "name": n} for p, (c, n) in seen.items()]
                        _write(path, state)
        time.sleep(POLL_S)
    stopped = stop_listed(state["processes"])
    ipc.remove_owned(owner)  # the sockets of engines the run could not stop itself
    for p in (path, phase_path):
        with contextlib.suppress(OSError):
            p.unlink()
    return len(stopped)


def stop_listed(listed: list[dict], grace_s: float = 3.0) -> list[int]:
    """Stop the listed processes that are still the ones listed, with everything under them."""
    from specgate.lifetime.processes import stop_tree

    alive = [p["pid"] for p in listed if _alive(p["pid"], p["created"]) is not None]
    if alive:
        stop_tree(alive, grace_s)
    return alive


@dataclass
class StaleRun:
    """An earlier run of this checkout whose processes outlived it."""

    path: Path
    owner: int
    owner_cmd: str
    phase: str
    processes: list[dict]  # still alive: pid, created, name

    def describe(self) -> str:
        names = ", ".join(f"{p['name']} (pid {p['pid']})" for p in self.processes[:6])
        more = f" and {len(self.processes) - 6} more" if len(self.processes) > 6 else ""
        at = f", last at: {self.phase}" if self.phase else ""
        return (
            f"{len(self.processes)} process(es) of an earlier run (pid {self.owner}: {self.owner_cmd[:120]}{at}) are "
            f"still alive: {names}{more}. They hold memory (on a GPU, device memory the next engine needs)"
        )


def stale_runs(root: Path) -> list[StaleRun]:
    """Earlier runs of this checkout that ended (or whose reaper died) leaving processes behind.
    A run that is still going is not stale; a state file with nothing alive is removed."""
    out = []
    for path in sorted((Path(root) / STATE_DIR).glob("*.json")):
        try:
            state = json.loads(path.read_text(encoding="utf-8"))
            owner, created = int(state["owner"]), float(state["owner_created"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _alive(owner, created) is not None:
            continue  # a run in progress: its reaper looks after it
        alive = []
        for p in state.get("processes", []):
            proc = _alive(p["pid"], p["created"])
            if proc is not None:  # its name now: vLLM titles its processes after they start
                with contextlib.suppress(Exception):
                    p = {**p, "name": proc.name()}
                alive.append(p)
        phase_path = path.with_suffix(".phase")
        phase = phase_path.read_text(encoding="utf-8", errors="replace").strip() if phase_path.exists() else ""
        if not alive:
            for p in (path, phase_path):
                with contextlib.suppress(OSError):
                    p.unlink()
            continue
        out.append(StaleRun(path, owner, state.get("owner_cmd", ""), phase, alive))
    return out


def stop_stale(run: StaleRun) -> list[int]:
    """Stop a stale run's processes and forget it (its sockets' directories too); the pids that would not die."""
    from specgate.lifetime.processes import stop_tree

    left = stop_tree([p["pid"] for p in run.processes], grace_s=5.0)
    if not left:
        ipc.remove_owned(run.owner)
        for p in (run.path, run.path.with_suffix(".phase")):
            with contextlib.suppress(OSError):
                p.unlink()
    return left


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m specgate.lifetime.reaper OWNER_PID STATE_FILE", file=sys.stderr)
        return 2
    # The run's own Ctrl-C / SIGTERM (sent to its process group or session) is for the run: the reaper
    # is in a session of its own and ignores them, so it is there to clean up after the run.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    watch(int(args[0]), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
