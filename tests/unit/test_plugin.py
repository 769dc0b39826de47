"""The pytest plugin with a fake engine: ordering, one boot per method, boot failures, skips, summary."""

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
from specgate.equivalence import GreedyOutput
from specgate.engine import ShutdownReport
from specgate.errors import EngineBootError

BOOTS = []

class FakeEngine:
    def __init__(self, method):
        self.method, self.alive, self.boot_s = method, True, 0.01
    def greedy(self, prompts, max_tokens, top_logprobs=0):
        out = {}
        for p in prompts:
            ids = [10, 11, 12, 13, 14]
            if self.method.name == "wrong":
                ids[3] = 99
            tops = tuple({t: -0.1, 98: -3.0} for t in ids) if top_logprobs else ()
            out[p.id] = GreedyOutput(tuple(ids), tops)
        return out
    def shutdown(self):
        self.alive = False
        return ShutdownReport(self.method.name, 0.01, [], 10, 10, 20, 0)

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
    gate = pytester.mkpydir("gate")
    for name in ("test_equivalence.py", "test_lifecycle.py"):
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
    # wrong's equivalence fails; broken's two tests error at setup (boot); unsupported's two skip.
    result.assert_outcomes(passed=5, failed=1, errors=2, skipped=2)
    assert "BOOT ORDER ['baseline', 'good', 'wrong', 'broken', 'unsupported']" in result.stdout.str()
    result.stdout.fnmatch_lines(["*prompt code_continuation-01 (code_continuation) at token 3: baseline*vs method*id 99*"])
    result.stdout.fnmatch_lines(["*failed to boot: ValueError: bad draft*", "*engine log tail*"])
    result.stdout.fnmatch_lines(["*SKIPPED*method 'unsupported' cannot run on this engine; vLLM said: NotImplementedError: medusa is not supported on CPU*"])
    result.stdout.fnmatch_lines(["*engines booted: 3 (methods run: 2 + 1 baseline; 2 failed to boot)*"])
    result.stdout.fnmatch_lines(["*60 of 60 prompts diverge*", "*and 50 more*"])


def test_method_subset_runs_only_those_engines(gate_dir):
    result = run(gate_dir, "--specgate-methods", "good")
    assert result.parseoutcomes().get("passed") == 4, result.stdout.str()
    assert "BOOT ORDER ['baseline', 'good']" in result.stdout.str()


def test_bad_options_are_usage_errors_naming_the_option(gate_dir):
    result = run(gate_dir, "--specgate-methods", "goood")
    result.stderr.fnmatch_lines(["*--specgate-methods*has no method 'goood' (did you mean 'good'?)*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result = gate_dir.runpytest_subprocess("-m", "gpu", "--specgate-profile", "no-such-profile")
    result.stderr.fnmatch_lines(["*--specgate-profile: no profile named 'no-such-profile'*"])
