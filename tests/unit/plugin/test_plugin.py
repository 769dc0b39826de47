"""The pytest plugin with a fake engine: ordering, one boot per method, boot failures, skips, summary."""

import json
import textwrap

import pytest

from specgate.store.run_record import DIED, read

from ..fakes import ROOT, fake_profile

pytest_plugins = ["pytester"]

# A test with gate_dir / speed_dir runs whole gates in child pytest processes: a gate tokenizes its
# prompts with the target's transformers tokenizer, and transformers imports torch (about 10 s a run
# on 2 cores). Those are marked needs_vllm; runs that stop before the first engine are not.

PROFILE = fake_profile("""
[equivalence]
mode = "exact"
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
[methods.wrong]
speculative_config = { method = "ngram", num_speculative_tokens = 3 }
[methods.broken]
speculative_config = { method = "ngram", num_speculative_tokens = 4 }
[methods.unsupported]
speculative_config = { method = "ngram", num_speculative_tokens = 5 }
expected_boot_error = "not supported on CPU"
""")

# How the fake engines behave (specgate.testing): `wrong` emits a different token at position 3,
# `broken` and `unsupported` fail to boot with different errors.
SCRIPT = {
    "methods": {
        "wrong": {"diverge_at": 3},
        "broken": {"boot_error": "ValueError: bad draft"},
        "unsupported": {"boot_error": "NotImplementedError: medusa is not supported on CPU"},
    }
}


def script(monkeypatch, **changes):
    """Set $SPECGATE_FAKE for the subprocess runs: SCRIPT with `machine` / per-method changes."""
    data = json.loads(json.dumps(SCRIPT))
    data["machine"] = changes.pop("machine", {})
    for name, behaviour in changes.items():
        data["methods"].setdefault(name, {}).update(behaviour)
    monkeypatch.setenv("SPECGATE_FAKE", json.dumps(data))


@pytest.fixture
def gate_dir(pytester, monkeypatch):
    script(monkeypatch)
    pytester.makefile(".toml", fake=PROFILE)
    (pytester.path / "fixtures" / "profiles").mkdir(parents=True)  # marks pytester.path as the project root
    gate = pytester.mkpydir("gate")
    for name in ("test_equivalence.py", "test_acceptance.py", "test_memory.py", "test_lifecycle.py"):
        (gate / name).write_text((ROOT / "tests" / "gate" / name).read_text())
    (pytester.path / "pytest.ini").write_text(
        textwrap.dedent("""
            [pytest]
            markers = gpu: boots an engine
            addopts = --strict-markers -p no:cacheprovider
        """)
    )
    return pytester


def run(pytester, *args):
    return pytester.runpytest_subprocess(
        "-p", "specgate.testing", "-m", "gpu", "--specgate-profile", str(pytester.path / "fake.toml"), "-rs", *args
    )


@pytest.mark.needs_vllm
def test_each_engine_boots_once_in_method_order_and_failures_stay_with_their_method(gate_dir):
    result = run(gate_dir)
    # baseline: reference + lifecycle; good: equivalence + lifecycle; wrong: only lifecycle passes.
    # wrong's equivalence fails; broken's tests error at setup (boot); unsupported's skip; the
    # acceptance tests of good and wrong (5 categories each) and their memory tests skip: no
    # baseline is stored yet; the baseline engine's memory reading passes.
    result.assert_outcomes(passed=6, failed=1, errors=2 + 5 + 1, skipped=2 + 5 + 10 + 1 + 2)
    result.stdout.fnmatch_lines(["fake engines booted: baseline, good, wrong, broken, unsupported"])
    result.stdout.fnmatch_lines(
        ["*prompt code_continuation-01 (code_continuation) at token 3: baseline*vs method*id 99*"]
    )
    result.stdout.fnmatch_lines(["*failed to boot: ValueError: bad draft*", "*engine log tail*"])
    result.stdout.fnmatch_lines(
        [
            "*SKIPPED*method 'unsupported' cannot run on this engine; vLLM said: NotImplementedError: medusa is not "
            "supported on CPU*"
        ]
    )
    result.stdout.fnmatch_lines(["*engines booted: 3 (methods run: 2 + 1 baseline; 2 failed to boot)*"])
    result.stdout.fnmatch_lines(["*60 of 60 prompts diverge*", "*and 50 more*"])


