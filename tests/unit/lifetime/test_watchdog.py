"""Deadlines, stack dumps and the reaper, on real processes (no vLLM): specgate.lifetime.watchdog and
specgate.lifetime.reaper."""

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from specgate.lifetime import reaper, watchdog
from specgate.lifetime.watchdog import Overdue, Watch


def test_a_log_line_is_progress_but_a_periodic_stats_line_is_not(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("")
    watch = Watch(stall_s=0.3, log_path=log)
    watch.restart()
    for _ in range(4):  # a line every 0.15 s keeps it alive for longer than stall_s
        time.sleep(0.15)
        with log.open("a") as fh:
            fh.write("Loading weights took 1.2 s\n")
        watch.check(time.monotonic(), "booting")
    assert watch.last_line == "Loading weights took 1.2 s"
    with pytest.raises(Overdue) as over:
        for _ in range(6):
            time.sleep(0.15)
            with log.open("a") as fh:
                fh.write("INFO Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0\n")
            watch.check(time.monotonic(), "generating")
    assert over.value.kind == "stall" and over.value.idle_s > 0.3 and over.value.what == "generating"


WAITING = (
    "(EngineCore pid=1) INFO 12-07 16:24:50 [shm_broadcast.py:871] No available shared memory broadcast block found "
    "in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work"
)


def test_a_booted_engines_line_that_its_worker_has_not_answered_is_no_progress(tmp_path):
    """vLLM's engine core says so every 60 s while a worker is hung inside a step: counted as progress, it kept such
    an engine alive past any stall_timeout_s above 60 s (issue 74). During a boot it still counts (a long compile)."""
    log = tmp_path / "engine.log"
    log.write_text("")

    def lines_every_0_15_s(watch, n):
        for _ in range(n):
            time.sleep(0.15)
            with log.open("a") as fh:
                fh.write(WAITING + "\n")
            watch.check(time.monotonic(), "a closed-loop trial at C=16")

    booting = Watch(stall_s=0.3, boot_s=60, log_path=log)
    booting.restart()
    lines_every_0_15_s(booting, 4)  # kept alive for longer than stall_s
    booted = Watch(stall_s=0.3, log_path=log)
    booted.restart()
    with pytest.raises(Overdue) as over:
        lines_every_0_15_s(booted, 6)
    assert over.value.kind == "stall" and over.value.idle_s > 0.3


def test_a_progress_bar_redrawn_in_place_is_progress(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("")
    watch = Watch(stall_s=0.3, log_path=log)
    watch.restart()
    for pct in range(0, 100, 20):
        time.sleep(0.15)
        with log.open("a") as fh:
            fh.write(f"\rLoading safetensors shards: {pct}%")
        watch.check(time.monotonic(), "booting")


def test_the_boot_deadline_holds_however_much_the_log_moves(tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("")
    watch = Watch(stall_s=10, boot_s=0.4, log_path=log)
    started = time.monotonic()
    with pytest.raises(Overdue) as over:
        while True:
            with log.open("a") as fh:
                fh.write("capturing CUDA graphs\n")
            watch.check(started, "booting engine 'x'")
            time.sleep(0.05)
    assert over.value.kind == "boot" and over.value.last_line == "capturing CUDA graphs" and over.value.waited_s > 0.4
    message = watchdog.describe(over.value, "the engine for method 'x'", 10, 0.4, "p.toml", None)
    assert message.startswith(
        "the engine for method 'x' did not finish booting within 0 s (boot_timeout_s in p.toml); "
        "the boot was at: 'capturing CUDA graphs'"
    )


def test_wait_returns_the_result_or_raises_when_nothing_moves():
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert watchdog.wait(pool.submit(lambda: 7), Watch(stall_s=1), "x") == 7
        never = concurrent.futures.Future()
        start = time.monotonic()
        with pytest.raises(Overdue):
            watchdog.wait(never, Watch(stall_s=0.6), "waiting")
        assert 0.6 < time.monotonic() - start < 0.6 + 2 * watchdog.POLL_S


def _python(tmp_path, code: str, then: str = "time.sleep(600)", stacks=None) -> subprocess.Popen:
    """A Python process that runs `code`, marks itself ready, then runs `then`; returned once it is
    ready. Polls for the mark, not a fixed sleep: on a loaded machine (CI runs other tests on both
    cores) an interpreter can take seconds to start."""
    env = {**os.environ, **(watchdog.python_stacks_env(stacks) if stacks else {})}
    ready = tmp_path / f"ready-{time.monotonic_ns()}"
    script = f"import time\n{code}\nopen({str(ready)!r}, 'w').close()\n{then}"
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 60
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"the test's process did not get ready in 60 s (exit {proc.returncode}): {code!r}")
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
def test_without_py_spy_a_process_writes_its_own_stacks_through_the_registered_signal(tmp_path, monkeypatch, stopped):
    monkeypatch.setattr(watchdog, "_py_spy", lambda: None)
    stacks = tmp_path / "engine.stacks"
    proc = _python(tmp_path, "def deep_in_a_kernel():\n    time.sleep(60)", "deep_in_a_kernel()", stacks)
    try:
        if stopped:  # a SIGSTOP, as a wedged engine core looks from outside
            proc.send_signal(signal.SIGSTOP)
            while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
                time.sleep(0.05)
        watchdog.dump_stacks({proc.pid: "EngineCore"}, stacks)
        text = stacks.read_text()
        assert f"--- EngineCore (pid {proc.pid}): state {'stopped' if stopped else 'sleeping'}" in text
        assert "in deep_in_a_kernel" in text, text
    finally:
        proc.kill()
        proc.wait()


def test_stop_tree_kills_a_stopped_process_that_ignores_sigterm_and_its_children(tmp_path):
    proc = _python(
        tmp_path,
        "import signal, subprocess\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nsubprocess.Popen(['sleep', '600'])",
    )
    child = psutil.Process(proc.pid).children()[0]
    proc.send_signal(signal.SIGSTOP)
    from specgate.lifetime.processes import stop_tree

    assert stop_tree([proc.pid], grace_s=0.5) == []
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
    proc.wait(timeout=5)


def test_the_reaper_stops_what_a_killed_run_left_and_removes_its_state_file(tmp_path):
    # the "run": starts its reaper and an "engine" in a session of its own (as a server is), then is SIGKILLed
    owner = _python(
        tmp_path,
        f"import subprocess\nfrom specgate.lifetime import reaper\nreaper.ensure({str(tmp_path)!r})\n"
        "subprocess.Popen(['sleep', '600'], start_new_session=True)",
    )
    state = reaper.state_path(tmp_path, owner.pid)
    try:
        # polls, not timings: a loaded machine (CI's other tests on both cores) can take seconds to start the reaper
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(p["name"] == "sleep" for p in _listed(state)):
            time.sleep(0.2)
        engine = next((p for p in _listed(state) if p["name"] == "sleep"), None)
        assert engine is not None, f"the reaper did not list the run's engine in 60 s: {_listed(state)}"
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and psutil.pid_exists(engine["pid"])
            and psutil.Process(engine["pid"]).status() != psutil.STATUS_ZOMBIE
        ):
            time.sleep(0.2)
        assert not psutil.pid_exists(engine["pid"]) or psutil.Process(engine["pid"]).status() == psutil.STATUS_ZOMBIE
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and state.exists():
            time.sleep(0.2)
        assert not state.exists()
    finally:  # whatever failed, nothing of the test outlives it
        owner.kill()
        listed = {e["pid"] for e in _listed(state)}  # read once: the state file, not once per process
        for p in psutil.process_iter(["cmdline"]):
            if p.pid in listed and p.info["cmdline"] == ["sleep", "600"]:
                p.kill()


def _listed(state) -> list[dict]:
    try:
        return json.loads(state.read_text())["processes"]
    except (OSError, ValueError, KeyError):
        return []


def test_a_later_run_finds_processes_an_earlier_one_left_and_stops_them_when_asked(tmp_path):
    left = subprocess.Popen(["sleep", "600"])
    gone = subprocess.Popen(["true"])
    gone.wait()
    state = reaper.state_path(tmp_path, gone.pid)
    state.parent.mkdir(parents=True)
    p = psutil.Process(left.pid)
    state.write_text(
        json.dumps(
            {
                "owner": gone.pid,
                "owner_created": 1.0,
                "owner_cmd": "pytest -m gpu",
                "reaper": 1,
                "processes": [
                    {"pid": left.pid, "created": p.create_time(), "name": "python"},  # as first seen
                    {"pid": 1, "created": 0.0, "name": "reused pid"},
                ],
            }
        )
    )
    state.with_suffix(".phase").write_text("booting engine 'eagle3'")
    [stale] = reaper.stale_runs(tmp_path)
    assert stale.describe().startswith(
        f"1 process(es) of an earlier run (pid {gone.pid}: pytest -m gpu, last at: booting "
        f"engine 'eagle3') are still alive: sleep (pid {left.pid})"
    )  # as it is now
    assert reaper.stop_stale(stale) == []
    assert left.wait(timeout=5) is not None
    assert reaper.stale_runs(tmp_path) == [] and not state.exists()
