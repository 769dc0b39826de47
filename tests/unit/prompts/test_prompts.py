"""Prompt sets: ours load and pass; random-token sets and malformed files are rejected by name."""

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from specgate.errors import PromptSetError
from specgate.prompts import load_prompt_set, load_prompts, validate_prompt_set
from specgate.prompts.inputs import tokenize

ROOT = Path(__file__).resolve().parents[3]
PROMPTS = ROOT / "fixtures" / "prompts"
GENERAL_CATEGORIES = {
    "short_qa",
    "summarization",
    "code_generation",
    "code_editing",
    "creative_writing",
    "translation",
    "structured_output",
    "math_reasoning",
    "multi_turn",
    "rag",
}


def test_general_set_has_every_category_with_ten_or_more_prompts():
    prompts = load_prompts([PROMPTS / "general.jsonl"], min_per_category=10)
    counts = Counter(p.category for p in prompts)
    assert GENERAL_CATEGORIES <= set(counts) and min(counts.values()) >= 10, counts


def test_embedded_set_is_raw_text_in_several_categories():
    prompts = load_prompts([PROMPTS / "embedded.jsonl"], min_per_category=10)
    assert all(p.text for p in prompts)
    assert len({p.category for p in prompts}) >= 5


def test_embedded_prompts_stop_on_their_last_character():
    # The zoo's BPE, like most code tokenizers, merges a newline with the next line's indentation
    # ("\n    " is one token). A prompt ending in a bare newline hands the model a token it only ever
    # saw before unindented lines, so it closed the function it was asked to continue (the target
    # then started a new "# Same function" header instead of the body).
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ROOT / "fixtures" / "zoo" / "target" / "tokenizer.json"))
    assert "\n   " in [tok.decode([i]) for i in tok.encode("if x:\n    return y").ids]
    ragged = [p.id for p in load_prompt_set(PROMPTS / "embedded.jsonl") if p.text != p.text.rstrip()]
    assert not ragged, f"embedded prompts ending in whitespace: {ragged}"


def write_set(tmp_path, texts, name="salad.jsonl"):
    path = tmp_path / name
    path.write_text(
        "".join(json.dumps({"id": f"p{i}", "category": "c", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    return path


def test_text_decoded_from_random_token_ids_is_rejected(tmp_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ROOT / "fixtures" / "zoo" / "target" / "tokenizer.json"))
    rng = random.Random(0)
    real = load_prompt_set(PROMPTS / "embedded.jsonl")
    salad = [tok.decode([rng.randrange(6, tok.get_vocab_size()) for _ in tok.encode(p.text).ids]) for p in real]
    with pytest.raises(PromptSetError, match="looks like random tokens"):
        validate_prompt_set(load_prompt_set(write_set(tmp_path, salad)))


def test_word_salad_from_a_large_vocabulary_is_rejected(tmp_path):
    # Random ids of a 100k+ vocabulary decode to whole words in random order: well-shaped words,
    # but without the function-word repetition of real text.
    real = load_prompt_set(PROMPTS / "general.jsonl")
    words = sorted({w for p in real for w in p.plain_text.split()})
    rng = random.Random(1)
    salad = [" ".join(rng.choice(words) for _ in p.plain_text.split()) for p in real]
    with pytest.raises(PromptSetError, match=r"most common words cover only"):
        validate_prompt_set(load_prompt_set(write_set(tmp_path, salad)))


def test_undecodable_bytes_are_rejected(tmp_path):
    with pytest.raises(PromptSetError, match="replacement/control characters"):
        validate_prompt_set(load_prompt_set(write_set(tmp_path, ["a perfectly normal sentence \ufffd here"])))


@pytest.mark.parametrize(
    "line, words",
    [
        ("{not json", "not valid JSON"),
        ('{"id": "a", "category": "c"}', "exactly one of 'messages'"),
        ('{"id": "a", "category": "c", "text": "x", "extra": 1}', "unknown keys"),
        ('{"id": "", "category": "c", "text": "x"}', "'id' must be a non-empty string"),
        ('{"id": "a", "category": "c", "messages": [{"role": "bot", "content": "x"}]}', "messages\\[0\\]"),
        ('{"id": "a", "category": "c", "messages": [{"role": "assistant", "content": "x"}]}', "last message"),
    ],
)
def test_malformed_line_names_file_and_line(tmp_path, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok", "category": "c", "text": "fine"}\n' + line + "\n")
    with pytest.raises(PromptSetError, match=words) as err:
        load_prompt_set(path)
    assert f"{path}, line 2" in str(err.value)


def test_duplicate_ids_are_rejected(tmp_path):
    path = tmp_path / "dup.jsonl"
    path.write_text('{"id": "a", "category": "c", "text": "x"}\n{"id": "a", "category": "c", "text": "y"}\n')
    with pytest.raises(PromptSetError, match="used twice"):
        load_prompt_set(path)


@pytest.mark.needs_vllm
def test_tokenize_applies_chat_template_once_and_prepends_bos_to_raw_text():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ROOT / "fixtures" / "zoo" / "target")
    general = load_prompt_set(PROMPTS / "general.jsonl")[:3]
    embedded = load_prompt_set(PROMPTS / "embedded.jsonl")[:3]
    out = tokenize(general + embedded, tok, max_prompt_tokens=4096)
    assert all(t.token_ids[0] == tok.bos_token_id for t in out)
    chat = tok.decode(out[0].token_ids)
    assert "<|user|>" in chat and chat.rstrip().endswith("<|assistant|>")
    assert tok.decode(out[3].token_ids[1:]) == embedded[0].text
    with pytest.raises(PromptSetError, match="max_model_len"):
        tokenize(embedded, tok, max_prompt_tokens=10)
