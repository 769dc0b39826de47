"""Acceptance as a distribution, judged: a request that accepts less than stored, and a late output window that
loses acceptance while the category's mean holds (checks/distribution.py on scripted figures)."""

from specgate.checks.distribution import judge
from specgate.figures.acceptance import AcceptanceResult, SpecCounters
from specgate.figures.distribution import RequestAcceptance


def result(**per: RequestAcceptance) -> AcceptanceResult:
    return AcceptanceResult(SpecCounters(10, 30, 20), (0, 1, 1, 1, 7), "engine", 0, dict(per), 16)


def steady(length: float, late: float | None = None) -> RequestAcceptance:
    # 12 steps in each of three windows at `length` tokens a step (the last at `late`)
    late = length if late is None else late
    return RequestAcceptance(length, ((round(12 * length), 12), (round(12 * length), 12), (round(12 * late), 12)))


STORED = {"window_tokens": 16, "windows": [3.0, 3.0, 3.0], "requests": {"p1": [3.0, 3.0, 3.0, 3.0], "p2": [3.0] * 4}}


def text(pid, start, end):
    return f"<{pid} {start}:{end}>"


def test_requests_and_windows_as_stored_pass_and_show_the_median_and_low_quantile():
    rows, failures = judge("method 'm', category 'c'", result(p1=steady(3.0), p2=steady(3.0)), STORED, 0.01, 0.1, text)
    assert failures == []
    shown = {r.metric: r.value for r in rows}
    assert shown["request_acceptance_median"] == 3.0 and shown["request_acceptance_p10"] == 3.0


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
