"""Profiles: the shipped ones load; every kind of bad input names the file and the key."""

import re
from pathlib import Path

import pytest

from specgate.errors import ProfileError
from specgate.profile import find_profile, load_profile

ROOT = Path(__file__).resolve().parents[3]
GOOD = """
name = "t"
hardware = "cpu"
target = "zoo:target"
dtype = "float32"
max_model_len = 512
max_tokens = 32
prompts = ["fixtures/prompts/embedded.jsonl"]
concurrency = [1, 4]
[methods.ngram]
speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 2, prompt_lookup_max = 4 }
[methods.eagle]
speculative_config = { method = "eagle", model = "zoo:eagle", num_speculative_tokens = 3 }
"""


def write(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def load_text(tmp_path, text):
    return load_profile(write(tmp_path, text), ROOT)


def test_every_shipped_profile_loads():
    paths = sorted((ROOT / "fixtures" / "profiles").glob("*.toml"))
    assert paths, "no profiles shipped"
    for path in paths:
        profile = load_profile(path, ROOT)
        assert profile.methods, path


def test_cpu_tiny_covers_the_cpu_method_matrix():
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    kinds = {m.kind for m in profile.methods.values()}
    assert {"ngram", "suffix", "draft_model", "eagle", "eagle3"} <= kinds
    assert profile.equivalence.mode == "exact"
    assert "VLLM_CPU_KVCACHE_SPACE" in profile.engine_env


def test_profile_fields_are_typed(tmp_path):
    p = load_text(tmp_path, GOOD)
    assert p.concurrency == (1, 4)
    assert p.methods["eagle"].num_speculative_tokens == 3
    assert p.methods["eagle"].draft_model == "zoo:eagle"
    assert p.prompts[0].is_absolute()
    assert [m.name for m in p.select(["eagle"])] == ["eagle"]


@pytest.mark.parametrize(
    "change, key, words",
    [
        (('dtype = "float32"', 'dtype = "float32"\nbogus = 1'), "bogus", "not a known key"),
        (("max_tokens = 32", "max_tokens = 600"), "max_tokens", "smaller than max_model_len"),
        (("concurrency = [1, 4]", "concurrency = [1, -4]"), "concurrency", "positive integers"),
        (("concurrency = [1, 4]", "concurrency = [4, 4]"), "concurrency", "twice"),
        (('dtype = "float32"', 'dtype = "float64"'), "dtype", "must be one of"),
        (('method = "ngram"', 'method = "ngramm"'), "methods.ngram.speculative_config.method", "did you mean 'ngram'"),
        (
            ("num_speculative_tokens = 3, prompt", "num_speculative_tokens = 0, prompt"),
            "methods.ngram.speculative_config.num_speculative_tokens",
            ">= 1",
        ),
        (("zoo:eagle", "zoo:eagel"), "methods.eagle.speculative_config.model", "did you mean 'eagle'"),
        (("zoo:eagle", "./no/such/model"), "methods.eagle.speculative_config.model", "does not exist"),
        (("zoo:target", "/nonexistent/target"), "target", "does not exist"),
        (("embedded.jsonl", "missing.jsonl"), "prompts[0]", "does not exist"),
        (("max_model_len = 512", 'max_model_len = "512"'), "max_model_len", "must be a int"),
        (("[methods.ngram]", '[engine]\nmodel_runner = "v3"\n[methods.ngram]'), "engine.model_runner", "one of"),
    ],
)
def test_bad_profile_names_file_and_key(tmp_path, change, key, words):
    with pytest.raises(ProfileError) as err:
        load_text(tmp_path, GOOD.replace(*change))
    msg = str(err.value)
    assert str(tmp_path / "p.toml") in msg and f"'{key}" in msg and words in msg, msg


def test_bad_tolerance_and_unknown_table_key(tmp_path):
    with pytest.raises(ProfileError, match=r"tolerance.speedup_rtol.*< 1"):
        load_text(tmp_path, GOOD + "[tolerance]\nspeedup_rtol = 1.5\n")
    with pytest.raises(ProfileError, match=r"methods.eagle2.spec_config.*did you mean 'speculative_config'"):
        load_text(tmp_path, GOOD + "[methods.eagle2]\nspec_config = {}\n")


def test_baseline_is_a_reserved_method_name(tmp_path):
    with pytest.raises(ProfileError, match="reserved"):
        load_text(
            tmp_path,
            GOOD + '[methods.baseline]\nspeculative_config = { method = "ngram", num_speculative_tokens = 2 }\n',
        )


def test_invalid_toml_is_reported_with_the_file(tmp_path):
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_text(tmp_path, GOOD + "[[[")


def test_unknown_profile_and_method_selection_say_what_exists(tmp_path):
    with pytest.raises(ProfileError, match="did you mean 'cpu-tiny'"):
        find_profile("cpu-tin", ROOT)
    with pytest.raises(ProfileError, match="has no method 'eagle9'.*available: ngram, eagle"):
        load_text(tmp_path, GOOD).select(["eagle9"])


def test_hub_ids_are_accepted_without_a_local_check(tmp_path):
    p = load_text(tmp_path, GOOD.replace("zoo:target", "meta-llama/Llama-3.1-8B-Instruct"))
    assert p.target == "meta-llama/Llama-3.1-8B-Instruct"


def test_the_documented_profile_example_is_a_profile_that_loads(tmp_path):
    reference = (ROOT / "docs" / "profile-reference.md").read_text()
    start = reference.index("```toml\n", reference.index("## An annotated example")) + len("```toml\n")
    example = reference[start : reference.index("```", start)]
    p = load_text(
        tmp_path, example.replace("fixtures/prompts/embedded.jsonl", str(ROOT / "fixtures/prompts/embedded.jsonl"))
    )
    assert p.name == "cpu-tiny" and list(p.methods) == ["eagle3"] and p.speedup.interleave_baseline


def test_the_suites_own_deadlines_default_by_hardware_and_are_checked(tmp_path):
    cpu = load_text(tmp_path, GOOD)
    assert (cpu.boot_timeout_s, cpu.stall_timeout_s) == (300.0, 120.0)
    cuda = load_text(tmp_path, GOOD.replace('hardware = "cpu"', 'hardware = "cuda"'))
    assert (cuda.boot_timeout_s, cuda.stall_timeout_s) == (1200.0, 300.0)
    own = load_text(tmp_path, GOOD + "[engine]\nboot_timeout_s = 1800\nstall_timeout_s = 90.5\n")
    assert (own.boot_timeout_s, own.stall_timeout_s) == (1800.0, 90.5)
    with pytest.raises(ProfileError, match=r"key 'engine.stall_timeout_s' must be > 0, got 0"):
        load_text(tmp_path, GOOD + "[engine]\nstall_timeout_s = 0\n")
    with pytest.raises(
        ProfileError, match=r"key 'engine.boot_timout_s' is not a known key \(did you mean 'boot_timeout_s'\?\)"
    ):
        load_text(tmp_path, GOOD + "[engine]\nboot_timout_s = 10\n")


SCENARIOS = """
[scenarios.preemption]
kv_share = 0.3
[scenarios.prefix_soak]
rounds = 3
per_category = 2
[scenarios.structured]
prompts = "fixtures/prompts/tool_calls.jsonl"
schema = "fixtures/schemas/tool_call.json"
max_tokens = 64
"""


def test_scenarios_are_enabled_by_their_tables(tmp_path):
    assert load_text(tmp_path, GOOD).scenarios.enabled == ()
    p = load_text(tmp_path, GOOD + SCENARIOS)
    assert set(p.scenarios.enabled) == {"preemption", "prefix_soak", "structured"}
    assert p.scenarios.preemption.kv_share == 0.3 and p.scenarios.prefix_soak.rounds == 3
    assert p.scenarios.structured.schema == ROOT / "fixtures" / "schemas" / "tool_call.json"
    assert set(load_profile(find_profile("cpu-tiny", ROOT), ROOT).scenarios.enabled) == {
        "preemption",
        "prefix_soak",
        "structured",
        "requests",
        "edges",
    }


@pytest.mark.parametrize(
    "bad, key, says",
    [
        ("[scenarios.preemption]\nkv_share = 1.5\n", "scenarios.preemption.kv_share", "in (0, 1)"),
        ("[scenarios.prefix_soak]\nrounds = 1\n", "scenarios.prefix_soak.rounds", "must be >= 2"),
        (
            '[scenarios.structured]\nprompts = "fixtures/prompts/tool_calls.jsonl"\n',
            "scenarios.structured.schema",
            "is required",
        ),
        (
            '[scenarios.structured]\nprompts = "fixtures/prompts/tool_calls.jsonl"\nschema = "README.md"\n',
            "scenarios.structured.schema",
            "not a JSON schema file",
        ),
        ("[scenarios.preemptoin]\n", "scenarios.preemptoin", "did you mean 'preemption'"),
    ],
)
def test_a_bad_scenario_table_names_its_key(tmp_path, bad, key, says):
    with pytest.raises(ProfileError, match=f"key '{re.escape(key)}'.*{re.escape(says)}"):
        load_text(tmp_path, GOOD + bad)


def test_a_plant_must_be_known(tmp_path):
    text = GOOD.replace("prompt_lookup_max = 4 }", 'prompt_lookup_max = 4 }\nplant = "verify_emits_drafts"')
    with pytest.raises(
        ProfileError, match="key 'methods.ngram.plant' is not a known plant .did you mean 'verify_emits_draft'"
    ):
        load_text(tmp_path, text)


def test_tie_aware_equivalence_needs_its_forgiven_share(tmp_path):
    with pytest.raises(ProfileError, match="key 'equivalence.max_forgiven_share' is required with mode = 'tie-aware'"):
        load_text(tmp_path, GOOD + '[equivalence]\nmode = "tie-aware"\nlogprob_margin = 0.05\n')
    p = load_text(
        tmp_path, GOOD + '[equivalence]\nmode = "tie-aware"\nlogprob_margin = 0.05\nmax_forgiven_share = 0.1\n'
    )
    assert p.equivalence.max_forgiven_share == 0.1


def test_another_dtype_keeps_its_baselines_apart():
    cpu_tiny = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    assert cpu_tiny.baselines_name == "cpu-tiny" and cpu_tiny.with_dtype("float32") is cpu_tiny
    bf16 = cpu_tiny.with_dtype("bfloat16")
    assert bf16.baselines_name == "cpu-tiny@bfloat16" and bf16.name == "cpu-tiny"
    assert load_profile(find_profile("cpu-tiny-bf16", ROOT), ROOT).baselines_name == "cpu-tiny-bf16"


def test_a_plants_strength_is_for_the_plant_that_takes_one(tmp_path):
    for plant, says in (
        ("verify_temperature_scaled", "takes a factor in (0, 4]"),
        ("penalty_skips_drafts:0.5", "the other plants none"),
        ("verify_temperature_scaled:x", "a strength is a number"),
        ("verify_temperature_scaled:9", "takes a factor in (0, 4]"),
        ("accept_less_in_large_batches:1.5", "accept_less_in_large_batches takes a batch size >= 2"),
    ):
        text = GOOD.replace("[methods.eagle]", f'plant = "{plant}"\n[methods.eagle]')
        with pytest.raises(ProfileError, match=r"key 'methods\.ngram\.plant'") as failed:
            load_text(tmp_path, text)
        assert says in str(failed.value), failed.value
    planted = GOOD.replace("[methods.eagle]", 'plant = "verify_temperature_scaled:0.25"\n[methods.eagle]')
    assert load_text(tmp_path, planted).methods["ngram"].plant == "verify_temperature_scaled:0.25"


def test_known_issues_are_read_and_name_methods_of_the_profile(tmp_path):
    entry = (
        '[known_issues."vllm#1"]\ncheck = "requests"\ncases = ["sampled"]\nmethods = ["ngram"]\n'
        'releases = ["0.32.0"]\nnote = "n"\n'
    )
    issue = load_text(tmp_path, GOOD + entry).known_issues["vllm#1"]
    assert (issue.check, issue.cases, issue.methods, issue.releases) == (
        "requests",
        ("sampled",),
        ("ngram",),
        ("0.32.0",),
    )
    with pytest.raises(ProfileError, match=r"key 'known_issues\.vllm#1\.methods' names 'ngrm', not a method"):
        load_text(tmp_path, GOOD + entry.replace('["ngram"]', '["ngrm"]'))
    with pytest.raises(ProfileError, match=r"key 'known_issues\.vllm#1\.releases' is required"):
        load_text(tmp_path, GOOD + entry.replace('releases = ["0.32.0"]\n', ""))
    with pytest.raises(ProfileError, match=r"key 'known_issues\.vllm#1\.cases' must be a non-empty list"):
        load_text(tmp_path, GOOD + entry.replace('["sampled"]', "[]"))