@pytest.mark.needs_vllm
def test_method_subset_runs_only_those_engines(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good")
    assert result.parseoutcomes().get("passed") == 5, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*no stored acceptance baseline for method 'good', code_continuation in*--update-baselines*"]
    )
    result.stdout.fnmatch_lines(["fake engines booted: baseline, good"])


def test_bad_options_are_usage_errors_naming_the_option(gate_dir):
    result = run(gate_dir, "--specgate-methods", "goood")
    result.stderr.fnmatch_lines(["*--specgate-methods*has no method 'goood' (did you mean 'good'?)*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = gate_dir.runpytest_subprocess("-m", "gpu", "--specgate-profile", "no-such-profile")
    result.stderr.fnmatch_lines(["*--specgate-profile: no profile named 'no-such-profile'*"])


def test_a_run_whose_every_engine_is_skipped_before_booting_says_why_and_writes_its_results(gate_dir):
    # a profile this CPU cannot run (cpu-tiny-bf16 on a CPU without native bf16): nothing boots, and the
    # summary still says why in one line, under -q as a user runs it (pytest's -rs is not needed)
    gate_dir.makefile(".toml", flags=PROFILE + '[engine]\ncpu_flags = ["no_such_flag_here"]\n')
    result = gate_dir.runpytest_subprocess(
        "-p", "specgate.testing", "-m", "gpu", "-q", "--specgate-profile", str(gate_dir.path / "flags.toml"),
        "--specgate-methods", "good", "--specgate-out", str(gate_dir.path / "out"),
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.OK and result.parseoutcomes().get("passed") is None, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*skipped, mostly (*): profile fake needs a CPU with no_such_flag_here ([[]engine] cpu_flags in *"]
    )
    result.stdout.fnmatch_lines(["engines booted: 0 *"])
    assert "has none of the flags no_such_flag_here" in (gate_dir.path / "out" / "summary.md").read_text()


def baseline_file(pytester):
    files = list((pytester.path / "baselines" / "fake").glob("*.json"))
    return files[0] if files else None


@pytest.mark.needs_vllm
def test_update_baselines_writes_then_an_unchanged_rerun_passes(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    result.assert_outcomes(passed=4 + 5 + 2)
    result.stdout.fnmatch_lines(
        ["*baselines written to*fake*", "*good*acceptance*code_continuation*values)*new entry*"]
    )
    path = baseline_file(gate_dir)
    stored = path.read_text()
    assert '"vllm"' in stored and '"git_revision"' in stored
    rerun = run(gate_dir, "--specgate-methods", "good", "--specgate-strict")
    rerun.assert_outcomes(passed=4 + 5 + 2)
    assert path.read_text() == stored  # a plain run never writes


@pytest.mark.needs_vllm
def test_update_is_refused_when_a_correctness_test_failed(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good,wrong", "--update-baselines")
    result.stdout.fnmatch_lines(
        [
            "*refusing to write baselines: 1 correctness test(s) "
            "failed*test_method_reproduces_baseline_greedy_output*wrong*"
        ]
    )
    assert baseline_file(gate_dir) is None


@pytest.mark.needs_vllm
def test_a_memory_consistency_failure_names_both_figures_and_blocks_no_update(gate_dir, monkeypatch):
    # the worker reports 3 MiB of drafter weights for a method whose checkpoint holds none (ngram)
    script(monkeypatch, good={"drafter_mib": 3.0})
    result = run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    result.assert_outcomes(passed=4 + 5 + 1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_memory_overhead_within_baseline[[]good[]]*",
            "*measured in the engine (3.000 MiB) and computed from its checkpoint (0.000 MiB)*",
        ]
    )
    result.stdout.fnmatch_lines(["*baselines written to*", "*good*acceptance*code_continuation*new entry*"])
    assert "refusing" not in result.stdout.str()  # memory is no correctness test
    assert "code_continuation" in baseline_file(gate_dir).read_text()


@pytest.mark.needs_vllm
def test_missing_baseline_fails_under_strict(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good", "--specgate-strict")
    result.assert_outcomes(passed=5, failed=6)
    result.stdout.fnmatch_lines(["*no stored acceptance baseline*(--specgate-strict)*"])


@pytest.fixture
def speed_dir(gate_dir):
    """The fake gate with the speedup test and two healthy methods."""
    (gate_dir.path / "gate" / "test_speedup.py").write_text((ROOT / "tests" / "gate" / "test_speedup.py").read_text())
    profile = PROFILE
    profile = profile.replace("max_tokens = 8\n", "max_tokens = 8\nconcurrency = [1, 4]\n", 1)
    profile += '[methods.also_good]\nspeculative_config = { method = "ngram", num_speculative_tokens = 2 }\n'
    (gate_dir.path / "fake.toml").write_text(profile)
    return gate_dir


@pytest.mark.needs_vllm
def test_speedup_gate_stores_its_floor_and_fails_a_slowed_build(speed_dir, monkeypatch):
    first = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup or lifecycle")
    first.assert_outcomes(
        passed=2 + 2 + 1 + 2
    )  # speedup at C=1 and C=4 for baseline and good, good's summary; 2 lifecycles
    stored = baseline_file(speed_dir).read_text()
    assert '"speedup"' in stored and '"C=4"' in stored and '"measured_over_expected"' in stored
    same = run(speed_dir, "--specgate-methods", "good", "--specgate-strict", "-k", "speedup")
    same.assert_outcomes(passed=5)
    script(monkeypatch, good={"step_cost": 1.2 * 1.4})  # speculative steps 40 % slower
    slowed = run(speed_dir, "--specgate-methods", "good", "-k", "speedup")
    slowed.assert_outcomes(passed=2, failed=3)  # both levels and the summary (geometric mean)
    slowed.stdout.fnmatch_lines(
        ["*method 'good', C=1: speedup 1.19 ?1.19, 1.19? (n=5) is below the floor 1.42 (stored 1.67*"]
    )


@pytest.mark.needs_vllm
def test_speedup_gate_judges_coarsely_on_another_machine_and_says_so(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(profile.read_text() + "[tolerance]\nmachine_rtol = 0.35\n")
    run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup").assert_outcomes(passed=5)
    script(monkeypatch, machine={"speed": 1.2})  # within machine_rtol: judged as usual
    run(speed_dir, "--specgate-methods", "good", "-k", "speedup").assert_outcomes(passed=5)
    script(monkeypatch, machine={"speed": 2})
    out = speed_dir.path / "out"
    other = run(speed_dir, "--specgate-methods", "good", "-k", "speedup", "--specgate-out", str(out))
    other.assert_outcomes(passed=5)
    summary = (out / "summary.md").read_text()
    assert "| good | C=1 | pass (coarse) |" in summary
    assert (
        "- speedups judged coarsely at C=1, C=4 (coarse_speedup_rtol 0.35): C=1: the baseline engine runs at" in summary
    )
    assert "(2.00x, outside machine_rtol 0.35" in summary
    script(monkeypatch, machine={"speed": 2}, good={"step_cost": 2.4})  # a proposer at half speed
    run(speed_dir, "--specgate-methods", "good", "-k", "speedup").assert_outcomes(passed=2, failed=3)


@pytest.mark.needs_vllm
def test_a_partial_update_on_another_machine_keeps_the_stored_speedups(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(profile.read_text() + "[tolerance]\nmachine_rtol = 0.35\n")
    both = ("--specgate-methods", "good,also_good", "--update-baselines", "-k", "speedup or acceptance")
    run(speed_dir, *both).assert_outcomes(passed=6 + 2 + 10)
    before = json.loads(baseline_file(speed_dir).read_text())["methods"]
    script(monkeypatch, machine={"speed": 2})
    partial = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup or acceptance")
    partial.stdout.fnmatch_lines(
        [
            "*speedups at C=1, C=4 not written: the baseline engine ran at * tok/s here against * stored (outside "
            "machine_rtol 0.35), and the stored speedups of also_good*without --specgate-methods*"
        ]
    )
    after = json.loads(baseline_file(speed_dir).read_text())["methods"]
    for method in ("baseline", "good", "also_good"):  # every ratio keeps the machine stamp it was stored with
        assert after[method]["speedup"] == before[method]["speedup"]
    assert after["good"]["provenance"] != before["good"]["provenance"]  # acceptance was written
    # and only acceptance: the kept speed figures keep the provenance of the run that measured them
    assert after["good"]["provenance"]["groups"] == {"speed": before["good"]["provenance"]}
    assert after["baseline"]["provenance"] == before["baseline"]["provenance"]  # nothing of it was written
    run(speed_dir, *both).assert_outcomes(passed=6 + 2 + 10)  # every method at once moves the stamp
    moved = json.loads(baseline_file(speed_dir).read_text())["methods"]
    ratio = (
        moved["baseline"]["speedup"]["C=1"]["throughput_tok_s"]
        / before["baseline"]["speedup"]["C=1"]["throughput_tok_s"]
    )
    assert ratio > 1.5


@pytest.mark.needs_vllm
def test_a_measurement_the_machine_disturbed_is_neither_judged_nor_stored(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(
        profile.read_text() + "[speedup]\ninterleave_baseline = true\n[tolerance]\nmachine_rtol = 0.35\n"
    )
    script(monkeypatch, machine={"disturbed": True})
    result = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup")
    result.assert_outcomes(passed=3, skipped=2)  # baseline's levels and good's summary; good's levels disturbed
    result.stdout.fnmatch_lines(
        [
            "*method 'good', C=1: the baseline engine's trials paired with this method ran at * tok/s against * on "
            "their own*(0.50x*"
        ]
    )
    assert "good" not in json.loads(baseline_file(speed_dir).read_text())["methods"]


@pytest.mark.needs_vllm
def test_results_directory_holds_table_report_and_outcomes(speed_dir):
    out = speed_dir.path / "out"
    result = run(speed_dir, "--specgate-methods", "good", "--specgate-out", str(out))
    assert result.ret == 0, result.stdout.str()
    for name in ("measurements.csv", "measurements.json", "run.json", "baselines.json", "summary.md", "report.html"):
        assert (out / name).is_file(), name
    run_json = json.loads((out / "run.json").read_text())
    gates = {(o["method"], o["gate"], o["key"]) for o in run_json["outcomes"]}
    assert ("good", "speedup", "C=4") in gates and ("good", "acceptance", "doc_prose") in gates
    table = json.loads((out / "measurements.json").read_text())
    speedups = [r for r in table if r["method"] == "good" and r["metric"] == "speedup"]
    assert sorted(r["concurrency"] for r in speedups) == [1, 4]
    assert "speedup" in (out / "summary.md").read_text()


@pytest.mark.needs_vllm
def test_two_xdist_workers_keep_methods_together_and_merge_baselines(speed_dir):
    out = speed_dir.path / "out"
    args = ("--specgate-methods", "good,also_good", "--update-baselines", "--specgate-out", str(out))
    result = run(speed_dir, "-n", "2", *args)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*[gw0]*", "*[gw1]*"])
    # each worker booted its own baseline and one method, once: every lifecycle test passed
    outcomes = json.loads((out / "run.json").read_text())["outcomes"]
    lifecycle = {o["method"]: o["outcome"] for o in outcomes if o["gate"] == "lifecycle"}
    assert lifecycle == {"baseline": "passed", "good": "passed", "also_good": "passed"}
    # both workers wrote into one baseline file under the lock: both methods are there
    stored = json.loads(baseline_file(speed_dir).read_text())["methods"]
    assert {"good", "also_good"} <= set(stored)
    assert all("speedup" in stored[m] and "acceptance" in stored[m] for m in ("good", "also_good"))


@pytest.mark.needs_vllm
def test_corrupt_baseline_fails_the_gate_by_name_and_is_left_untouched(gate_dir):
    run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    path = baseline_file(gate_dir)
    truncated = path.read_text()[:50]
    path.write_text(truncated)
    result = run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    result.stdout.fnmatch_lines([f"*baseline file {path} is not valid JSON*truncated*"])
    result.stdout.fnmatch_lines(["*--update-baselines: not written*"])
    assert path.read_text() == truncated
    assert "During handling of the above exception" not in result.stdout.str()  # said once, not chained again


def test_a_failed_judgement_is_recorded_as_its_message_not_pytests_traceback():
    from types import SimpleNamespace

    from specgate.plugin.recorders import MESSAGE, OutcomeRecorder

    recorder = OutcomeRecorder()
    recorder.items["t::x"] = ("ngram", "memory", "overhead")
    said = "method 'ngram', memory: measured 395 MiB, ceiling 294 MiB\nsecond line of the message"
    crash = SimpleNamespace(reprcrash=SimpleNamespace(message="AssertionError: assert False"))
    for props, expected in (([(MESSAGE, said)], said), ([], "AssertionError: assert False")):
        report = SimpleNamespace(
            nodeid="t::x",
            skipped=False,
            failed=True,
            when="call",
            longrepr=crash,
            user_properties=props,
            keywords={},
            start=1.0,
        )
        recorder.pytest_runtest_logreport(report)
        assert recorder.outcomes["t::x"].message == expected


def test_a_malformed_specgate_marker_stops_collection_naming_the_test(gate_dir):
    (gate_dir.path / "gate" / "test_custom.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.gpu
        @pytest.mark.specgate(gate="speed", stage=1)
        def test_mine():
            pass
    """)
    )
    result = run(gate_dir)
    result.stderr.fnmatch_lines(
        ["*gate/test_custom.py::test_mine: @pytest.mark.specgate takes gate=<one of*got gate='speed', stage=1*"]
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.needs_vllm
def test_an_engine_that_stops_producing_is_stopped_with_its_stacks_and_the_next_method_runs(gate_dir, monkeypatch):
    gate_dir.makefile(
        ".toml",
        stalling=fake_profile("""
[engine]
stall_timeout_s = 1
[methods.stuck]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
[methods.fine]
speculative_config = { method = "ngram", num_speculative_tokens = 3 }
"""),
    )
    script(monkeypatch, stuck={"stalls": True})
    out = gate_dir.path / "out"
    result = gate_dir.runpytest_subprocess(
        "-p",
        "specgate.testing",
        "-m",
        "gpu",
        "--specgate-profile",
        str(gate_dir.path / "stalling.toml"),
        "--specgate-out",
        str(out),
        "gate/test_equivalence.py",
        "gate/test_lifecycle.py",
    )
    result.stdout.fnmatch_lines(
        [
            "*no progress for 1 s while generating a batch of 12 prompts (engine 'stuck') (stall_timeout_s 1 in "
            f"*stalling.toml); stacks in {out}/engines/stuck.stacks. Its processes (fake EngineCore (pid *)) were "
            "stopped; the other methods still run*",
            "*fake engines booted: baseline, stuck, fine*",
        ]
    )
    outcomes = {
        o["nodeid"].split("::")[-1]: o["outcome"] for o in json.loads((out / "run.json").read_text())["outcomes"]
    }
    assert outcomes["test_method_reproduces_baseline_greedy_output[stuck]"] == "failed"
    assert outcomes["test_method_reproduces_baseline_greedy_output[fine]"] == "passed"  # the next method ran
    record = read(out)
    stuck = next(
        o for o in record.outcomes if o.nodeid.endswith("test_method_reproduces_baseline_greedy_output[stuck]")
    )
    assert stuck.cause == DIED and stuck.correctness  # no verdict of the equivalence check: its engine stopped
    assert record.verdict().startswith("broken: method stuck's engine died after it booted: no progress for 1 s")
    stacks = (out / "engines" / "stuck.stacks").read_text()
    assert "--- fake EngineCore (pid" in stacks and "<module>" in stacks, stacks  # its Python stack, whichever way


@pytest.mark.parametrize(
    "built_for, cpu_only",
    [
        ("cuda: Optional[str] = None\nhip: Optional[str] = None\nxpu: Optional[str] = None", True),
        ("cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\nxpu: Optional[str] = None", False),
        ("cuda = None\nhip = '6.2.41133'", False),
        ("cuda = None", False),  # cannot be told: torch is imported and asked
    ],
)
def test_a_cpu_only_torch_is_told_from_its_version_file_without_importing_it(tmp_path, built_for, cpu_only):
    from specgate.machine import torch_is_cpu_only_build

    version_py = tmp_path / "version.py"
    version_py.write_text("from typing import Optional\n__version__ = '2.13.0'\n" + built_for + "\n")
    assert torch_is_cpu_only_build(version_py) is cpu_only
    assert torch_is_cpu_only_build(tmp_path / "missing.py") is False
