"""The edges scenario's requests (specgate.run.edges.build): each class at the shape it is named for."""

from dataclasses import dataclass
from pathlib import Path

from specgate.profile import load_profile
from specgate.run.edges import EOS_WINDOW_START, build

ROOT = Path(__file__).resolve().parents[3]
CONFIG = load_profile(ROOT / "fixtures" / "profiles" / "cpu-tiny.toml", ROOT).scenarios.edges


@dataclass
class Prompt:
    id: str
    token_ids: tuple


PROMPTS = [Prompt(f"p{i}", tuple(range(100 * i, 100 * i + 300))) for i in range(1, 6)]
GREEDY = {p.id: tuple(range(1000 + 50 * i, 1000 + 50 * i + 48)) for i, p in enumerate(PROMPTS)}


def plan(budget=2048, eos=None, greedy=GREEDY, k=3):
    return build(PROMPTS, greedy, eos, k, CONFIG, 1024, 16, 128, budget)


def test_block_prompts_are_multiples_of_the_block_size_and_one_token_either_side():
    lengths = sorted(len(c.token_ids) for c in plan().of("block"))
    assert lengths == [127, 128, 129, 255, 256, 257]


def test_context_edge_requests_end_at_max_model_len_at_every_offset_of_a_draft_window():
    cases = plan(k=3).of("context_edge")
    assert [c.params["max_tokens"] for c in cases] == [8, 9, 10, 11]  # edge_tokens .. edge_tokens + k
    assert all(len(c.token_ids) + c.params["max_tokens"] == 1024 and c.params["ignore_eos"] for c in cases)


def test_split_prompts_together_exceed_the_token_budget_and_no_two_cases_share_a_first_block():
    p = plan(budget=2048)
    split = p.of("split")
    fit = 2048 // len(split[0].token_ids)  # prefilled whole in the first step; the rest are split
    assert len(split) - fit >= 2 * len(split) / 3
    firsts = [c.token_ids[:128] for c in p.cases if c.klass != "eos"]
    assert len(set(firsts)) == len(firsts)
    assert "not sent" in plan(budget=None).notes["split"] and not plan(budget=None).of("split")


def test_eos_uses_outputs_that_end_at_eos_where_there_are_any():
    ending = dict(GREEDY, p2=GREEDY["p2"][:20] + (2,))
    cases = plan(eos=2, greedy=ending).of("eos")
    assert [c.id for c in cases] == ["eos@p2"] and "stop_token_ids" not in cases[0].params


def test_without_an_output_ending_at_eos_a_stop_token_stands_in_at_each_offset_of_the_window():
    p = plan(eos=2, k=3)
    cases = p.of("eos")
    assert [c.id for c in cases[:4]] == [f"eos@p1:{j}" for j in range(EOS_WINDOW_START, EOS_WINDOW_START + 4)]
    assert cases[0].params["stop_token_ids"] == [GREEDY["p1"][EOS_WINDOW_START]]
    assert len({c.id.split(":")[0] for c in cases}) == CONFIG.eos_prompts
    assert "stands in" in p.notes["eos"]
