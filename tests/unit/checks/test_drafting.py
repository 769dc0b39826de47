"""How often a method drafted, as the acceptance and load checks judge it: the share of decode steps that drafted
and the draft tokens per output token against the stored figures, and a dynamic-speculation schedule's policy
held both ways."""

import json

import pytest

from specgate.checks import Verdict, drafting
from specgate.figures.acceptance import Drafting, SpecCounters
from specgate.profile import load_profile
from specgate.run.results import header_lines
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

SCHEDULE = "num_speculative_tokens_per_batch_size = [[1, 2, 2], [3, 256, 1]]"
# fake gate sessions tokenize with the target's tokenizer (imports torch): those tests need vLLM's environment
needs_vllm = pytest.mark.needs_vllm
PROFILE = fake_profile("""
concurrency = [1, 4]
[methods.good]
speculative_config = { method = "ngram", num_speculative_tokens = 2 }
""")


def test_a_schedule_gives_the_range_holding_the_batch_and_carries_k_over_gaps_and_past_the_end():
    schedule = [[1, 4, 3], [9, 16, 2], [17, 32, 1]]
    assert [drafting.batch_k(schedule, b) for b in (1, 4, 5, 8, 9, 16, 17, 32, 64)] == [3, 3, 3, 3, 2, 2, 1, 1, 1]


def test_each_figure_is_a_floor_and_a_schedules_draft_tokens_a_ceiling_too():
    now = Drafting.of(SpecCounters(50, 100, 60), output_tokens=200, requests=10)  # share 50 / 130, 0.5 per token
    stored = {"draft_share": 0.5, "draft_tokens_per_token": 0.4}
    failed = [b.fails() for b in drafting.bounds(now, stored, 0.05, None, "vLLM 0.32.0") if b.fails()]
    assert len(failed) == 1 and failed[0].startswith("share of decode steps that drafted: measured 0.3846")
    assert "50 of 130 decode steps drafted" in failed[0]
    policy = drafting.bounds(now, stored, 0.05, [[1, 2, 2], [3, 256, 1]], "vLLM 0.32.0", batch=16)
    (ceiling,) = [b for b in policy if b.ceiling]
    assert ceiling.fails().startswith("draft tokens per output token (policy): measured 0.5, baseline 0.4")
    assert "ceiling 0.42" in ceiling.fails() and "a step of 16 requests drafts 1" in ceiling.fails()
    # the policy both ways: fewer draft tokens than the schedule gave before fails its floor, the ceiling holds
    fewer = drafting.bounds(now, {"draft_tokens_per_token": 0.6}, 0.05, [[1, 2, 2], [3, 256, 1]], "vLLM 0.32.0", 16)
    assert [b.ceiling for b in fewer if b.fails()] == [False] and "floor 0.57" in fewer[0].fails()
    assert drafting.bounds(now, None, 0.05) == [] and drafting.bounds(now, {"mean_acceptance_length": 2}, 0.05) == []


def session(tmp_path, text=PROFILE, update=False):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "fake.toml"
    path.write_text(text)
    return fake_session(load_profile(path, tmp_path), tmp_path, FakeScript.from_dict({}), update_baselines=update)


def store(tmp_path, text=PROFILE, edit=None) -> None:
    """Store the fake's figures for every category and level, then `edit(method entry)` the stored file: the
    figures a past run stored."""
    s = session(tmp_path, text, update=True)
    for level in (1, 4):
        s.judge("speedup", "baseline", level)
        s.judge("speedup", "good", level)
        assert s.judge("load", "good", level).verdict is Verdict.PASS
    for category in s.plan.inputs.categories():
        assert s.judge("acceptance", "good", category).verdict is Verdict.PASS
    s.write_baselines()
    (path,) = (tmp_path / "baselines" / "fake").glob("*.json")
    data = json.loads(path.read_text())
    if edit:
        edit(data["methods"]["good"])
    path.write_text(json.dumps(data))


@needs_vllm
def test_a_category_that_drafted_more_often_before_fails_naming_the_figure(tmp_path):
    def more(entry):
        first = sorted(entry["acceptance"])[0]
        entry["acceptance"][first]["draft_share"] *= 1.1

    store(tmp_path, edit=more)
    s = session(tmp_path)
    categories = sorted(s.plan.inputs.categories())
    j = s.judge("acceptance", "good", categories[0])
    assert j.verdict is Verdict.FAIL
    assert f"category '{categories[0]}': share of decode steps that drafted: measured" in j.message
    assert {r.metric for r in j.rows if r.failing} == {"draft_share"}
    assert s.judge("acceptance", "good", categories[1]).verdict is Verdict.PASS
    assert s.judge("load", "good", 4).verdict is Verdict.PASS


@needs_vllm
def test_a_dynamic_schedule_that_drafts_more_than_its_stored_policy_fails_and_a_static_method_does_not(tmp_path):
    def fewer(entry):
        entry["load"]["C=4"]["draft_tokens_per_token"] *= 0.8  # the policy drafted less at this level before

    dynamic = PROFILE.replace("num_speculative_tokens = 2 }", f"num_speculative_tokens = 2, {SCHEDULE} }}")
    store(tmp_path, dynamic, edit=fewer)
    s = session(tmp_path, dynamic)
    j = s.judge("load", "good", 4)
    assert j.verdict is Verdict.FAIL
    assert "C=4: draft tokens per output token (policy): measured" in j.message
    assert "its drafting policy: num_speculative_tokens_per_batch_size [[1, 2, 2], [3, 256, 1]]" in j.message
    assert "a step of 4 requests drafts 1" in j.message
    assert {r.metric for r in j.rows if r.failing} == {drafting.POLICY}
    # the same stored figures, without a schedule: more draft tokens than stored is no loss
    store(tmp_path / "static", edit=fewer)
    assert session(tmp_path / "static").judge("load", "good", 4).verdict is Verdict.PASS


@needs_vllm
@pytest.mark.parametrize("gate", ["acceptance", "load"])
def test_figures_stored_before_drafting_was_measured_are_not_judged(tmp_path, gate):
    def older(entry):
        for record in [*entry["acceptance"].values(), *entry["load"].values()]:
            record.pop("draft_share"), record.pop("draft_tokens_per_token")

    store(tmp_path, edit=older)
    s = session(tmp_path)
    key = 4 if gate == "load" else sorted(s.plan.inputs.categories())[0]
    j = s.judge(gate, "good", key)
    assert j.verdict is Verdict.PASS
    shown = {r.metric: r for r in j.rows}
    assert shown["draft_share"].value is not None and shown["draft_share"].bound is None
    # and the summary says so once, with the command that stores them
    (line,) = [line for line in header_lines(s) if line.startswith("drafted steps")]
    assert f"shown, not judged, at 1 key(s) (good {j.key})" in line and s.baselines.update_command in line
