"""Every run ends, and ends clean: a real `pytest -m gpu` of this checkout (cpu-tiny, ngram) is sent
SIGINT, SIGTERM or SIGKILL in each phase, and afterwards none of its processes (engine cores,
workers, servers, nested runs, its reaper) may be alive, and none of the socket files vLLM binds in the
temp directory may be left there (after SIGKILL the reaper removes them).

Tests of the suite itself, not gates: they run with the suite's own tests (`-m "not gpu"`), on vLLM's
CPU build, and boot cpu-tiny's engines (about 10 minutes on 2 cores).
"""

import json
import shutil
import signal

import pytest

from .nested import CPU_TINY, NestedRun, own_tmpdir, skip_without_vllm_cpu, sockets_under

pytestmark = [pytest.mark.system, pytest.mark.needs_vllm, skip_without_vllm_cpu()]
EXIT_WITHIN_S = 30  # a stop "within seconds": the teardown stops an engine in ~5 s, a server in ~10 s
CENSUS_S = {signal.SIGINT: 10, signal.SIGTERM: 10, signal.SIGKILL: 30}

# phase name -> (the nested run's arguments, the phase to interrupt it in, seconds more to wait)
PHASES = {
    "engine generating": (
        ["-k", "equivalence", "tests/gate/test_equivalence.py"],
        r"generating .*engine 'baseline'",
        0,
    ),
    "endpoint test": (["tests/gate/test_endpoint.py", "tests/gate/test_equivalence.py"], r"endpoint test: the gate", 8),
    "server booting": (["tests/gate/test_endpoint.py", "tests/gate/test_equivalence.py"], r"booting server 'ngram'", 4),
    "engine booting": (["-k", "equivalence", "tests/gate/test_equivalence.py"], r"booting engine 'baseline'", 6),
}
CASES = [
    (sig, phase)
    for phase in ("engine generating", "endpoint test", "server booting")
    for sig in (signal.SIGINT, signal.SIGTERM)
] + [(signal.SIGKILL, "engine booting"), (signal.SIGKILL, "endpoint test")]


@pytest.mark.parametrize("sig,phase", CASES, ids=[f"{signal.Signals(s).name}-{p.replace(' ', '-')}" for s, p in CASES])
def test_a_signal_stops_the_run_and_leaves_no_process_behind(tmp_path, sig, phase):
    args, pattern, then_s = PHASES[phase]
    tmp, env = own_tmpdir()  # where vLLM binds its sockets unless told otherwise
    run = NestedRun(
        ["--specgate-profile", str(CPU_TINY), "--specgate-methods", "ngram", *args], tmp_path / "run"
    ).start(env=env)
    try:
        run.wait_for(pattern, timeout_s=600, then_s=then_s)
        took = run.signal(sig)
        left = run.alive_after(CENSUS_S[sig])
    finally:
        run.kill_all()
        sockets = sockets_under(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    name = signal.Signals(sig).name
    took_s = "did not exit within 120 s" if took is None else f"exit {run.proc.returncode} after {took:.1f} s"
    print(
        f"{name} in phase '{phase}': {took_s}, {len(left)} of its processes alive {CENSUS_S[sig]} s later"
    )  # shown with -rP
    assert not left, f"{name} in phase '{phase}': processes of the run still alive {CENSUS_S[sig]} s later: {left}"
    assert took is not None and took < EXIT_WITHIN_S, f"{name} in phase '{phase}': the run took {took} s to exit"
    assert not sockets, f"{name} in phase '{phase}': {len(sockets)} socket files left in the temp directory: {sockets}"
    if sig == signal.SIGKILL:
        return
    assert run.proc.returncode != 0, run.output()[-3000:]
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["interrupted"].startswith("interrupted at tests/gate/") and record["interrupted"].endswith(
        f"({name})"
    )
    assert f"{record['interrupted']}: the run stopped there" in (tmp_path / "run" / "summary.md").read_text()


def test_processes_a_killed_run_and_its_reaper_left_are_reported_and_stopped_on_request(tmp_path):
    """The run and its reaper both killed: the next run names what they left, and --specgate-kill-stale
    stops it and removes its sockets."""
    import os
    import subprocess
    import sys
    import time

    from .nested import ROOT

    tmp, env = own_tmpdir()  # the runs' temp directory: their sockets go under it
    env = {**os.environ, **env}
    run = NestedRun(["--specgate-profile", str(CPU_TINY), *PHASES["engine generating"][0]], tmp_path / "run")
    run.start(env=env)
    try:
        run.wait_for(PHASES["engine generating"][1], timeout_s=600)
        reapers = [pid for pid, (_, what) in run.seen.items() if "specgate.lifetime.reaper" in what]
        assert reapers, run.seen
        run.note()  # what the run started since its phase was read
        for pid in reapers:  # the run and its reaper both killed (an OOM killer, a container-wide kill)
            os.kill(pid, signal.SIGKILL)
        run.proc.kill()
        run.proc.wait()
        time.sleep(5)
        orphans = run.alive()
        assert orphans, "nothing outlived the run: vLLM's engine core ended with its parent by itself"
        later = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "--specgate-profile",
            str(CPU_TINY),
            "tests/gate/test_equivalence.py",
        ]
        said = subprocess.run(later, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300).stdout
        assert f"of an earlier run (pid {run.proc.pid}: " in said and "are still alive: " in said, said
        # this run's paragraph: a run killed by a test on the other xdist worker may be listed before it
        ours = said.split(f"of an earlier run (pid {run.proc.pid}: ")[1]
        listed = ours.split("are still alive: ")[1].split(". They hold")[0]
        pids = {int(line.split()[0]) for line in orphans}
        assert listed and all(int(p.split(")")[0]) in pids for p in listed.split("(pid ")[1:]), (orphans, said)
        assert "Stop them with --specgate-kill-stale" in said
        said = subprocess.run(
            [*later, "--specgate-kill-stale"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        ).stdout
        assert "process(es) left by an earlier run (pid" in said and "would not die" not in said, said
        assert run.alive() == []
        sockets = sockets_under(tmp)
        assert not sockets, f"socket files of the killed run left in the temp directory: {sockets}"
    finally:
        run.kill_all()
        shutil.rmtree(tmp, ignore_errors=True)
