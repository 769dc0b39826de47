"""Chat files without our ids (a team's traffic, SPEED-Bench as vLLM's bench reads it): loading, malformed
rows by file and line, the seeded per-category draw, and prompts longer than the room the profile leaves."""

import json
import random
from pathlib import Path

import pytest

from specgate.errors import PromptSetError
from specgate.profile.prompt_sources import PromptSource
from specgate.prompts import (
    load_chat_set,
    load_source,
    sample_per_category,
    validate_prompt_set,
    word_shape_score,
)
from specgate.prompts.inputs import encode, fit

pytestmark = pytest.mark.needs_vllm  # the target's transformers tokenizer (imports torch)

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "unit" / "data"
QUALITATIVE = DATA / "speed_bench" / "qualitative.jsonl"
THROUGHPUT = DATA / "speed_bench" / "throughput_2k.jsonl"
TRAFFIC = DATA / "chat_traffic.jsonl"
SPEED_BENCH_CATEGORIES = [
    "coding",
    "math",
    "humanities",
    "stem",
    "writing",
    "summarization",
    "roleplay",
    "rag",
    "multilingual",
    "reasoning",
    "qa",
]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ROOT / "fixtures" / "zoo" / "target")


def speed_bench(path=QUALITATIVE, per_category=None, too_long="skip"):
    return PromptSource("speed_bench", path, per_category, too_long, split=path.stem, name=f"SPEED-Bench {path.stem}")


def test_speed_bench_rows_load_with_their_categories_ids_and_first_turn():
    prompts = load_source(speed_bench())
    assert list(dict.fromkeys(p.category for p in prompts)) == SPEED_BENCH_CATEGORIES
    assert len(prompts) == 33 and prompts[0].id == "qualitative/codi000"
    # a multi-turn row is sent as its first turn, as vLLM's speed_bench loader does
    assert len(prompts[0].messages) == 1 and prompts[0].messages[0]["content"].startswith("Write a Python function")
    assert any("Сегодня" in p.plain_text for p in prompts)  # Cyrillic passes the random-token check


def test_a_chat_file_keeps_its_conversations_and_derives_stable_ids(tmp_path):
    prompts = load_chat_set(TRAFFIC)
    assert [p.category for p in prompts] == ["support"] * 3 + ["code_review"] * 3
    assert [m["role"] for m in prompts[0].messages] == ["system", "user"]
    assert [m["role"] for m in prompts[2].messages] == ["user", "assistant", "user"]
    assert all(p.id.startswith("chat_traffic/") for p in prompts) and len({p.id for p in prompts}) == 6
    # the ids hash the content: the same prompts keep their ids in another order, among other rows
    lines = TRAFFIC.read_text().splitlines()
    moved = tmp_path / "chat_traffic.jsonl"
    moved.write_text(
        "\n".join(
            [json.dumps({"category": "new", "messages": [{"role": "user", "content": "Hi there."}]}), *reversed(lines)]
        )
        + "\n"
    )
    assert {p.id for p in prompts} < {p.id for p in load_chat_set(moved)}


def write(tmp_path, *rows, name="traffic.jsonl"):
    path = tmp_path / name
    ok = {"category": "c", "messages": [{"role": "user", "content": "A fine first question."}]}
    path.write_text("\n".join([json.dumps(ok), *rows]) + "\n")
    return path


@pytest.mark.parametrize(
    "row, words",
    [
        ('{"category": "c"}', "no 'messages'"),
        ('{"category": "c", "messages": []}', "'messages' must be a non-empty list"),
        (
            '{"category": "c", "messages": [{"role": "user", "content": "  "}]}',
            r"messages\[0\] \(user\) has empty content",
        ),
        (
            '{"category": "c", "messages": [{"role": "bot", "content": "hello"}]}',
            r"messages\[0\] must be \{'role': one of",
        ),
        ('{"category": "c", "messages": [{"role": "user"}]}', r"messages\[0\] must be"),
        ('{"messages": [{"role": "user", "content": "hello"}]}', "'category' must be a non-empty string"),
        (
            '{"category": "c", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}',
            "last message must be from the user",
        ),
        ('["not", "an", "object"]', "must be a JSON object"),
        ("{broken", "not valid JSON"),
        (
            '{"category": "c", "messages": [{"role": "user", "content": "A fine first question."}]}',
            "the same prompt as line 1",
        ),
        (
            '{"category": "c", "messages": [{"role": "user", "content": "FULL BENCHMARK DATA SHOULD BE FETCHED FROM '
            'THE SOURCE"}]}',
            "placeholder.*prepare.py",
        ),
    ],
)
def test_a_malformed_chat_row_names_file_and_line(tmp_path, row, words):
    path = write(tmp_path, row)
    with pytest.raises(PromptSetError, match=words) as err:
        load_chat_set(path)
    assert f"{path}, line 2" in str(err.value)


def test_our_schema_rejects_empty_content_too(tmp_path):
    path = tmp_path / "ours.jsonl"
    path.write_text('{"id": "a", "category": "c", "messages": [{"role": "user", "content": ""}]}\n')
    with pytest.raises(PromptSetError, match=rf"{path}, line 1: messages\[0\] \(user\) has empty content"):
        load_source(path)


