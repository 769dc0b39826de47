"""The load gate on fake engines: every concurrency level's outputs held to the baseline engine's reference
pass, and the acceptance its trials moved held to the stored figure; a bug only large batches meet fails
there, naming the level, the prompt and the position, while the level below passes."""

import re

import pytest

from specgate.checks import Verdict
from specgate.errors import EngineStalled
from specgate.gates import gate_named
from specgate.profile import load_profile
from specgate.run.results import summary_lines
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

pytestmark = pytest.mark.needs_vllm  # fake gate sessions tokenize with the target's tokenizer (imports torch)

PROFILE = fake_profile("""
concurrency = [1, 4]
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
[tolerance]
acceptance_rtol = 0.01
""")


def session(tmp_path, text=PROFILE, update=False, **behaviours):
    path = tmp_path / "fake.toml"
    path.write_text(text)
    profile = load_profile(path, tmp_path)
    script = FakeScript.from_dict({"methods": behaviours})
    return fake_session(profile, tmp_path, script, update_baselines=update)


def stored(tmp_path, text=PROFILE):
    s = session(tmp_path, text, update=True)
    for level in (1, 4):
        s.judge("speedup", "baseline", level)
        s.judge("load", "baseline", level)
    for level in (1, 4):
        s.judge("speedup", "good", level)
        assert s.judge("load", "good", level).verdict is Verdict.PASS
    s.write_baselines()


def test_every_level_matches_the_reference_and_stores_its_acceptance(tmp_path):
    s = session(tmp_path, update=True)
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.PASS
    rows = {r.metric: r.value for r in j.rows}
    assert rows["requests"] > 0 and rows["identical"] == rows["requests"] and rows["diverged"] == 0
    assert j.record["mean_acceptance_length"] == pytest.approx(2.0)  # the fake accepts one of two drafts a step
    # the baseline engine's own trials are held to its reference pass too
    assert s.judge("load", "baseline", 4).verdict is Verdict.PASS


def test_outputs_wrong_only_in_large_batches_fail_at_that_level_naming_prompt_and_position(tmp_path):
    stored(tmp_path)
    s = session(tmp_path, good={"large_from": 4, "large_diverge_at": 5})
    assert s.judge("load", "good", 1).verdict is Verdict.PASS
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.FAIL
    assert "method 'good', C=4:" in j.message and "diverge from the baseline engine's output" in j.message
    assert "at token 5:" in j.message and "(id 99)" in j.message and "prompt " in j.message
    # the plain greedy pass sees nothing
    assert s.judge("equivalence", "good").verdict is Verdict.PASS


def test_drafts_dropped_only_in_large_batches_fail_the_level_acceptance(tmp_path):
    stored(tmp_path)
    s = session(tmp_path, good={"large_from": 4, "large_accepted": 0.8})
    assert s.judge("load", "good", 1).verdict is Verdict.PASS
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.FAIL
    assert "C=4: mean acceptance length: measured 1.79" in j.message and "acceptance_rtol 0.01" in j.message


def test_load_acceptance_rtol_replaces_acceptance_rtol_for_the_levels(tmp_path):
    stored(tmp_path)
    looser = PROFILE.replace(
        "acceptance_rtol = 0.01", "acceptance_rtol = 0.01\nload_acceptance_rtol = 0.15\nposition_rtol = 0.3"
    )
    s = session(tmp_path, looser, good={"large_from": 4, "large_accepted": 0.8})
    assert s.judge("load", "good", 4).verdict is Verdict.PASS  # 1.8 against 2.0 x 0.85


def test_a_sampled_load_is_judged_on_acceptance_only_and_says_so(tmp_path):
    sampled = PROFILE + "[speedup]\ntemperature = 0.7\n"
    stored(tmp_path, sampled)
    s = session(tmp_path, sampled, good={"large_from": 4, "large_diverge_at": 5})
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.PASS  # outputs are samples: not compared
    said = {r.metric: r.unit for r in j.rows}
    assert said["identical"].startswith("not compared: the load samples at T 0.7")


