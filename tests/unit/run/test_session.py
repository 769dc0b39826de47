"""Verdicts, canaries and baseline policy, driven directly through the session with fake engines."""

import re

import pytest

from specgate.checks import Verdict
from specgate.profile import load_profile
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

pytestmark = (
    pytest.mark.needs_vllm
)  # fake gate sessions: a boot tokenizes with the target's transformers tokenizer (imports torch)

PROFILE = fake_profile("""
concurrency = [1, 4]
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
[methods.worse]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
canary_of = { acceptance = "good", speedup = "good" }
[methods.self]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
floors = { acceptance_rate = 0.98 }
[tolerance]
machine_rtol = 0.35
""")
CATEGORY = "doc_prose"


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "fake.toml"
    path.write_text(PROFILE)
    return load_profile(path, tmp_path)


def session(profile, tmp_path, *methods, update=False, strict=False, hardware=None, **behaviours):
    machine = behaviours.pop("machine", {})
    script = FakeScript.from_dict({"machine": machine, "methods": behaviours})
    return fake_session(
        profile,
        tmp_path,
        script,
        methods=list(methods) or None,
        update_baselines=update,
        strict=strict,
        hardware=hardware,
    )


def stored(profile, tmp_path, *methods, hardware=None, **behaviours):
    """An update run of these methods' acceptance, speedup and memory; returns its old -> new table."""
    s = session(profile, tmp_path, *methods, update=True, hardware=hardware, **behaviours)
    for m in ("baseline", *methods):
        for c in profile.concurrency:
            s.judge("speedup", m, c)
        if m != "baseline":
            s.judge("acceptance", m, CATEGORY)
        s.judge("memory", m)
    text = s.write_baselines()
    s.release_all()
    return text


def test_a_missing_baseline_skips_saying_how_to_create_it_and_fails_under_strict(profile, tmp_path):
    j = session(profile, tmp_path, "good").judge("acceptance", "good", CATEGORY)
    assert (
        j.verdict is Verdict.SKIP
        and "`a gate run with profile fake, update_baselines`" in j.message  # fake_session: settings by name
        and "no stored acceptance baseline" in j.message
    )
    strict = session(profile, tmp_path, "good", strict=True).judge("acceptance", "good", CATEGORY)
    assert strict.verdict is Verdict.FAIL and strict.message.endswith("(strict)")


def test_stored_acceptance_passes_unchanged_and_fails_a_worse_drafter_naming_every_number(profile, tmp_path):
    stored(profile, tmp_path, "good")
    assert session(profile, tmp_path, "good").judge("acceptance", "good", CATEGORY).passed
    worse = session(profile, tmp_path, "good", good={"accepted": 0.75}).judge("acceptance", "good", CATEGORY)
    assert worse.verdict is Verdict.FAIL
    assert "mean acceptance length: measured 1.75, baseline 2 (vLLM" in worse.message and "floor 1.9" in worse.message
    headline = [r for r in worse.rows if r.metric == "mean_acceptance_length"][0]
    assert (headline.value, headline.baseline, headline.bound) == (1.75, 2.0, pytest.approx(1.9))


def test_an_update_run_replaces_what_it_measured_instead_of_failing_on_it(profile, tmp_path):
    stored(profile, tmp_path, "good")
    update = session(profile, tmp_path, "good", update=True, good={"accepted": 0.8})
    assert update.judge("acceptance", "good", CATEGORY).passed
    assert "mean_acceptance_length" in update.write_baselines()


def test_a_profile_floor_fails_in_every_run_even_an_update(profile, tmp_path):
    j = session(profile, tmp_path, "self", update=True).judge("acceptance", "self", CATEGORY)
    assert j.verdict is Verdict.FAIL and "acceptance rate (profile floor): measured 0.5" in j.message


