"""specgate.backend.Backend is complete: an engine written to the protocol, exactly its members and no more
(backend_only.BackendOnly over a scripted FakeEngine), supplied by a conftest's pytest_specgate_boot_engine, runs
every gate and every scenario of cpu-tiny in a nested pytest run. A member the gate needs that the protocol
leaves out shows there as the AttributeError a user's engine would meet."""

import json
import textwrap

import pytest

from specgate.backend import Backend
from specgate.engines.endpoint import Endpoint
from specgate.engines.engine import Engine
from specgate.gates import GATES
from specgate.profile import Method, load_profile
from specgate.testing import FakeEngine, FakeScript

from .backend_only import BackendOnly
from .fakes import ROOT

pytest_plugins = ["pytester"]

CPU_TINY = ROOT / "fixtures" / "profiles" / "cpu-tiny.toml"
# The gate's test files, but the endpoint-mode test: it serves a real vLLM engine (`vllm serve`), no gate of its own
GATE_FILES = sorted(p for p in (ROOT / "tests" / "gate").glob("test_*.py") if p.name != "test_endpoint.py")
# vLLM 0.32's refusal of the MLP speculator (cpu-tiny's expected_boot_error matches it): the real engine's skip
MLP_REFUSAL = "ValueError: Model architectures ['MLPSpeculatorPreTrainedModel'] are not supported for now."

CONFTEST = """
from backend_only import BackendOnly
from specgate.testing import FakeBoot, FakeScript

BOOT = FakeBoot(FakeScript.from_env())


def pytest_specgate_boot_engine(profile, method, root, log_path):
    return BackendOnly(BOOT(profile, method, root, log_path))


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"engines booted through the protocol: {', '.join(BOOT.boots)}")
"""


def protocol_members(protocol) -> set[str]:
    """What a Protocol declares: its annotated attributes and the methods and properties its body defines."""
    return {name for name in (*vars(protocol), *protocol.__annotations__) if not name.startswith("_")}


def public(cls) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_backend_only_has_exactly_the_protocols_members():
    # fails when the protocol grows (the nested run below would not see the new member) or the class does (the
    # run would then not show that the protocol alone suffices)
    assert public(BackendOnly) == protocol_members(Backend)


@pytest.mark.parametrize(
    "engine",
    [FakeEngine(Method("ngram", {"method": "ngram", "num_speculative_tokens": 2}), FakeScript(), []), Engine, Endpoint],
    ids=["FakeEngine", "Engine", "Endpoint"],
)
def test_specgates_own_engines_implement_the_whole_protocol(engine):
    fields = set(getattr(engine, "__dataclass_fields__", {}))  # a dataclass's fields, those without a default too
    assert protocol_members(Backend) <= public(engine) | fields


def cpu_tiny_without_known_issues(path) -> None:
    """cpu-tiny as it is but its [known_issues]: they record bugs of released vLLMs, which a scripted engine does
    not have; on a release they name each would fail as "no longer reproduces", as it must on a fixed vLLM."""
    text = CPU_TINY.read_text()
    assert text.index("[scenarios.requests]") < text.index("[known_issues.") < text.index("[speedup]")
    path.write_text(text[: text.index("[known_issues.")] + text[text.index("[speedup]") :])


def script(profile_path) -> dict:
    """How each method's fake engine behaves, as cpu-tiny's real engines do where a gate needs it: outputs that
    are text (echo), the drafter weights its checkpoint holds (the memory gate holds the engine's figure to
    them), the canaries worse than what they mimic, the MLP speculator refused as vLLM refuses it, and one
    engine whose sampler probe reports a finding (the requests scenario then takes its samples again under
    sampling_repaired)."""
    from specgate.figures.memory import MIB, drafter_footprint

    profile = load_profile(profile_path, ROOT)
    methods = {
        name: {"drafter_mib": (drafter_footprint(profile, m, ROOT)[0] or 0) / MIB}
        for name, m in profile.methods.items()
    }
    methods["mlp_speculator"]["boot_error"] = MLP_REFUSAL
    methods["draft_self"]["accepted"] = 3.0  # the target drafting for itself: every draft accepted (its floor 0.98)
    methods["draft_perturbed"]["accepted"] = 2.0  # the acceptance canary of draft_self
    methods["suffix_throttled"]["step_cost"] = 1.6  # the speedup canary of suffix: speedup 2 / 1.6 against 2 / 1.2
    methods["ngram"]["sampling_probe"] = "the scripted probe fails"
    return {"machine": {"echo": True}, "methods": methods}


@pytest.mark.needs_vllm  # the gate tokenizes its prompts with the target's transformers tokenizer
def test_an_engine_written_to_the_protocol_runs_every_gate_and_scenario_of_cpu_tiny(pytester, monkeypatch):
    (pytester.path / "fixtures").symlink_to(ROOT / "fixtures")  # zoo models, prompts, schemas: cpu-tiny's paths
    profile = pytester.path / "cpu-tiny.toml"
    cpu_tiny_without_known_issues(profile)
    monkeypatch.setenv("SPECGATE_FAKE", json.dumps(script(profile)))
    gate = pytester.mkpydir("gate")
    for path in GATE_FILES:
        (gate / path.name).write_text(path.read_text())
    pytester.makepyfile(backend_only=(ROOT / "tests" / "unit" / "backend_only.py").read_text())
    pytester.makeconftest(CONFTEST)
    (pytester.path / "pytest.ini").write_text(
        textwrap.dedent("""
            [pytest]
            markers = gpu: boots an engine
            addopts = --strict-markers -p no:cacheprovider
        """)
    )
    out = pytester.path / "out"
    args = ("-m", "gpu", "--specgate-profile", str(profile), "--update-baselines", "--specgate-out", str(out))
    result = pytester.runpytest_subprocess(*args, "-rs", timeout=600)

    assert "AttributeError" not in result.stdout.str()
    record = json.loads((out / "run.json").read_text())
    outcomes, engines = record["outcomes"], record["engines"]  # engines: method -> what its engine did
    booted = next(line for line in result.outlines if line.startswith("engines booted through the protocol: "))
    assert set(booted.split(": ", 1)[1].split(", ")) == set(engines)  # every engine was a BackendOnly
    # Skipped only where the real engine skips, in every test of the method, for the host's reason: a method vLLM
    # refuses as the profile expects (the MLP speculator), or one this machine's vLLM does not offer (suffix
    # decoding without the arctic-inference package)
    for o in outcomes:
        assert o["outcome"] == "passed" or o["message"] == engines[o["method"]]["skipped"], o
    skipped = {o["method"] for o in outcomes if o["outcome"] == "skipped"}
    assert engines["mlp_speculator"]["skipped"].endswith(MLP_REFUSAL)
    assert {"mlp_speculator"} <= skipped <= {"mlp_speculator", "suffix", "suffix_throttled"}
    # every gate and scenario ran for every other method; a canary runs the gates every engine runs and those it is
    # a canary for (specgate.run.session.RunPlan.runs_here, by the registry's Gate.canary)
    canaries = {name: m.canary_of for name, m in load_profile(profile, ROOT).methods.items() if m.canary_of}
    always = {str(g) for g in GATES if "always" in g.canary}
    for method in set(engines) - skipped - {"baseline"}:
        gates = {o["gate"] for o in outcomes if o["method"] == method}
        expected = always | set(canaries[method]) if method in canaries else set(map(str, GATES))
        assert gates >= expected if method in canaries else gates == expected, method
    assert result.ret == 0, result.stdout.str()[-3000:]
