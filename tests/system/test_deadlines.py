"""The suite's own deadlines on real engines: a boot that hangs and an engine that stops producing are
both stopped once nothing moved for stall_timeout_s; each method fails saying what it was doing, with
the processes' stacks, and the next method still runs. The hang is real: the engine core is
SIGSTOPped (a deadlocked kernel or an NCCL stall looks the same from outside). (boot_timeout_s, the
deadline on a boot however its log moves, fires first when it is the shorter one: the second test.)"""

import json
import re
import signal
import time

import pytest

from .nested import CPU_TINY, NestedRun, skip_without_vllm_cpu

pytestmark = [pytest.mark.system, pytest.mark.needs_vllm, skip_without_vllm_cpu()]
# The longest honest silence in a cpu-tiny engine's log or stream measured 6.5-13.5 s on 2 cores (the
# summary's "longest wait without progress"); a boot takes 20-58 s.
STALL_S, BOOT_S = 45, 120


def with_deadlines(tmp_path, boot_s: int, stall_s: int):
    """A copy of cpu-tiny with these deadlines."""
    profile = tmp_path / "cpu-tiny-deadlines.toml"
    deadlines = {"boot": boot_s, "stall": stall_s}
    text = re.sub(
        r"(?m)^(boot|stall)_timeout_s = .*$",
        lambda m: f"{m.group(1)}_timeout_s = {deadlines[m.group(1)]}",
        CPU_TINY.read_text(),
    )
    assert f"boot_timeout_s = {boot_s}" in text and f"stall_timeout_s = {stall_s}" in text
    profile.write_text(text)
    return profile


def stalled_for(message: str, what: str) -> bool:
    """The message says how long nothing moved (the watch's own reading: STALL_S, or a second or two more
    when its check comes late on a busy machine) and what was waiting."""
    said = re.search(rf"no progress for (\d+) s while {re.escape(what)}", message)
    return said is not None and STALL_S <= int(said.group(1)) < STALL_S + 30


def test_a_hung_boot_and_a_stalled_engine_are_stopped_in_time_and_the_next_method_runs(tmp_path):
    profile = with_deadlines(tmp_path, BOOT_S, STALL_S)
    run = NestedRun(
        [
            "--specgate-profile",
            str(profile),
            "--specgate-methods",
            "ngram,eagle,eagle3",
            "-k",
            "equivalence",
            "tests/gate/test_equivalence.py",
        ],
        tmp_path / "run",
    ).start()
    try:
        run.wait_for(r"booting engine 'ngram'", timeout_s=600)
        # the baseline engine's core may still be on its way out; ngram's is spawned a second or more later
        booting = run.newest_core(exclude={p.pid for p in run.engine_cores()}, timeout_s=60)
        booting.send_signal(signal.SIGSTOP)  # the boot hangs from here on
        run.wait_for(r"generating .*engine 'eagle'", timeout_s=600)
        stalled = run.newest_core(timeout_s=10)
        stalled.send_signal(signal.SIGSTOP)  # and this engine stops producing
        stopped_at = time.monotonic()
        run.wait_for(r"booting engine 'eagle3'", timeout_s=300)
        to_next = time.monotonic() - stopped_at
        assert run.wait(timeout_s=600) == 1
        left = run.alive_after(10)
    finally:
        run.kill_all()
    assert not left, left
    assert STALL_S < to_next < STALL_S + 30, f"{to_next:.0f} s from the stall to the next method's boot"
    out = tmp_path / "run"
    outcomes = {
        o["nodeid"].split("::")[-1]: (o["outcome"], o["message"])
        for o in json.loads((out / "run.json").read_text())["outcomes"]
    }
    outcome, message = outcomes["test_method_reproduces_baseline_greedy_output[ngram]"]
    assert (
        outcome == "error"
        and stalled_for(message, f"booting engine 'ngram' (stall_timeout_s {STALL_S} in {profile}); the log's last")
        and f"stacks in {out}/engines/ngram.stacks" in message
    ), message
    outcome, message = outcomes["test_method_reproduces_baseline_greedy_output[eagle]"]
    assert (
        outcome == "failed"
        and stalled_for(message, "generating a batch of 12 prompts (engine 'eagle')")
        and f"stacks in {out}/engines/eagle.stacks" in message
    ), message
    assert outcomes["test_method_reproduces_baseline_greedy_output[eagle3]"][0] == "passed"
    for name in ("ngram", "eagle"):  # what the engine core was doing, read from the stopped process
        stacks = (out / "engines" / f"{name}.stacks").read_text()
        assert "VLLM::EngineCore (pid" in stacks and "state stopped" in stacks and "Thread" in stacks, stacks[:2000]


def test_a_boot_past_boot_timeout_s_is_stopped_saying_where_it_was(tmp_path):
    """The boot deadline on its own (the stall deadline set far above it): a hung boot of ngram fails
    that method within the deadline plus the stop, and nothing of the run is left."""
    boot_s = 90  # the baseline must boot within it: cpu-tiny boots in 18-30 s on 2 cores, up to 58 s on slow ones
    profile = with_deadlines(tmp_path, boot_s, 600)
    run = NestedRun(
        [
            "--specgate-profile",
            str(profile),
            "--specgate-methods",
            "ngram",
            "-k",
            "equivalence",
            "tests/gate/test_equivalence.py",
        ],
        tmp_path / "run",
    ).start()
    try:
        run.wait_for(r"booting engine 'ngram'", timeout_s=600)
        started = time.monotonic()
        run.newest_core(exclude={p.pid for p in run.engine_cores()}, timeout_s=60).send_signal(signal.SIGSTOP)
        assert run.wait() == 1
        ended = time.monotonic() - started
        left = run.alive_after(10)  # as after a signal: the reaper stops what is on its way out when pytest ends
    finally:
        run.kill_all()
    assert not left, f"processes of the run still alive 10 s after it ended: {left}"
    assert ended < boot_s + 30, f"the run ended {ended:.0f} s after the boot began (boot_timeout_s {boot_s})"
    out = tmp_path / "run"
    outcomes = {
        o["nodeid"].split("::")[-1]: (o["outcome"], o["message"])
        for o in json.loads((out / "run.json").read_text())["outcomes"]
    }
    outcome, message = outcomes["test_method_reproduces_baseline_greedy_output[ngram]"]
    assert (
        outcome == "error"
        and f"did not finish booting within {boot_s} s (boot_timeout_s in {profile}); the boot was at: " in message
        and f"stacks in {out}/engines/ngram.stacks" in message
    ), message