def test_a_canary_passes_only_when_the_gate_fails_it(profile, tmp_path):
    stored(profile, tmp_path, "good")
    caught = session(profile, tmp_path, "worse", worse={"accepted": 0.5}).judge("acceptance", "worse", CATEGORY)
    assert caught.passed and caught.message.startswith("canary caught: 'worse'"), caught.message
    assert "configuration of 'good'" in caught.message and "mean acceptance length" in caught.message
    toothless = session(profile, tmp_path, "worse").judge("acceptance", "worse", CATEGORY)
    assert toothless.verdict is Verdict.FAIL and "the acceptance gate cannot fail here" in toothless.message


def test_a_canary_is_judged_against_the_method_it_mimics_measured_in_the_same_run(profile, tmp_path):
    # nothing stored at all: the parent's figures of this run are the reference, paired and decisive
    run = session(profile, tmp_path, "good", "worse", worse={"accepted": 0.5, "step_cost": 1.2 * 1.6})
    assert run.judge("acceptance", "good", CATEGORY).verdict is Verdict.SKIP  # the parent itself: no baseline
    caught = run.judge("acceptance", "worse", CATEGORY)
    assert caught.passed and caught.basis == ""
    run.judge("speedup", "good", 4)
    assert run.judge("speedup", "worse", 4).passed
    toothless = session(profile, tmp_path, "good", "worse")
    toothless.judge("acceptance", "good", CATEGORY)
    j = toothless.judge("acceptance", "worse", CATEGORY)
    assert j.verdict is Verdict.FAIL and "passed the checks against 'good''s figures" in j.message
    toothless.judge("speedup", "good", 4)
    j = toothless.judge("speedup", "worse", 4)
    assert j.verdict is Verdict.FAIL and "the speedup gate cannot fail here" in j.message
    assert re.search(r"figures \(speedup [0-9.]+ \[[0-9.]+, [0-9.]+\] against [0-9.]+", j.message), j.message


def test_a_canary_held_to_another_machines_or_the_coarse_baseline_is_not_decisive_never_a_failure(profile, tmp_path):
    stored(profile, tmp_path, "good", hardware="other-machine")
    # its parent not in this run: another machine's portable figures and coarse speedups are all there is
    here = session(profile, tmp_path, "worse", hardware="this-machine")
    acceptance, speedup = here.judge("acceptance", "worse", CATEGORY), here.judge("speedup", "worse", 4)
    for j in (acceptance, speedup):
        assert j.verdict is Verdict.SKIP and j.message.startswith("not decisive here: canary 'worse'"), j.message
    assert acceptance.basis == "portable" and speedup.basis == "coarse"
    # ... but one the wide band still catches is caught
    caught = session(profile, tmp_path, "worse", hardware="this-machine", worse={"step_cost": 1.2 * 2.5})
    j = caught.judge("speedup", "worse", 4)
    assert j.passed and j.basis == "coarse"
    assert j.messages[0].startswith("canary caught: 'worse'") and j.messages[1].startswith("coarse judgement: ")


def test_a_canary_without_the_baseline_it_mimics_skips_naming_that_method(profile, tmp_path):
    j = session(profile, tmp_path, "worse").judge("acceptance", "worse", CATEGORY)
    assert j.verdict is Verdict.SKIP and "method 'good'" in j.message


def test_speedup_floor_fails_a_slower_proposer_and_passes_an_unchanged_one(profile, tmp_path):
    stored(profile, tmp_path, "good")
    assert session(profile, tmp_path, "good").judge("speedup", "good", 4).passed
    slow = session(profile, tmp_path, "good", good={"step_cost": 1.2 * 1.4}).judge("speedup", "good", 4)
    assert slow.verdict is Verdict.FAIL and "is below the floor 1.42 (stored 1.67 for 'good'" in slow.message
    row = [r for r in slow.rows if r.metric == "speedup"][0]
    assert row.bound == pytest.approx(1.67 * 0.85, abs=0.01) and row.ci_high < row.bound


