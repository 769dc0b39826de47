"""Profile entries that name prompt sources: SPEED-Bench splits, chat files, per-category draws, a load set
for the speedup gate. Every bad entry names the file and the key; a missing SPEED-Bench directory says how
to prepare it; the GPU profiles fall back to general.jsonl where the data is absent."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specgate.errors import ProfileError
from specgate.profile import find_profile, load_profile
from specgate.profile.prompt_sources import SPEED_BENCH_ENV
from specgate.prompts import load_prompts
from specgate.prompts.inputs import PromptInputs

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "unit" / "data"
SPEED_BENCH = DATA / "speed_bench"
GENERAL = "fixtures/prompts/general.jsonl"
HEAD = """
name = "t"
hardware = "cpu"
target = "zoo:target"
dtype = "float32"
max_model_len = 1024
max_tokens = 32
concurrency = [1, 4]
"""
METHODS = """
[methods.ngram]
speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 2, prompt_lookup_max = 4 }
"""


@pytest.fixture(autouse=True)
def no_speed_bench_dir(monkeypatch):
    monkeypatch.delenv(SPEED_BENCH_ENV, raising=False)


def load_text(tmp_path, prompts: str, extra: str = ""):
    path = tmp_path / "p.toml"
    path.write_text(HEAD + f"prompts = {prompts}\n" + METHODS + extra)
    return load_profile(path, ROOT)


def test_a_speed_bench_entry_reads_its_split_from_the_environments_directory(tmp_path, monkeypatch):
    monkeypatch.setenv(SPEED_BENCH_ENV, str(SPEED_BENCH))
    p = load_text(tmp_path, '[{ speed_bench = "qualitative", per_category = 2 }]')
    (src,) = p.sources
    assert (src.kind, src.split, src.per_category, src.too_long) == ("speed_bench", "qualitative", 2, "skip")
    assert src.path == SPEED_BENCH / "qualitative.jsonl" and p.prompts == (src.path,)
    assert "SPEED-Bench qualitative" in src.label and not src.note


def test_the_entrys_dir_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(SPEED_BENCH_ENV, str(tmp_path / "elsewhere"))
    p = load_text(tmp_path, f'[{{ speed_bench = "throughput_2k", dir = "{SPEED_BENCH.relative_to(ROOT)}" }}]')
    assert p.sources[0].path == SPEED_BENCH / "throughput_2k.jsonl" and p.sources[0].per_category is None


def test_string_entries_keep_working_unchanged(tmp_path):
    p = load_text(tmp_path, f'["{GENERAL}", {{ chat = "tests/unit/data/chat_traffic.jsonl", per_category = 2 }}]')
    plain, drawn = p.sources
    assert (plain.kind, plain.per_category, plain.too_long) == ("file", None, "error")
    assert (drawn.kind, drawn.per_category, drawn.too_long) == ("chat", 2, "error")
    loaded = PromptInputs(p, ROOT).loaded()
    assert [q.id for q in loaded[:120]] == [q.id for q in load_prompts([ROOT / GENERAL])] and len(loaded) == 120 + 2 * 2


def test_a_configured_directory_that_does_not_exist_says_how_to_prepare_it(tmp_path, monkeypatch):
    monkeypatch.setenv(SPEED_BENCH_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ProfileError) as err:
        load_text(tmp_path, f'[{{ speed_bench = "qualitative", fallback = "{GENERAL}" }}]')  # a typo is not "absent"
    msg = str(err.value)
    assert str(tmp_path / "p.toml") in msg and "'prompts[0]'" in msg and f"${SPEED_BENCH_ENV}" in msg
    assert (
        "is not a directory" in msg
        and "speed-bench/prepare.py" in msg
        and f"--output_dir {tmp_path / 'nowhere'}" in msg
    )


def test_no_directory_and_no_fallback_is_an_error_saying_how_to_prepare_and_point_at_it(tmp_path):
    with pytest.raises(ProfileError) as err:
        load_text(tmp_path, '[{ speed_bench = "qualitative" }]')
    msg = str(err.value)
    assert "'prompts[0]'" in msg and "no SPEED-Bench directory is configured" in msg and SPEED_BENCH_ENV in msg
    assert "pip install datasets tiktoken" in msg and "fallback" in msg


def test_a_directory_without_the_split_names_the_file_and_the_config_to_prepare(tmp_path):
    (tmp_path / "sb").mkdir()
    with pytest.raises(ProfileError, match=r"has no throughput_8k\.jsonl.*--config throughput_8k --output_dir"):
        load_text(tmp_path, f'[{{ speed_bench = "throughput_8k", dir = "{tmp_path / "sb"}" }}]')


def test_no_directory_with_a_fallback_reads_the_fallback_whole_and_says_so(tmp_path):
    p = load_text(tmp_path, f'[{{ speed_bench = "qualitative", per_category = 2, fallback = "{GENERAL}" }}]')
    (src,) = p.sources
    assert (src.kind, src.path, src.per_category, src.too_long) == ("file", ROOT / GENERAL, None, "error")
    assert "SPEED-Bench qualitative is not on this machine" in src.note and GENERAL in src.note
    inputs = PromptInputs(p, ROOT)
    assert len(inputs.loaded()) == 120 and inputs.notes() == [src.note]


@pytest.mark.parametrize(
    "entry, key, words",
    [
        ('{ speed_bench = "qualitative", per_categroy = 2 }', "prompts[0].per_categroy", "did you mean 'per_category'"),
        ('{ speed_bench = "qualitive" }', "prompts[0].speed_bench", "did you mean 'qualitative'"),
        (
            '{ chat = "tests/unit/data/chat_traffic.jsonl", per_category = 0 }',
            "prompts[0].per_category",
            '>= 1 or "all"',
        ),
        (
            '{ chat = "tests/unit/data/chat_traffic.jsonl", per_category = "some" }',
            "prompts[0].per_category",
            '>= 1 or "all"',
        ),
        (
            '{ chat = "tests/unit/data/chat_traffic.jsonl", too_long = "skipp" }',
            "prompts[0].too_long",
            "did you mean 'skip'",
        ),
        (
            '{ chat = "tests/unit/data/chat_traffic.jsonl", file = "fixtures/prompts/general.jsonl" }',
            "prompts[0]",
            "exactly one of",
        ),
        ("{ per_category = 2 }", "prompts[0]", "exactly one of"),
        (
            '{ chat = "tests/unit/data/chat_traffic.jsonl", dir = "x" }',
            "prompts[0].dir",
            "only applies to a speed_bench",
        ),
        ('{ chat = "tests/unit/data/missing.jsonl" }', "prompts[0].chat", "does not exist"),
        ('{ speed_bench = "qualitative", fallback = "missing.jsonl" }', "prompts[0].fallback", "does not exist"),
        ("3", "prompts[0]", "must be a path string or a table"),
    ],
)
def test_a_bad_entry_names_file_and_key(tmp_path, entry, key, words):
    with pytest.raises(ProfileError) as err:
        load_text(tmp_path, f"[{entry}]")
    msg = str(err.value)
    assert str(tmp_path / "p.toml") in msg and f"'{key}'" in msg and words in msg, msg


def test_the_speedup_gate_gets_its_own_prompts_validated_the_same_way(tmp_path, monkeypatch):
    monkeypatch.setenv(SPEED_BENCH_ENV, str(SPEED_BENCH))
    p = load_text(
        tmp_path,
        f'["{GENERAL}"]',
        '[speedup]\nmax_tokens = 16\nprompts = [{ speed_bench = "throughput_2k", per_category = 2 }]\n',
    )
    assert [s.split for s in p.speedup.prompts] == ["throughput_2k"] and p.prompts == (ROOT / GENERAL,)
    load = PromptInputs(p, ROOT).speedup_inputs()
    assert load.max_prompt_tokens == 1024 - 16 and {q.category for q in load.loaded()} == {
        "low_entropy",
        "mixed",
        "high_entropy",
    }
    with pytest.raises(ProfileError, match=r"'speedup.prompts\[0\].too_lon'.*did you mean 'too_long'"):
        load_text(
            tmp_path, f'["{GENERAL}"]', '[speedup]\nprompts = [{ speed_bench = "throughput_2k", too_lon = "skip" }]\n'
        )
    with pytest.raises(ProfileError, match=r"'speedup.max_tokens'.*smaller than max_model_len"):
        load_text(tmp_path, f'["{GENERAL}"]', "[speedup]\nmax_tokens = 2048\n")


def test_without_a_load_set_the_speedup_gate_uses_the_profiles_prompts(tmp_path):
    inputs = PromptInputs(load_text(tmp_path, f'["{GENERAL}"]'), ROOT)
    assert inputs.speedup_inputs() is inputs


# -- the GPU profiles ----------------------------------------------------------------------------------------
GATED = ["llama31-8b-h100", "llama33-70b-tp4-a100"]


@pytest.mark.parametrize("name", GATED)
def test_gpu_profile_falls_back_to_general_where_speed_bench_is_absent(name):
    p = load_profile(find_profile(name, ROOT), ROOT)
    assert p.prompts == (ROOT / GENERAL,) and all("not on this machine" in s.note for s in p.sources)
    assert [s.path for s in p.speedup.prompts] == [ROOT / GENERAL]
    assert len(PromptInputs(p, ROOT).categories()) == 10


@pytest.mark.parametrize("name", GATED)
def test_gpu_profile_gates_acceptance_on_qualitative_and_speed_on_a_throughput_split_that_fits(name, monkeypatch):
    monkeypatch.setenv(SPEED_BENCH_ENV, str(SPEED_BENCH))
    p = load_profile(find_profile(name, ROOT), ROOT)
    (acc,), (load,) = p.sources, p.speedup.prompts
    assert (acc.kind, acc.split, acc.too_long) == ("speed_bench", "qualitative", "skip") and 4 <= acc.per_category <= 20
    assert (load.kind, load.too_long) == ("speed_bench", "skip") and load.split.startswith("throughput_")
    # ~N k tokens of o200k; Llama 3's tokenizer and the chat template add a little: room for 1.3 x N k
    room = p.max_model_len - (p.speedup.max_tokens or p.max_tokens)
    assert 1.3 * int(load.split.removeprefix("throughput_").removesuffix("k")) * 1000 < room
    # one trial at the highest concurrency sends distinct prompts (three entropy tiers)
    assert 3 * load.per_category >= p.speedup.num_requests(max(p.concurrency))
    assert len(PromptInputs(p, ROOT).categories()) == 11


def test_gpu_profile_collects_without_the_data():
    """`--collect-only` on a machine without SPEED-Bench: general.jsonl's categories, no error."""
    env = {k: v for k, v in os.environ.items() if k != SPEED_BENCH_ENV}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "--specgate-profile",
            "llama31-8b-h100",
            "--collect-only",
            "-q",
            "-p",
            "no:randomly",
            "tests/gate/test_acceptance.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "test_acceptance_holds_per_category[eagle3-short_qa]" in result.stdout