def test_outputs_written_before_the_engine_wedged_read_as_outputs_not_only_as_a_stall(tmp_path):
    stored(tmp_path)
    wedging = PROFILE + "[engine]\nstall_timeout_s = 1\n"
    # wrong tokens at C = 4, then the second closed loop there (the first trial) stops half-way
    s = session(tmp_path, wedging, good={"large_from": 4, "large_diverge_at": 5, "stalls_after": 1})
    s.judge("load", "baseline", 4)
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.FAIL, j.message
    assert "C=4:" in j.message and "at token 5:" in j.message and "prompt " in j.message
    assert "then the engine stopped (no progress for" in j.message


WEDGED = PROFILE + "[engine]\nstall_timeout_s = 1\n[speedup]\ntrials = 2\nmeasure_step_costs = false\n"


def as_the_plugin_runs(s, gate, method, level=None):
    """A gate test as the plugin runs it: its method's engine first (the judge fixture's boot), then the check."""
    s.boot(method, gate_named(gate))
    return s.judge(gate, method, level)


@pytest.mark.parametrize("wrong", [True, False], ids=["wrong tokens, then a stall", "a stall alone"])
def test_after_the_engine_stalled_at_the_top_level_each_load_level_is_judged_on_what_it_streamed(tmp_path, wrong):
    """The warm-up (a closed loop at C = 4) and the C = 1 trials end, the first trial at C = 4 stops half-way.
    Before issue 74 the boot of every later test of the method raised, and every load level read 'not judged'."""
    stored(tmp_path)
    bug = {"large_from": 4, "large_diverge_at": 5} if wrong else {}
    s = session(tmp_path, WEDGED, good={**bug, "stalls_after": 3})  # the warm-up, two trials at C = 1, then C = 4
    for level in (1, 4):
        as_the_plugin_runs(s, "speedup", "baseline", level)
        as_the_plugin_runs(s, "load", "baseline", level)
    as_the_plugin_runs(s, "speedup", "good", 1)
    with pytest.raises(EngineStalled):
        as_the_plugin_runs(s, "speedup", "good", 4)
    done = as_the_plugin_runs(s, "load", "good", 1)  # the level that ended: judged as usual, its acceptance too
    assert done.verdict is Verdict.PASS and done.record["mean_acceptance_length"] == pytest.approx(2.0), done.message
    if wrong:  # what the warm-up and the cut trial streamed: level, prompt, position and both tokens, then the stop
        j = as_the_plugin_runs(s, "load", "good", 4)
        assert j.verdict is Verdict.FAIL, j.message
        assert "method 'good', C=4:" in j.message and "diverge from the baseline engine's output" in j.message
        assert "at token 5: baseline" in j.message and "(id 99)" in j.message and "prompt " in j.message
        assert "(warm-up, request" in j.message or "cut short by the stop" in j.message
        assert j.message.index("at token 5") < j.message.index("then the engine stopped (no progress for")
        rows = {r.metric: r.value for r in j.rows}
        assert rows["requests"] > rows["identical"] and rows["diverged"] > 0
    else:  # nothing wrong in what it streamed: the stop stands, saying what was compared
        with pytest.raises(EngineStalled, match=r"not judged: .*The \d+ requests it streamed at C=4 before it stopped"):
            as_the_plugin_runs(s, "load", "good", 4)
    with pytest.raises(EngineStalled, match="not judged"):  # the gates that need the engine still say so
        as_the_plugin_runs(s, "memory", "good")
    (line,) = [line for line in summary_lines(s) if line.startswith("  good ")]  # the engine's line: wrong, then died
    assert re.search(
        r"good +load C=4: [1-9]\d* prompts diverged, then died: no progress" if wrong else r"good +died:", line
    )