def test_speedups_from_another_machine_or_load_are_judged_coarsely(profile, tmp_path):
    stored(profile, tmp_path, "good")
    j = session(profile, tmp_path, "good", machine={"speed": 2}).judge("speedup", "good", 1)
    assert (
        j.passed and j.basis == "coarse" and "not the machine (or the load) the speedups were stored under" in j.message
    )
    assert "coarse_speedup_rtol 0.35" in j.message
    row = [r for r in j.rows if r.metric == "speedup"][0]
    assert row.bound == pytest.approx(1.667 * 0.65, abs=0.01)  # the coarse floor, not speedup_rtol's


def test_the_coarse_band_still_fails_a_proposer_that_halves_throughput(profile, tmp_path):
    stored(profile, tmp_path, "good")
    tenth = session(profile, tmp_path, "good", machine={"speed": 2}, good={"step_cost": 1.2 / 0.9})
    assert tenth.judge("speedup", "good", 4).passed  # a 10 % loss is inside the coarse band
    half = session(profile, tmp_path, "good", machine={"speed": 2}, good={"step_cost": 2.4})
    j = half.judge("speedup", "good", 4)
    assert j.verdict is Verdict.FAIL and "below the coarse floor 1.08" in j.message and j.basis == "coarse"


def test_a_machine_without_its_own_file_judges_portable_figures_against_another_machines(profile, tmp_path):
    stored(profile, tmp_path, "good", hardware="cpu-other-2c")
    here = session(profile, tmp_path, "good", hardware="cpu-new-2c")
    acceptance = here.judge("acceptance", "good", CATEGORY)
    assert acceptance.passed and acceptance.basis == "portable"
    worse = session(profile, tmp_path, "good", hardware="cpu-new-2c", good={"accepted": 0.75})
    failed = worse.judge("acceptance", "good", CATEGORY)
    there = here.baselines.identity.id  # the same CPU under another name: another machine's file all the same
    assert failed.verdict is Verdict.FAIL
    assert f"stored on cpu-other-2c, machine {there} (cpu-other-2c.{there}.json)" in failed.message
    here.boot("baseline")
    here.judge("memory", "baseline")
    memory = here.judge("memory", "good")
    judged = {r.metric for r in memory.rows if r.bound is not None}
    assert memory.passed and "kv_tokens_lost" in judged and "process_mib" not in judged  # machine figure: not judged
    assert here.judge("speedup", "good", 1).basis == "coarse"
    (header,) = here.baselines.header()  # one line
    assert header.startswith(
        "speed judged coarsely (coarse_speedup_rtol 0.35), step cost and process memory not judged, portable figures "
        f"(acceptance, drafter weights, KV tokens lost) held to another machine's baselines: cpu-other-2c.{there}.json"
    )
    assert header.endswith("without baselines of its own: `a gate run with profile fake, update_baselines` stores them")


def test_an_update_on_a_disturbed_machine_stores_no_speed_figure_at_any_level(profile, tmp_path):
    path = profile.path
    path.write_text(path.read_text() + "\n[speedup]\ninterleave_baseline = true\n")
    profile = load_profile(path, tmp_path)
    s = session(profile, tmp_path, "good", update=True, machine={"disturbed": True})
    for c in profile.concurrency:
        s.judge("speedup", "baseline", c)
    s.judge("speedup", "good", 1)
    s.judge("acceptance", "good", CATEGORY)
    text = s.write_baselines()
    assert "speed figures not stored, at any level: the machine was disturbed" in text and "C=1" in text
    written = s.baselines.path.read_text()
    assert '"acceptance"' in written and '"speedup"' not in written


def test_memory_weights_the_checkpoint_does_not_explain_fail_in_every_run(profile, tmp_path):
    s = session(profile, tmp_path, "good", update=True, good={"drafter_mib": 5.0})
    s.boot("baseline")
    s.judge("memory", "baseline")
    j = s.judge("memory", "good")
    assert j.verdict is Verdict.FAIL and "the engine holds more than the checkpoint" in j.message


