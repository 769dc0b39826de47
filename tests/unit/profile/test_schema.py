"""Every profile key is declared once, on the dataclass field that holds it (specgate.profile.schema.setting):
its TOML type, bound, default, meaning and whether it changes what a run measures. A new key is that
one declaration: parsing, type and bound checks, the allowed-keys lists, the default and the baseline
history's fingerprint follow from it."""

import dataclasses
import tomllib
from pathlib import Path

import pytest

from specgate.errors import ProfileError
from specgate.profile import (
    DEFAULT_DEADLINES,
    Equivalence,
    KnownIssue,
    Method,
    Preemption,
    PrefixSoak,
    Profile,
    Requests,
    Scenarios,
    Speedup,
    Structured,
    Tolerance,
    parse,
    resolve,
)
from specgate.profile.schema import allowed, not_measuring, positive, setting, settings
from specgate.store import history

from .test_profile import GOOD

ROOT = Path(__file__).resolve().parents[3]
TABLES = (
    Profile,
    Method,
    Tolerance,
    Equivalence,
    Speedup,
    Scenarios,
    Preemption,
    PrefixSoak,
    Structured,
    Requests,
    KnownIssue,
)


@dataclasses.dataclass(frozen=True)
class WarmedSpeedup(Speedup):
    warmup_trials: int = setting(1, int, bound=positive, measures=False, doc="unmeasured trials before the first")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OwnedProfile(Profile):
    owner: str = setting("", str, measures=False, doc="who answers for this profile's runner")
    speedup: WarmedSpeedup = setting(
        kind=dict, table=WarmedSpeedup, factory=WarmedSpeedup, measures=False, doc="[speedup]"
    )


def parsed(text: str, cls=OwnedProfile):
    return parse(tomllib.loads(text), Path("owned.toml"), cls)


def test_a_new_key_is_one_declaration_on_its_dataclass():
    owned = 'owner = "inference-team"\n' + GOOD + "[speedup]\ntrials = 4\nwarmup_trials = 3\n"
    profile = resolve(parsed(owned), ROOT)
    assert profile.owner == "inference-team" and profile.speedup.warmup_trials == 3 and profile.speedup.trials == 4
    assert parsed(GOOD).owner == "" and parsed(GOOD).speedup.warmup_trials == 1  # the declared defaults
    with pytest.raises(ProfileError, match=r"^profile owned.toml: key 'speedup.warmup_trials' must be > 0, got 0\.$"):
        parsed(GOOD + "[speedup]\nwarmup_trials = 0\n")
    with pytest.raises(ProfileError, match=r"^profile owned.toml: key 'owner' must be a str, got int 3\.$"):
        parsed("owner = 3\n" + GOOD)
    with pytest.raises(
        ProfileError,
        match=r"key 'speedup.warmup_trails' is not a known key \(did you mean 'warmup_trials'\?\); "
        r"allowed here: .*step_trials, temperature, trials, warmup_trials\.",
    ):
        parsed(GOOD + "[speedup]\nwarmup_trails = 2\n")
    assert "owner" in not_measuring(OwnedProfile) and "owner" not in not_measuring(Profile)
    with pytest.raises(ProfileError, match="key 'owner' is not a known key"):  # the shipped Profile has no such key
        parsed("owner = 3\n" + GOOD, Profile)


def test_every_setting_is_documented_and_every_table_lists_exactly_its_settings():
    for cls in TABLES:
        for f in settings(cls):
            assert f.metadata["doc"], f"{cls.__name__}.{f.name}: a setting without a doc"
        derived = {f.name for f in dataclasses.fields(cls)} - {f.name for f in settings(cls)}
        assert derived <= {"path", "prompts", "baselines_name", "tolerance_file", "name", "sweep_of"}, (cls, derived)
    assert set(allowed(Profile)) == {
        "name",
        "description",
        "target",
        "target_revision",
        "tokenizer_revision",
        "code_revision",
        "allow_unpinned_code",
        "dtype",
        "max_model_len",
        "prompts",
        "max_tokens",
        "concurrency",
        "seed",
        "hardware",
        "engine",
        "methods",
        "tolerance",
        "equivalence",
        "speedup",
        "acceptance",
        "cost",
        "drift",
        "drift_since",
        "scenarios",
        "known_issues",
    }
    assert set(allowed(Profile, "engine")) == {
        "kwargs",
        "env",
        "boot_timeout_s",
        "stall_timeout_s",
        "cpu_flags",
        "model_runner",
    }
    assert set(allowed(Method)) == {
        "speculative_config",
        "engine",
        "expected_boot_error",
        "note",
        "floors",
        "canary_of",
        "lossy",
        "slow_steps",
        "plant",
        "tolerance",
    }


def test_defaults_are_the_dataclasses_own():
    minimal = (
        'name = "m"\ntarget = "zoo:target"\nprompts = ["fixtures/prompts/embedded.jsonl"]\n'
        '[methods.ngram]\nspeculative_config = { method = "ngram", num_speculative_tokens = 3 }\n'
    )
    profile = parsed(minimal, Profile)
    for f in settings(Profile):
        if f.default is not dataclasses.MISSING and f.name not in ("boot_timeout_s", "stall_timeout_s"):
            assert getattr(profile, f.name) == f.default, f.name
    assert profile.hardware == "cuda" and (profile.boot_timeout_s, profile.stall_timeout_s) == DEFAULT_DEADLINES["cuda"]
    assert profile.speedup == Speedup() and profile.tolerance == Tolerance() and profile.scenarios == Scenarios()


def test_the_baseline_historys_fingerprint_leaves_out_what_the_declarations_say_measures_nothing():
    assert history.NOT_INPUTS == not_measuring(Profile) | not_measuring(Method)
    assert {"tolerance", "speedup", "drift", "note", "canary_of"} <= history.NOT_INPUTS
    assert not {"target", "prompts", "engine", "speculative_config", "methods", "dtype"} & history.NOT_INPUTS
