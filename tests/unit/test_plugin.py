"""The pytest plugin with a fake engine: ordering, one boot per method, boot failures, skips, summary."""

import json
import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]

PROFILE = """
name = "fake"
hardware = "cpu"
target = "{zoo}/target"
max_model_len = 512
max_tokens = 8
prompts = ["{prompts}"]
[equivalence]
mode = "exact"
[methods.good]
speculative_config = {{ method = "ngram", num_speculative_tokens = 2 }}
[methods.wrong]
speculative_config = {{ method = "ngram", num_speculative_tokens = 3 }}
[methods.broken]
speculative_config = {{ method = "ngram", num_speculative_tokens = 4 }}
[methods.unsupported]
speculative_config = {{ method = "ngram", num_speculative_tokens = 5 }}
expected_boot_error = "not supported on CPU"
"""

# The fake engine: method names decide behaviour. `wrong` emits a different token at position 3,
# `broken` and `unsupported` fail to boot with different errors.
CONFTEST = """
import pytest
from specgate.acceptance import SpecCounters
from specgate.equivalence import GreedyOutput
from specgate.engine import BatchResult, ShutdownReport
from specgate.errors import EngineBootError

BOOTS = []

class FakeEngine:
    def __init__(self, method):
        self.method, self.alive, self.boot_s = method, True, 0.01
    def run_batch(self, prompts, max_tokens, top_logprobs=0):
        out, steps = {}, {}
        for p in prompts:
            ids = [10, 11, 12, 13, 14]
            if self.method.name == "wrong":
                ids[3] = 99
            tops = tuple({t: -0.1, 98: -3.0} for t in ids) if top_logprobs else ()
            out[p.id] = GreedyOutput(tuple(ids), tops)
            steps[p.id] = [1, 2, 2]
        k = self.method.num_speculative_tokens
        drafts = 2 * len(prompts) if k else 0
        counters = SpecCounters(drafts, drafts * k, drafts, tuple([drafts] + [0] * (k - 1)) if k else ())
        return BatchResult(out, steps, counters)
    def memory_reading(self):
        from specgate.memory import MemoryReading
        k = self.method.num_speculative_tokens
        return MemoryReading(1000 - 10 * k, (100 + k) * 2**20, None, 0 if k else None)  # ngram: no weights
    def shutdown(self):
        self.alive = False
        return ShutdownReport(self.method.name, 0.01, [], 10, 10, 20, 0)
    def closed_loop(self, prompts, concurrency, max_tokens, temperature=0.0):
        # Virtual time: a speculative step takes 12 ms and emits 2 tokens, a plain one 10 ms and 1;
        # FAKE_SLOW=1 makes speculative steps 40 % slower (a regression the gate must catch).
        import os
        from specgate.load import LoadRun, RequestTrace
        k = self.method.num_speculative_tokens
        per_step = 2 if k else 1
        step = 0.010 * ((1.2 * (1.4 if os.environ.get("FAKE_SLOW") else 1.0)) if k else 1.0)
        step /= float(os.environ.get("FAKE_MACHINE_SPEED", "1"))  # another machine: every step faster
        if os.environ.get("FAKE_DISTURBED") and not k and len(BOOTS) > 1:
            step *= 2  # the machine slows down once a second engine is up (another tenant, say)
        lanes, traces, steps = [0.0] * concurrency, [], 0
        for i, p in enumerate(prompts):
            lane = min(range(concurrency), key=lambda j: lanes[j])
            t = lanes[lane]
            trace = RequestTrace(i, p.id, t)
            emitted = 0
            while emitted < max_tokens:
                t += step
                n = min(per_step, max_tokens - emitted)
                trace.arrivals.append((t, n))
                emitted += n
                steps += 1
            lanes[lane] = t
            traces.append(trace)
        drafts = steps if k else 0
        counters = SpecCounters(drafts, drafts * k, drafts, tuple([drafts] + [0] * (k - 1)) if k else ())
        return LoadRun(concurrency, traces, 0.0, max(lanes)), counters
    def timed_steps(self, work):
        work()
        k = self.method.num_speculative_tokens
        return {"forward_s": 0.009, "forward_calls": 1, "propose_s": 0.001 * k, "propose_calls": 1}

def fake_boot(profile, method, root, log_path):
    BOOTS.append(method.name)
    if method.name == "broken":
        raise EngineBootError("engine for method 'broken' failed to boot: ValueError: bad draft", "ValueError: bad draft", "broken", "ValueError: bad draft")
    if method.name == "unsupported":
        raise EngineBootError("engine failed", "NotImplementedError: medusa is not supported on CPU", "unsupported", "NotImplementedError: medusa is not supported on CPU")
    return FakeEngine(method)

@pytest.fixture(autouse=True, scope="session")
def _fake_engine():
    import specgate.session
    mp = pytest.MonkeyPatch()
    mp.setattr(specgate.session, "boot_engine", fake_boot)
    yield
    mp.undo()

def pytest_sessionfinish(session):
    print("BOOT ORDER", BOOTS)
"""