def test_a_diverging_method_fails_equivalence_naming_prompt_position_and_tokens(profile, tmp_path):
    s = session(profile, tmp_path, "good", good={"diverge_at": 3})
    j = s.judge("equivalence", "good")
    assert j.verdict is Verdict.FAIL and "at token 3: baseline" in j.message and "(id 99)" in j.message
    assert {r.metric: r.value for r in j.rows}["diverged"] == 60


def test_each_engine_boots_once_and_the_previous_one_is_released(profile, tmp_path):
    s = session(profile, tmp_path, "good", "self")
    s.judge("acceptance", "good", CATEGORY)
    s.judge("acceptance", "self", CATEGORY)
    assert s.host.records["good"].shutdown is not None  # released when 'self' booted
    assert s.judge("lifecycle", "self").passed and s.judge("lifecycle", "good").passed
    assert [r.boots for r in s.host.records.values()] == [1, 1, 1]


def test_every_divergence_records_the_baselines_logprob_gap_for_calibrating_the_margin(profile, tmp_path):
    near = session(profile, tmp_path, "good", good={"diverge_at": 2, "wrong_token": 98})
    j = near.judge("equivalence", "good")
    gaps = [r for r in j.rows if r.metric == "logprob_gap"]
    assert (
        j.verdict is Verdict.FAIL and len(gaps) == 60 and gaps[0].value == pytest.approx(2.9) and gaps[0].position == 2
    )


def test_a_lossy_method_is_judged_on_its_declared_share_of_diverging_prompts(tmp_path):
    from specgate.errors import ProfileError

    fly = 'speculative_config = { method = "ngram", num_speculative_tokens = 2, rejection_sample_method = "fly" }\n'
    path = tmp_path / "lossy.toml"
    path.write_text(fake_profile("[methods.fly]\n" + fly))
    with pytest.raises(ProfileError, match="lossy verification .* declare `lossy = { max_diverged_share"):
        load_profile(path, tmp_path)
    path.write_text(fake_profile("[methods.fly]\n" + fly + "lossy = { max_diverged_share = 1.0 }\n"))
    lossy = load_profile(path, tmp_path)
    j = session(lossy, tmp_path, "fly", fly={"diverge_at": 3}).judge("equivalence", "fly")
    assert j.passed and j.basis == "lossy" and "judged on its declared tolerance" in j.message
    path.write_text(fake_profile("[methods.fly]\n" + fly + "lossy = { max_diverged_share = 0.5 }\n"))
    strict = session(load_profile(path, tmp_path), tmp_path, "fly", fly={"diverge_at": 3}).judge("equivalence", "fly")
    assert strict.verdict is Verdict.FAIL and "more than the declared lossy max_diverged_share 0.5" in strict.message


def test_the_speedup_summary_gates_the_geometric_mean_and_a_crossover_that_dropped(profile, tmp_path):
    s = session(profile, tmp_path, "good", update=True)
    for c in profile.concurrency:
        s.judge("speedup", "baseline", c)
    first = s.judge("speedup", "good")
    assert first.key == "summary" and first.record == {
        "geomean_speedup": pytest.approx(1.6667, abs=1e-3),
        "top_level": 4,
    }
    s.write_baselines()
    assert session(profile, tmp_path, "good").judge("speedup", "good").passed
    slow = session(profile, tmp_path, "good", good={"step_cost": 2.4})  # half the speed: slower than no speculation
    j = slow.judge("speedup", "good")
    assert j.verdict is Verdict.FAIL and j.record["crossover_concurrency"] == 1
    assert "geometric mean of its speedups over C=[1, 4] is 0.833 (of their upper bounds" in j.message
    assert "now slower than the baseline engine from C=1" in j.message and "stored: none up to C=4" in j.message
    assert any("speedup: geometric mean 0.83, crossover C=1" in line for line in slow.summary_lines())