def test_a_speed_bench_row_without_a_user_turn_is_an_error(tmp_path):
    path = write(tmp_path, '{"category": "c", "messages": [{"role": "system", "content": "Be brief."}]}')
    with pytest.raises(PromptSetError, match=rf"{path}, line 2: no message from the user"):
        load_chat_set(path, first_turn=True)


def test_the_draw_takes_n_per_category_the_same_every_time_whatever_the_row_order(tmp_path):
    prompts = load_source(speed_bench())
    drawn = sample_per_category(prompts, 2, seed=0)
    assert len(drawn) == 22 and all(sum(p.category == c for p in drawn) == 2 for c in SPEED_BENCH_CATEGORIES)
    assert [p.id for p in drawn] == [p.id for p in sample_per_category(prompts, 2, seed=0)]
    assert [p.id for p in drawn] == [p.id for p in prompts if p in drawn]  # file order
    shuffled = tmp_path / "qualitative.jsonl"
    lines = QUALITATIVE.read_text(encoding="utf-8").splitlines()
    random.Random(3).shuffle(lines)
    shuffled.write_text("\n".join(lines) + "\n", encoding="utf-8")
    again = sample_per_category(load_source(speed_bench(shuffled)), 2, seed=0)
    assert {p.id for p in again} == {p.id for p in drawn}
    assert {p.id for p in sample_per_category(prompts, 2, seed=1)} != {p.id for p in drawn}
    assert sample_per_category(prompts, None, seed=0) == prompts
    assert len(sample_per_category(prompts, 80, seed=0)) == 33  # more than a category has: all of it


def test_long_inputs_are_skipped_and_replaced_by_the_next_drawn(tokenizer):
    prompts = load_source(speed_bench(THROUGHPUT))
    assert max(len(encode(p, tokenizer)) for p in prompts) > 1500  # one long-input prompt per tier
    everything = fit(speed_bench(THROUGHPUT), prompts, tokenizer, 992, seed=0)
    assert sorted(everything.skipped) == [
        "throughput_2k/high_entropy-2",
        "throughput_2k/low_entropy-2",
        "throughput_2k/mixed-2",
    ]
    assert len(everything.prompts) == 6 and not everything.truncated
    two = fit(speed_bench(THROUGHPUT, per_category=2), prompts, tokenizer, 992, seed=0)
    assert len(two.prompts) == 6 and all(len(t.token_ids) <= 992 for t in two.prompts)  # the long ones replaced
    assert [t.id for t in two.prompts] == [p.id for p in prompts if p.id not in everything.skipped]


def test_long_inputs_can_be_truncated_in_the_middle_instead(tokenizer):
    prompts = load_source(speed_bench(THROUGHPUT))
    out = fit(speed_bench(THROUGHPUT, too_long="truncate"), prompts, tokenizer, 700, seed=0)
    assert len(out.prompts) == 9 and len(out.truncated) == 3 and not out.skipped
    long = {t.id: t for t in out.prompts}["throughput_2k/mixed-2"]
    assert 650 <= len(long.token_ids) <= 700
    text = tokenizer.decode(long.token_ids)
    assert "Context:\nThe report looks at" in text and text.rstrip().endswith("say so.\n<|assistant|>")


def test_a_prompt_too_long_is_an_error_for_our_files_naming_the_way_out(tokenizer):
    prompts = load_source(speed_bench(THROUGHPUT))
    with pytest.raises(
        PromptSetError, match=r"has 16\d\d tokens; the profile leaves room for 992.*too_long = \"skip\""
    ):
        fit(PromptSource("chat", THROUGHPUT, None, "error"), prompts, tokenizer, 992, seed=0)


def test_a_category_with_nothing_that_fits_is_an_error(tokenizer):
    prompts = load_source(speed_bench(THROUGHPUT))
    with pytest.raises(PromptSetError, match=r"every prompt of category 'low_entropy' is longer than the 20 tokens"):
        fit(speed_bench(THROUGHPUT), prompts, tokenizer, 20, seed=0)


def test_cased_scripts_other_than_latin_count_as_word_shaped():
    assert word_shape_score(["Сегодня", "утром", "ООН", "Αθήνα", "είναι", "Việt", "Nam", "người"]) == 1.0
    assert word_shape_score(["приВЕТмир", "ΑθΉνα"]) == 0.0  # case flips inside a word: token salad


def test_foreign_chat_files_may_hold_a_few_split_characters_ours_none(tmp_path):
    rows = [
        {"category": "c", "messages": [{"role": "user", "content": f"Question number {i} about the weather today."}]}
        for i in range(40)
    ]
    rows[7]["messages"][0]["content"] += " caf\ufffd"  # a character cut at a token boundary
    path = tmp_path / "traffic.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert len(load_source(PromptSource("chat", path))) == 40
    with pytest.raises(PromptSetError, match="replacement/control characters"):
        validate_prompt_set(load_chat_set(path))
