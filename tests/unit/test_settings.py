"""Layers below the entry points name a run's settings, and the caller says how its user spells them
(specgate.settings; issue 68, point 5): the pytest plugin its options, a `specgate` command its flags."""

import re
from pathlib import Path

import pytest

from specgate.checks import Judgement, Verdict
from specgate.errors import NotMeasurable, ProfileError
from specgate.plugin.options import OPTIONS, SPELLING
from specgate.profile import find_profile, load_profile
from specgate.run.session import GateSession, RunPlan
from specgate.settings import NAMES, SETTINGS, Spelling

from .fakes import fake_profile

PACKAGE = Path(__file__).resolve().parents[2] / "specgate"
# a made-up spelling: what a message says comes from the caller, not from the layer that says it
ODD = Spelling({name: f"--odd-{name}" for name in SETTINGS}, gate_run="odd-gate")


def test_a_setting_is_said_as_its_caller_spells_it_else_by_its_name():
    assert NAMES("methods") == "methods" and SPELLING("methods") == "--specgate-methods"
    assert SPELLING.but(methods="--methods")("methods") == "--methods" and SPELLING("profile") == "--specgate-profile"
    assert SPELLING.args(profile="p", methods="a,b", update_baselines=True, strict=False, dtype=None) == [
        "--specgate-profile",
        "p",
        "--specgate-methods",
        "a,b",
        "--update-baselines",
    ]
    assert SPELLING.command(profile="cpu-tiny", update_baselines=True) == (
        "pytest -m gpu --specgate-profile cpu-tiny --update-baselines"
    )
    assert (
        NAMES.command(profile="cpu-tiny", update_baselines=True) == "a gate run with profile cpu-tiny, update_baselines"
    )
    with pytest.raises(ValueError, match="no setting 'method'"):
        NAMES("method")
    with pytest.raises(ValueError, match=r"no setting \['method'\]"):
        Spelling({"method": "--m"})


def test_the_plugin_spells_every_setting_with_one_of_its_options():
    assert sorted(SPELLING.flags) == sorted(SETTINGS) and set(SPELLING.flags.values()) == set(OPTIONS)


def test_no_module_outside_the_plugin_spells_a_pytest_option():
    """The plugin's options are spelled in specgate/plugin/ only; release/ and cli/ take them from
    plugin.options.SPELLING, the layers below from the Spelling their caller hands down."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if "plugin" not in path.relative_to(PACKAGE).parts
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(re.search(rf"{re.escape(flag)}\b", line) for flag in OPTIONS)
    ]
    assert not found, "name the setting and let the caller spell it (specgate.settings):\n" + "\n".join(found)


def test_every_setting_a_module_says_is_one():
    said = {
        (path.name, name)
        for path in PACKAGE.rglob("*.py")
        for name in re.findall(r"""(?:\bsay|SPELLING|spelling\(\))\(\s*["'](\w+)["']""", path.read_text("utf-8"))
    }
    assert said and not {(file, name) for file, name in said if name not in SETTINGS}


@pytest.fixture
def profile(tmp_path):
    (tmp_path / "fake.toml").write_text(
        fake_profile('[methods.ngram]\nspeculative_config = { method = "ngram", num_speculative_tokens = 2 }\n')
    )
    return load_profile(tmp_path / "fake.toml", tmp_path)


def test_the_profile_names_the_setting_as_its_caller_spells_it(profile, tmp_path):
    with pytest.raises(ProfileError, match="^--odd-methods: profile 'fake' .* has no method 'eagle'"):
        profile.select(["eagle"], ODD)
    with pytest.raises(ProfileError, match="^methods: profile 'fake'"):
        profile.select(["eagle"])
    with pytest.raises(ProfileError, match="^--odd-profile: no profile named 'nope'"):
        find_profile("nope", tmp_path, ODD)


def test_a_session_says_the_settings_of_its_plan_as_the_plan_spells_them(profile, tmp_path):
    """The caller puts its spelling in the plan; the checks, the baseline store, the engine host and the
    session's own lines say it."""
    plan = RunPlan(profile, profile.select(None), tmp_path, tmp_path / "out", strict=True, say=ODD, hardware="cpu-x")
    session = GateSession(plan, boot=lambda *a: None)
    assert session.baselines.update_command == "odd-gate --odd-profile fake --odd-update_baselines"
    assert "odd-gate --odd-profile fake --odd-update_baselines" in session.baselines.missing("ngram", "memory", "")
    judgement = session.checks["memory"].ctx.skip_unless_strict(Judgement("memory", "ngram", "", Verdict.SKIP), "none")
    assert judgement.messages == ["none (--odd-strict)"]
    assert session.write_baselines(["t.py::test_x"]).startswith("--odd-update_baselines: refusing to write")
    assert session.write_baselines().startswith("--odd-update_baselines: nothing was measured")
    remote = RunPlan(profile, [], tmp_path, tmp_path / "out", endpoints={"ngram": "http://127.0.0.1:9"}, say=ODD)
    with pytest.raises(NotMeasurable, match="give --odd-endpoints baseline=URL"):
        GateSession(remote, boot=lambda *a: None).host.engine("baseline")