@pytest.fixture
def gate_dir(pytester):
    pytester.makefile(".toml", fake=PROFILE.format(zoo=ROOT / "fixtures" / "zoo", prompts=ROOT / "fixtures/prompts/embedded.jsonl"))
    pytester.makeconftest(CONFTEST)
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
    return pytester.runpytest_subprocess("-m", "gpu", "--specgate-profile", str(pytester.path / "fake.toml"), "-rs", *args)


def test_each_engine_boots_once_in_method_order_and_failures_stay_with_their_method(gate_dir):
    result = run(gate_dir)
    # baseline: reference + lifecycle; good: equivalence + lifecycle; wrong: only lifecycle passes.
    # wrong's equivalence fails; broken's tests error at setup (boot); unsupported's skip; the
    # acceptance tests of good and wrong (5 categories each) and their memory tests skip: no
    # baseline is stored yet; the baseline engine's memory reading passes.
    result.assert_outcomes(passed=6, failed=1, errors=2 + 5 + 1, skipped=2 + 5 + 10 + 1 + 2)
    assert "BOOT ORDER ['baseline', 'good', 'wrong', 'broken', 'unsupported']" in result.stdout.str()
    result.stdout.fnmatch_lines(["*prompt code_continuation-01 (code_continuation) at token 3: baseline*vs method*id 99*"])
    result.stdout.fnmatch_lines(["*failed to boot: ValueError: bad draft*", "*engine log tail*"])
    result.stdout.fnmatch_lines(["*SKIPPED*method 'unsupported' cannot run on this engine; vLLM said: NotImplementedError: medusa is not supported on CPU*"])
    result.stdout.fnmatch_lines(["*engines booted: 3 (methods run: 2 + 1 baseline; 2 failed to boot)*"])
    result.stdout.fnmatch_lines(["*60 of 60 prompts diverge*", "*and 50 more*"])


