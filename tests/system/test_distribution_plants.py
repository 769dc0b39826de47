"""Acceptance as a distribution fails on the planted bugs the category means pass, on real engines, in one
`pytest -m gpu` run of cpu-tiny (its name: judged against cpu-tiny's stored figures) with the GPU profiles' band
for the category means (acceptance_rtol 0.05, position_rtol 0.10):
- draft_model keeps one token less at every verified step of the third prompt of each category
  (`accept_less_for_prompt:3`): each category's mean falls 1.5-4.1 %, its windows less than 10 %; the per-request
  rule (cpu-tiny's request_acceptance_rtol 0.01) fails in every category, naming prompt <category>-03 (17-38 %
  below its stored figure). (A per-position rate falls past position_rtol in 4 of the 5 categories, without a
  name: one request's lost ends weigh on the deep draft positions, which few steps reach.)
- eagle keeps one token less at every third step (of a request's that accepted a draft) past output position 32
  (`accept_less_after_position:32`), with the per-request rule off (as on a GPU profile): each category's mean
  falls 2.1-4.7 %, its first two windows not at all, its last (output tokens 32-47) 6.3-14.0 %: past position_rtol
  in doc_prose and repetitive_lists (-10.6 %, -14.0 %), which fail naming it. (The per-position rates fall too,
  -13 to -16 % at draft position 3, and fail in every category: they see that the drafts' ends are lost, not
  where in the output.)
Both reproduce the baseline's greedy output (equivalence passes). Only the greedy pass runs (equivalence and
acceptance): three engines.
"""

import pytest

from tests.system.nested import CPU_TINY, NestedRun, outcomes, skip_without_vllm_cpu

pytestmark = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=150),
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("distribution_plants"),
]

PLANTS = {  # method -> plant
    "draft_model": "accept_less_for_prompt:3",
    "eagle": "accept_less_after_position:32",
}
SELECT = "method_reproduces_baseline or baseline_engine_produces or acceptance_holds_per_category"


def planted_profile(path):
    """cpu-tiny with the GPU profiles' band on the category means, the plants in draft_model and eagle, eagle's
    per-request rule off."""
    text = CPU_TINY.read_text()
    band = "acceptance_rtol = 0.01\nposition_rtol = 0.10\n"
    assert band in text, "cpu-tiny.toml's [tolerance] lines changed: update planted_profile"
    text = text.replace(band, "acceptance_rtol = 0.05\nposition_rtol = 0.10\n", 1)
    for name, plant in PLANTS.items():
        head = f"[methods.{name}]\n"
        text = text.replace(head, f'{head}plant = "{plant}"\n', 1)
    eagle = "tolerance = { draft_cost_tol = 0.075 }"
    assert eagle in text, "cpu-tiny.toml's eagle tolerance changed: update planted_profile"
    text = text.replace(eagle, "tolerance = { draft_cost_tol = 0.075, request_acceptance_rtol = 0.0 }", 1)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distribution")
    profile = planted_profile(tmp / "cpu-tiny.toml")
    args = ["--specgate-profile", str(profile), "--specgate-methods", ",".join(PLANTS), "-k", SELECT]
    run = NestedRun(args, tmp / "out")
    code = run.start().proc.wait(timeout=1800)
    outcome = outcomes(tmp / "out")
    return code, outcome, (tmp / "out.out").read_text()


def of(outcome, method, gate):
    return {k: o for (m, g, k), o in outcome.items() if (m, g) == (method, gate)}


def test_the_outputs_hold_and_no_category_mean_leaves_its_band(planted):
    code, outcome, out = planted
    assert code == 1, out[-3000:]
    for method in PLANTS:
        assert {o["outcome"] for o in of(outcome, method, "equivalence").values()} == {"passed"}, method
        for key, o in of(outcome, method, "acceptance").items():
            assert "mean acceptance length: measured" not in o["message"], (method, key, o["message"][:1000])


def test_one_request_per_category_that_accepts_less_fails_naming_it(planted):
    _, outcome, _ = planted
    acceptance = of(outcome, "draft_model", "acceptance")
    assert acceptance and all(o["outcome"] == "failed" for o in acceptance.values()), acceptance
    for category, o in acceptance.items():
        said = o["message"]
        assert "1 of 12 requests accept less than stored" in said and f"prompt {category}-03:" in said, said[:1000]
        assert "first accepted less at output tokens" in said and "output tokens 32-47:" not in said, said[:1000]
    print(f"accept_less_for_prompt:3: {next(iter(acceptance.values()))['message'][:400]}")


def test_acceptance_that_decays_late_fails_naming_the_window(planted):
    _, outcome, _ = planted
    acceptance = of(outcome, "eagle", "acceptance")
    named = {k for k, o in acceptance.items() if "output tokens 32-47:" in o["message"]}
    assert len(named) >= 2, {k: o["message"][:300] for k, o in acceptance.items()}
    for key, o in acceptance.items():  # the early windows hold; the per-request rule is off here
        early = ("output tokens 0-15:", "output tokens 16-31:", "requests accept less")
        assert not any(e in o["message"] for e in early), (key, o["message"][:1000])
    said = acceptance[min(named)]["message"]
    print(f"accept_less_after_position:32: {len(named)} of {len(acceptance)} categories fail at 32-47: {said[:300]}")
