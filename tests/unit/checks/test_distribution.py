"""Acceptance as a distribution, judged: a request that accepts less than stored, and a late output window that
loses acceptance while the category's mean holds (checks/distribution.py on scripted figures)."""

from types import SimpleNamespace

from specgate.checks.distribution import judge as judged
from specgate.figures.acceptance import AcceptanceResult, SpecCounters
from specgate.figures.distribution import RequestAcceptance


def result(**per: RequestAcceptance) -> AcceptanceResult:
    return AcceptanceResult(SpecCounters(10, 30, 20), (0, 1, 1, 1, 7), "engine", 0, dict(per), 16)


def steady(length: float, late: float | None = None) -> RequestAcceptance:
    # 12 steps in each of three windows at `length` tokens a step (the last at `late`); 36 steps of 4 in its histogram
    late = length if late is None else late
    cells = ((round(12 * length), 12), (round(12 * length), 12), (round(12 * late), 12))
    return RequestAcceptance(length, cells, histogram=(0, 0, 0, 36))


STORED = {"window_tokens": 16, "windows": [3.0, 3.0, 3.0], "requests": {"p1": [3.0, 3.0, 3.0, 3.0], "p2": [3.0] * 4}}


def text(pid, start, end):
    return f"<{pid} {start}:{end}>"


def judge(where, res, stored, request_rtol, window_rtol, text, share=0.0):
    tol = SimpleNamespace(request_acceptance_rtol=request_rtol, collapsed_share=share, position_rtol=window_rtol)
    return judged(where, res, stored, tol, text)


def test_requests_and_windows_as_stored_pass_and_show_the_median_and_low_quantile():
    rows, failures = judge("method 'm', category 'c'", result(p1=steady(3.0), p2=steady(3.0)), STORED, 0.01, 0.1, text)
    assert failures == []
    shown = {r.metric: r.value for r in rows}
    assert shown["request_acceptance_median"] == 3.0 and shown["request_acceptance_p10"] == 3.0
    steps = {(r.metric, r.position): r.value for r in rows if r.metric.startswith("request_steps[")}
    assert steps == {("request_steps[p1]", 4): 36.0, ("request_steps[p2]", 4): 36.0}


def test_one_request_that_accepts_less_fails_naming_the_prompt_the_figures_and_where_it_first_accepted_less():
    dropped = RequestAcceptance(2.5, ((36, 12), (24, 12), (30, 12)))  # window 1 first below its stored 3.0
    _, failures = judge("method 'm', category 'c'", result(p1=steady(3.0), p2=dropped), STORED, 0.01, 0.5, text)
    assert len(failures) == 1
    said = failures[0]
    assert "1 of 2 requests accept less than stored" in said
    assert "prompt p2: acceptance length 2.5 against 3 stored (floor 2.97)" in said
    assert "first accepted less at output tokens 16-31 (2 tokens a step against 3): '<p2 16:32>'" in said
    # within the rule, or with the rule off (0: profiles whose acceptance is not deterministic), it passes
    assert judge("m", result(p1=steady(3.0), p2=steady(2.98)), STORED, 0.01, 0.5, text)[1] == []
    assert judge("m", result(p1=steady(3.0), p2=dropped), STORED, 0.0, 0.5, text)[1] == []


def test_a_late_window_that_loses_acceptance_fails_naming_the_window_while_the_early_ones_hold():
    late = result(p1=steady(3.0, late=2.0), p2=steady(3.0, late=2.0))
    rows, failures = judge("method 'm', category 'c'", late, STORED, 0.0, 0.1, text)
    assert failures == [
        "method 'm', category 'c': output tokens 32-47: 2 tokens a step against 3 stored (floor 2.7, position_rtol "
        "0.1) over its 2 requests"
    ]
    assert [r.failing for r in rows if r.metric == "window_tokens_per_step"] == [False, False, True]
    # stored with other windows (another max_tokens): not compared
    assert judge("m", late, {**STORED, "window_tokens": 32}, 0.0, 0.1, text)[1] == []


def test_a_share_of_collapsed_requests_is_allowed_where_the_profile_says_so_and_the_low_quantile_is_held():
    stored = {**STORED, "requests": {f"p{i}": [3.0] * 4 for i in range(10)}}
    one = result(**{f"p{i}": steady(3.0) for i in range(9)}, p9=RequestAcceptance(2.0, ((24, 12), (24, 12), (24, 12))))
    assert judge("m", one, stored, 0.25, 0.5, text, share=0.1)[1] == []  # 1 of 10 collapsed, 0.1 allows one
    rows, failures = judge("m", one, stored, 0.25, 0.5, text)
    assert len(failures) == 1 and "1 of 10 requests accept less than stored" in failures[0]
    below = next(r for r in rows if r.metric == "requests_below_floor")
    assert (below.value, below.bound, below.failing) == (1.0, 0.0, True)
    assert next(r for r in rows if r.metric == "request_acceptance_length[p9]").failing
    two = result(**{f"p{i}": steady(3.0) for i in range(8)}, **{f"p{i}": steady(2.0) for i in (8, 9)})
    rows, failures = judge("m", two, stored, 0.25, 0.1, text, share=0.1)
    assert "2 of 10 requests accept less than stored" in failures[0] and "collapsed_share 0.1 allows 1" in failures[0]
    # the 10 % quantile of the lengths (2.0, with two of ten at 2.0) against the stored one (3.0) x (1 - 0.1)
    assert any("the 10 % quantile of its 10 requests' acceptance lengths is 2 against 3 stored" in f for f in failures)


def test_figures_from_another_source_are_shown_not_judged():
    # streamed steps count a step without drafts as a step, vLLM's counts do not: they do not compare
    streamed = RequestAcceptance(2.0, ((24, 12), (24, 12), (24, 12)), "stream", "stream")
    rows, failures = judge("m", result(p1=steady(3.0), p2=streamed), STORED, 0.01, 0.1, text)
    assert [f for f in failures if "p2" in f] == []
    shown = {r.metric: r.value for r in rows}
    assert shown["request_lengths_from_engine"] == 0.5 and shown["request_windows_from_engine"] == 0.5
    # the same sources as stored: judged
    same = {**STORED, "request_lengths_from_engine": 0.5, "request_windows_from_engine": 0.5}
    assert any("prompt p2" in f for f in judge("m", result(p1=steady(3.0), p2=streamed), same, 0.01, 0.1, text)[1])