def test_the_geometric_mean_fails_only_when_the_levels_upper_bounds_say_so(profile, tmp_path, monkeypatch):
    import dataclasses

    from specgate.figures import stats
    from specgate.run import measurements

    s = session(profile, tmp_path, "good", update=True)  # stored: 1.667 at both levels, floor 1.5
    for c in profile.concurrency:
        s.judge("speedup", "baseline", c)
    s.judge("speedup", "good")
    s.write_baselines()
    measured = measurements.MeasurementStore.speedup

    def judged_with(low, value, high):
        def speedup(self, name, concurrency, repeat=None):
            result = measured(self, name, concurrency, repeat)
            if name != "good":
                return result
            return dataclasses.replace(result, estimate=stats.Estimate(value, low, high, 4))

        monkeypatch.setattr(measurements.MeasurementStore, "speedup", speedup)
        return session(profile, tmp_path, "good").judge("speedup", "good")

    noisy = judged_with(1.2, 1.4, 1.6)  # the point estimate is below the floor, the evidence is not
    assert noisy.passed and noisy.rows[0].ci_high == pytest.approx(1.6)
    slower = judged_with(1.2, 1.4, 1.45)
    assert slower.verdict is Verdict.FAIL and "is 1.400 (of their upper bounds 1.450), below 1.500" in slower.message


def test_a_crossover_that_drops_only_within_the_level_tolerance_of_break_even_is_noted_not_failed(profile, tmp_path):
    s = session(profile, tmp_path, "good", update=True, good={"step_cost": 1.95})  # stored 2 / 1.95 = 1.03
    for c in profile.concurrency:
        s.judge("speedup", "baseline", c)
    s.judge("speedup", "good")
    s.write_baselines()
    # now 2 / 2.105 = 0.95: slower than the baseline engine, but inside speedup_rtol (0.15) of 1.0
    even = session(profile, tmp_path, "good", good={"step_cost": 2.105}).judge("speedup", "good")
    row = next(r for r in even.rows if r.metric == "crossover_concurrency")
    assert even.passed and even.record["crossover_concurrency"] == 1
    assert row.unit == "was none up to C=4; within speedup_rtol 0.15 of break-even: not a failure"


def test_cost_per_million_tokens_and_the_saving_at_the_runners_price(profile, tmp_path):
    priced = profile.path.read_text() + "\n[cost]\nusd_per_hour = 3.6\n"
    profile.path.write_text(priced)
    j = session(load_profile(profile.path, tmp_path), tmp_path, "good").judge("speedup", "good", 1)
    # the fake baseline engine emits 100 tok/s, 'good' 2 tokens per 12 ms: 166.7 tok/s
    assert j.record["baseline_usd_per_mtok"] == pytest.approx(3.6 / (100 * 3600) * 1e6)
    assert j.record["usd_per_mtok"] == pytest.approx(6.0, rel=1e-3) and j.record["cost_saving"] == pytest.approx(
        0.4, abs=1e-3
    )
    assert {r.metric: r.unit for r in j.rows}["usd_per_mtok"] == "USD / M tokens"


def test_what_cannot_be_measured_or_compared_like_for_like_is_said_in_the_table(profile, tmp_path):
    s = session(profile, tmp_path, "good", good={"runner": "v2", "timers": False, "chunk_steps": 3})
    j = s.judge("speedup", "good", 4)
    notes = {r.metric: r.unit for r in j.rows if r.value is None}
    assert notes["expected_speedup"] == "not measured: the model runner offers no step timers (vllm_compat.step_timers)"
    assert notes["runner"].startswith("v2 vs baseline v1: across model runners, not like for like")
    assert j.record["merged_stream_chunks"] > 0  # 3 steps per chunk: ITL from the stream is not per step
    plain = session(profile, tmp_path, "good").judge("speedup", "good", 4)
    assert [(r.metric, r.unit) for r in plain.rows if r.value is None] == [("runner", "v1")]  # like for like, named
    assert "merged_stream_chunks" not in plain.record