def test_method_subset_runs_only_those_engines(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good")
    assert result.parseoutcomes().get("passed") == 5, result.stdout.str()
    result.stdout.fnmatch_lines(["*no stored acceptance baseline for method 'good', code_continuation in*--update-baselines*"])
    assert "BOOT ORDER ['baseline', 'good']" in result.stdout.str()


def test_bad_options_are_usage_errors_naming_the_option(gate_dir):
    result = run(gate_dir, "--specgate-methods", "goood")
    result.stderr.fnmatch_lines(["*--specgate-methods*has no method 'goood' (did you mean 'good'?)*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = gate_dir.runpytest_subprocess("-m", "gpu", "--specgate-profile", "no-such-profile")
    result.stderr.fnmatch_lines(["*--specgate-profile: no profile named 'no-such-profile'*"])


def baseline_file(pytester):
    files = list((pytester.path / "baselines" / "fake").glob("*.json"))
    return files[0] if files else None


def test_update_baselines_writes_then_an_unchanged_rerun_passes(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    result.assert_outcomes(passed=4 + 5 + 2)
    result.stdout.fnmatch_lines(["*baselines written to*fake*", "*good*acceptance*code_continuation*values)*new entry*"])
    path = baseline_file(gate_dir)
    stored = path.read_text()
    assert '"vllm"' in stored and '"git_revision"' in stored
    rerun = run(gate_dir, "--specgate-methods", "good", "--specgate-strict")
    rerun.assert_outcomes(passed=4 + 5 + 2)
    assert path.read_text() == stored  # a plain run never writes


def test_update_is_refused_when_a_correctness_test_failed(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good,wrong", "--update-baselines")
    result.stdout.fnmatch_lines(["*refusing to write baselines: 1 correctness test(s) failed*test_method_reproduces_baseline_greedy_output*wrong*"])
    assert baseline_file(gate_dir) is None


def test_missing_baseline_fails_under_strict(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good", "--specgate-strict")
    result.assert_outcomes(passed=5, failed=6)
    result.stdout.fnmatch_lines(["*no stored acceptance baseline*(--specgate-strict)*"])


@pytest.fixture
def speed_dir(gate_dir):
    """The fake gate with the speedup test and two healthy methods."""
    (gate_dir.path / "gate" / "test_speedup.py").write_text((ROOT / "tests" / "gate" / "test_speedup.py").read_text())
    profile = PROFILE.format(zoo=ROOT / "fixtures" / "zoo", prompts=ROOT / "fixtures/prompts/embedded.jsonl")
    profile = profile.replace("max_tokens = 8\n", "max_tokens = 8\nconcurrency = [1, 4]\n", 1)
    profile += '[methods.also_good]\nspeculative_config = { method = "ngram", num_speculative_tokens = 2 }\n'
    (gate_dir.path / "fake.toml").write_text(profile)
    return gate_dir


def test_speedup_gate_stores_its_floor_and_fails_a_slowed_build(speed_dir, monkeypatch):
    first = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup or lifecycle")
    first.assert_outcomes(passed=2 + 2 + 2)  # speedup at C=1 and C=4 for baseline and good; 2 lifecycles
    stored = baseline_file(speed_dir).read_text()
    assert '"speedup"' in stored and '"C=4"' in stored and '"measured_over_expected"' in stored
    same = run(speed_dir, "--specgate-methods", "good", "--specgate-strict", "-k", "speedup")
    same.assert_outcomes(passed=4)
    monkeypatch.setenv("FAKE_SLOW", "1")
    slowed = run(speed_dir, "--specgate-methods", "good", "-k", "speedup")
    slowed.assert_outcomes(passed=2, failed=2)
    slowed.stdout.fnmatch_lines(["*method 'good', C=1: speedup 1.19 ?1.19, 1.19? (n=5) is below the floor 1.42 (stored 1.67*"])


def test_speedup_gate_says_when_the_machine_is_not_the_one_that_stored_it(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(profile.read_text() + "[tolerance]\nmachine_rtol = 0.35\n")
    run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup").assert_outcomes(passed=4)
    monkeypatch.setenv("FAKE_MACHINE_SPEED", "1.2")  # within machine_rtol: judged as usual
    run(speed_dir, "--specgate-methods", "good", "-k", "speedup").assert_outcomes(passed=4)
    monkeypatch.setenv("FAKE_MACHINE_SPEED", "2")
    other = run(speed_dir, "--specgate-methods", "good", "-k", "speedup")
    other.assert_outcomes(passed=2, skipped=2)
    other.stdout.fnmatch_lines(["*C=1: the baseline engine runs at * tok/s here against * stored (2.00x, outside machine_rtol 0.35*"])
    strict = run(speed_dir, "--specgate-methods", "good", "-k", "speedup", "--specgate-strict")
    strict.assert_outcomes(passed=2, failed=2)


def test_a_partial_update_on_another_machine_keeps_the_stored_speedups(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(profile.read_text() + "[tolerance]\nmachine_rtol = 0.35\n")
    both = ("--specgate-methods", "good,also_good", "--update-baselines", "-k", "speedup or acceptance")
    run(speed_dir, *both).assert_outcomes(passed=6 + 10)
    before = json.loads(baseline_file(speed_dir).read_text())["methods"]
    monkeypatch.setenv("FAKE_MACHINE_SPEED", "2")
    partial = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup or acceptance")
    partial.stdout.fnmatch_lines(["*speedups at C=1, C=4 not written: the baseline engine ran at * tok/s here against * stored (outside machine_rtol 0.35), and the stored speedups of also_good*without --specgate-methods*"])
    after = json.loads(baseline_file(speed_dir).read_text())["methods"]
    for method in ("baseline", "good", "also_good"):  # every ratio keeps the machine stamp it was stored with
        assert after[method]["speedup"] == before[method]["speedup"]
    assert after["good"]["provenance"] != before["good"]["provenance"]  # acceptance was written
    run(speed_dir, *both).assert_outcomes(passed=6 + 10)  # every method at once moves the stamp
    moved = json.loads(baseline_file(speed_dir).read_text())["methods"]
    ratio = moved["baseline"]["speedup"]["C=1"]["throughput_tok_s"] / before["baseline"]["speedup"]["C=1"]["throughput_tok_s"]
    assert ratio > 1.5


def test_a_measurement_the_machine_disturbed_is_neither_judged_nor_stored(speed_dir, monkeypatch):
    profile = speed_dir.path / "fake.toml"
    profile.write_text(profile.read_text() + "[speedup]\ninterleave_baseline = true\n[tolerance]\nmachine_rtol = 0.35\n")
    monkeypatch.setenv("FAKE_DISTURBED", "1")
    result = run(speed_dir, "--specgate-methods", "good", "--update-baselines", "-k", "speedup")
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*method 'good', C=1: the baseline engine's trials paired with this method ran at * tok/s against * on their own*(0.50x*"])
    assert "good" not in json.loads(baseline_file(speed_dir).read_text())["methods"]


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


def test_corrupt_baseline_fails_the_gate_by_name_and_is_left_untouched(gate_dir):
    run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    path = baseline_file(gate_dir)
    truncated = path.read_text()[:50]
    path.write_text(truncated)
    result = run(gate_dir, "--specgate-methods", "good", "--update-baselines")
    result.stdout.fnmatch_lines([f"*baseline file {path} is not valid JSON*truncated*"])
    result.stdout.fnmatch_lines(["*--update-baselines: not written*"])
    assert path.read_text() == truncated
