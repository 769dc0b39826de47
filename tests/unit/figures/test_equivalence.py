"""Greedy equivalence: a real divergence is caught, a stated near-tie is tolerated, nothing else is."""

from specgate.figures.equivalence import GreedyOutput, compare, first_divergence
from specgate.profile import Equivalence

EXACT = Equivalence(mode="exact", top_logprobs=5)
TIE_AWARE = Equivalence(mode="tie-aware", top_logprobs=5, logprob_margin=0.05)
# Baseline chose 7 at position 2; 9 was a near-tie (0.01 nats behind), 4 was far behind (2 nats).
BASELINE = GreedyOutput(
    token_ids=(5, 6, 7, 8),
    top_logprobs=({5: -0.1}, {6: -0.2}, {7: -0.70, 9: -0.71, 4: -2.70}, {8: -0.3}),
)


def test_identical_output_has_no_divergence():
    assert compare(BASELINE, [5, 6, 7, 8], EXACT) is None
    assert first_divergence([1, 2], [1, 2]) is None


def test_first_divergence_is_the_first_differing_position_or_the_shorter_length():
    assert first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert first_divergence([1, 2, 3], [1, 2]) == 2


def test_real_divergence_fails_even_when_tie_aware():
    div = compare(BASELINE, [5, 6, 4, 8], TIE_AWARE)
    assert div is not None and not div.numerical
    assert (div.position, div.baseline_token, div.method_token) == (2, 7, 4)
    assert abs(div.gap - 2.0) < 1e-9


def test_stated_near_tie_is_tolerated_when_tie_aware():
    div = compare(BASELINE, [5, 6, 9, 1, 1], TIE_AWARE)
    assert div is not None and div.numerical and abs(div.gap - 0.01) < 1e-9


def test_exact_mode_fails_even_a_near_tie():
    div = compare(BASELINE, [5, 6, 9, 8], EXACT)
    assert div is not None and not div.numerical


def test_token_outside_the_baseline_top_k_is_never_numerical():
    div = compare(BASELINE, [5, 6, 3, 8], Equivalence(mode="tie-aware", logprob_margin=100.0))
    assert div is not None and div.gap is None and not div.numerical


def test_length_mismatch_is_a_failure():
    div = compare(BASELINE, [5, 6, 7], TIE_AWARE)
    assert div is not None and div.method_token is None and not div.numerical


def test_failure_message_names_position_both_tokens_and_gap():
    div = compare(BASELINE, [5, 6, 4, 8], TIE_AWARE)
    text = div.describe(lambda t: f"<tok{t}>", TIE_AWARE.logprob_margin, TIE_AWARE.mode)
    assert "token 2" in text and "'<tok7>' (id 7)" in text and "'<tok4>' (id 4)" in text and "gap 2 nats" in text


def _prompts(n):
    from types import SimpleNamespace

    return [SimpleNamespace(id=f"p{i}", category="c") for i in range(n)]


def test_many_forgiven_near_ties_fail_though_each_looks_small():
    from dataclasses import replace

    from specgate.figures.equivalence import compare_all

    rule = replace(TIE_AWARE, max_forgiven_share=0.1)
    prompts = _prompts(10)
    reference = {p.id: BASELINE for p in prompts}
    one_tie = {p.id: (5, 6, 9, 8) if p.id == "p0" else (5, 6, 7, 8) for p in prompts}
    honest = compare_all(reference, one_tie, prompts, rule, str, lambda p: p.id)
    assert (honest.identical, len(honest.forgiven), honest.diverged) == (9, 1, 0) and honest.too_forgiving(rule) is None
    every = compare_all(reference, {p.id: (5, 6, 9, 8) for p in prompts}, prompts, rule, str, lambda p: p.id)
    assert every.diverged == 0 and len(every.forgiven) == 10  # each one alone is a forgivable near-tie
    assert "10 of 10 prompts diverge at near-ties" in every.too_forgiving(rule)
    assert every.too_forgiving(EXACT) is None  # exact mode forgives nothing to begin with
    assert (
        honest.too_forgiving(rule, of=5) is not None and every.too_forgiving(rule, of=100) is None
    )  # the share of `of`