def test_every_speedup_row_names_its_runner_and_a_comparison_across_runners_is_marked_in_the_summary(profile, tmp_path):
    from specgate.report import headline
    from specgate.run.results import measurement_table

    s = session(profile, tmp_path, "good", "self", good={"runner": "v1"}, self={"runner": "v2"})
    for c in profile.concurrency:
        s.judge("speedup", "baseline", c)
    rows = {
        (j.method, j.key): {r.metric: r.unit for r in j.rows if r.metric == "runner"}
        for j in [s.judge("speedup", m, c) for m in ("good", "self") for c in profile.concurrency]
        + [s.judge("speedup", "self")]
    }
    base = s.judgements[("baseline", "speedup", "C=1")]
    assert {r.metric: r.unit for r in base.rows}["runner"] == "v1"
    assert rows[("good", "C=1")] == {"runner": "v1"} and rows[("self", "summary")]["runner"].startswith(
        "v2 vs baseline v1"
    )
    table = measurement_table(s.judgements.values())
    shown = table[(table["metric"] == "runner") & (table["method"] == "self")].to_dict("records")[0]
    assert headline(shown).startswith("v2 vs baseline v1: across model runners")  # the report's table cell
    summary = s.summary_lines()
    assert any(line.startswith("speedups across model runners: self (v2 vs baseline v1)") for line in summary)
    assert any(
        "speedup (model runner v2 vs baseline v1: across runners, not like for like): C=1" in line for line in summary
    )
    assert sum("speedup (model runner" in line for line in summary) == 1  # good ran v1 as the baseline engine did


def test_the_step_cost_check_fails_a_slower_drafter_that_the_wall_clock_speedup_does_not_see(profile, tmp_path):
    from dataclasses import replace

    gated = replace(profile, tolerance=replace(profile.tolerance, draft_cost_tol=0.05, verify_cost_rtol=0.10))
    stored(gated, tmp_path, "good")
    same = session(gated, tmp_path, "good").judge("speedup", "good", 4)
    assert same.passed
    row = next(r for r in same.rows if r.metric == "draft_cost")
    assert row.value == pytest.approx(0.002 / 0.009, abs=1e-6) and row.bound == pytest.approx(row.baseline + 0.05)
    # each drafting call 0.5 ms slower: 5.6 % of a verification step; the speedup unchanged
    slower = session(gated, tmp_path, "good", good={"draft_call_s": 0.0025}).judge("speedup", "good", 4)
    assert (
        slower.verdict is Verdict.FAIL
        and "step cost: a drafting call costs 0.278 of a verification step, stored "
        "0.222; ceiling 0.272 (draft_cost_tol 0.05)"
        in slower.message
        and "below the" not in slower.message
    )
    assert next(r for r in slower.rows if r.metric == "draft_cost").failing
    ungated = session(profile, tmp_path, "good", good={"draft_call_s": 0.0025}).judge("speedup", "good", 4)
    assert ungated.passed  # tolerances 0: shown, not gated


def test_the_step_cost_is_held_to_this_machines_own_figure_also_when_its_speed_moved(profile, tmp_path):
    from dataclasses import replace

    gated = replace(profile, tolerance=replace(profile.tolerance, draft_cost_tol=0.05))
    stored(gated, tmp_path, "good")
    # the baseline engine now runs 2x its stored speed: the speedup is judged coarsely, the step cost (two
    # timers of one engine) as before
    same = session(gated, tmp_path, "good", machine={"speed": 2}).judge("speedup", "good", 4)
    assert same.passed and same.basis == "coarse"
    slower = session(gated, tmp_path, "good", machine={"speed": 2}, good={"draft_call_s": 0.0025})
    j = slower.judge("speedup", "good", 4)
    assert j.verdict is Verdict.FAIL and j.basis == "coarse"
    assert "step cost: a drafting call costs 0.278 of a verification step, stored 0.222" in j.message
    # another machine's figure is shown, never a ceiling
    stored(gated, tmp_path, "good", hardware="cpu-other-2c")
    elsewhere = session(gated, tmp_path, "good", hardware="cpu-new-2c", good={"draft_call_s": 0.0025})
    k = elsewhere.judge("speedup", "good", 4)
    row = next(r for r in k.rows if r.metric == "draft_cost")
    assert k.passed and row.bound is None and not row.failing and row.baseline == pytest.approx(0.222, abs=1e-3)


def test_a_profile_needing_a_cpu_flag_this_machine_lacks_skips_every_engine_saying_so(tmp_path):
    from specgate.errors import NotMeasurable

    path = tmp_path / "flags.toml"
    path.write_text(PROFILE + '[engine]\ncpu_flags = ["no_such_flag_here"]\n')
    s = session(load_profile(path, tmp_path), tmp_path, "good")
    with pytest.raises(
        NotMeasurable,
        match=r"profile fake needs a CPU with no_such_flag_here \(\[engine\] cpu_flags in .*"
        r"has none of the flags no_such_flag_here",
    ):
        s.boot("good")
    assert not s.host.engines_booted


def test_the_summary_says_where_the_time_went(profile, tmp_path):
    s = session(profile, tmp_path, "good", "worse")
    s.boot("good")
    s.judge("acceptance", "good", CATEGORY)
    s.boot("worse")
    s.judge("acceptance", "worse", CATEGORY)  # a canary: counted apart
    line = next(x for x in s.summary_lines() if x.startswith("time: "))
    assert line.startswith("time: boots ") and "acceptance " in line and "canaries " in line and "total " in line
    assert set(s.spent) == {"boots", "acceptance", "canaries", "models"}  # models: resolving and hashing them
    assert re.search(r"models \d+ ms", line)
    s.release_all()


def test_speed_in_tritons_interpreter_is_measured_and_shown_never_judged_nor_stored(profile, tmp_path, monkeypatch):
    """[engine] model_runner = "v2" on a CPU without triton-cpu (Triton's interpreter stands in): a drafter three
    times slower, which fails 'good''s stored speedup on a profile judged as usual, is a skip saying why, with its
    figures shown; an update stores no speed figure; the load gate still judges the same trials."""
    import dataclasses

    from specgate.vllm_compat import interpreted

    monkeypatch.setattr(interpreted, "triton_cpu_installed", lambda: False)
    stored(profile, tmp_path, "good")
    slow = {"good": {"step_cost": 3.6}}
    assert session(profile, tmp_path, "good", **slow).judge("speedup", "good", 4).verdict is Verdict.FAIL
    v2 = dataclasses.replace(profile, model_runner="v2")
    run = session(v2, tmp_path, "good", **slow)
    for method, level in (("baseline", 4), ("good", 1), ("good", 4), ("good", None)):
        j = run.judge("speedup", method, level)
        assert j.verdict is Verdict.SKIP and j.record is None, (method, level, j.message)
        assert "speed not judged" in j.message and "Triton's interpreter standing in for triton-cpu" in j.message
        assert "(measured: " in j.message and j.rows and not any(r.headline for r in j.rows), j.message
    assert "(measured: speedup 0." in run.judgements[("good", "speedup", "C=4")].message
    load = run.judge("load", "good", 4)  # its outputs judged; its acceptance has no stored figure here
    assert "speed not judged" not in load.message and any(r.metric == "identical" for r in load.rows), load.message
    update = session(v2, tmp_path, "good", update=True)
    update.judge("speedup", "good", 4)
    assert "speedup" not in update.measured.get("good", {})
