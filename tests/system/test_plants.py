"""The gate fails on each planted bug that its plain gates pass, on real engines, in one `pytest -m gpu`
run of cpu-tiny (the run is shared: one baseline engine, one ngram, each copy booted once; its tests read
its results):
- the requests scenario on each class of 2026's spec-decode request bugs: copies of ngram (`rq_*`), each
  with one such bug written into vLLM (specgate/engines/plants.py: its front end or its worker). Their
  plain gates (equivalence, acceptance, memory, lifecycle) give ngram's figures and pass; their requests
  scenario fails in the class the bug is in, naming it, while ngram's own passes. The last copy biases
  sampled verification (the drafts held to the target at 1.5 times the temperature): the two-sample test
  at T > 0 must reject it even with vllm#55005's repair;
- each other scenario on a regression only it can see: copies of ngram (`sc_*`) with a bug in their
  worker; of the scenarios only the one each bug is for fails, naming it (the preemption scenario, which
  boots an engine of its own, runs for its plant's copy only; the gate stage runs it for every method);
- acceptance on a drop smaller than vLLM's own +-5 % band: EAGLE-3 keeping one token less in every 10th
  verified request-step (greedy output unchanged) is the size of vllm-project/vllm#26191 (acceptance
  length 3.53 -> 3.40, -3.7 %), judged against cpu-tiny's stored eagle3 figures with acceptance_rtol.
Left out for time: the speedup gate (no plant slows a step), the load gate and the edges scenario (their plants:
test_traffic_plants.py) and the endpoint tests.
"""

import json

import pytest

from specgate.profile import load_profile
from tests.system.nested import ROOT, NestedRun, ngram_with_plants, outcomes, skip_without_vllm_cpu

pytestmark = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=720),  # the shared run (tests/system/conftest.py: longest first)
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("plants"),  # one worker runs the run they share
]

REQUESTS = {  # method -> (plant, the requests class that must fail, what its failure says)
    "rq_stop": ("stop_trims_text_not_ids", "stop", "yet the output goes on"),
    # the streamed chunks run past the stop (what a server counts as usage); the final-only twin is trimmed
    "rq_stream": ("stream_counts_whole_run", "stop", "yet the output goes on"),
    "rq_penalty": ("penalty_skips_drafts", "penalties", "at token"),
    "rq_bias": ("logit_bias_bonus_only", "processors", "biased by -100"),
    "rq_logprobs": ("logprobs_one_late", "logprobs", "does not hold the token emitted there"),
    "rq_sampled": ("verify_temperature_scaled:0.5", "sampled_repaired", "not the plain engine's distribution"),
}
SCENARIOS = {  # method -> (plant, the scenario that must fail, what its failure says)
    "sc_resumed": (
        "resume_corrupts_last_token",
        "preemption",
        "prompts diverge from the baseline engine's unpressured",
    ),
    "sc_cached": ("ngram_late_after_cached_prefix", "prefix_soak", "mean acceptance length fell from"),
    "sc_grammar": ("grammar_mask_ignores_drafts", "structured", "under the schema"),
}
ACCEPTANCE = {"eagle3": "accept_one_less_every_10th"}
PLAIN = ("equivalence", "acceptance", "memory", "lifecycle")
# Each copy runs the plain gates and the scenario its plant is for: the requests scenario for ngram, the
# baseline and the rq_ copies; structured and prefix_soak for ngram, the baseline and the sc_ copies;
# preemption for its plant's copy; eagle3 the plain gates. (-k matches names and ids as substrings: hence the
# prefixes, the structured scenario by its test's name, not the acceptance category structured_output, and the
# load gate by its test's name's end: test_preemption_keeps_outputs_and_acceptance contains its beginning.)
SELECT = (
    "not speedup and not at_each_concurrency and not edges and not endpoint and not (requests and (sc_ or eagle3)) "
    "and not ((structured_output_matches or prefix_soak) and (rq_ or eagle3)) and (not preemption or sc_resumed)"
)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """The shared run: (its run.json outcomes by (method, gate, key), its measurements table, its output)."""
    tmp = tmp_path_factory.mktemp("plants")
    # vllm#55005 names ngram and the requests copies (they are ngram, on the same sampler)
    names = ", ".join(f'"{m}"' for m in ["ngram", *REQUESTS])
    known = f'[known_issues."vllm#55005"]\ncheck = "requests"\ncases = ["sampled"]\nmethods = [{names}]\n'
    known += 'releases = ["0.29.0", "0.31.0", "0.32.0"]\n\n'
    plants = {name: plant for name, (plant, _, _) in {**REQUESTS, **SCENARIOS}.items()}
    profile = ngram_with_plants(tmp / "cpu-tiny.toml", plants, known, planted=ACCEPTANCE)
    run = NestedRun(["--specgate-profile", str(profile), "-k", SELECT], tmp / "out").start()
    code = run.proc.wait(timeout=4800)
    out = (tmp / "out.out").read_text()
    outcome = outcomes(tmp / "out")
    table = json.loads((tmp / "out" / "measurements.json").read_text())
    return code, outcome, table, out, profile


def figures(table, method, gate):
    return {
        (r["key"], r["metric"], r["position"]): r["value"] for r in table if r["method"] == method and r["gate"] == gate
    }


def of(outcome, method, gate):
    """The outcomes of one method's gate (a gate test per key)."""
    return [o for (m, g, _), o in outcome.items() if (m, g) == (method, gate)]


def failed(outcome, methods):
    return {(m, g) for (m, g, _), o in outcome.items() if m in methods and o["outcome"] in ("failed", "error")}


def test_the_run_fails_only_where_a_bug_was_planted(planted):
    code, outcome, table, out, _ = planted
    assert code == 1, out[-3000:]  # the planted copies fail, nothing else
    expected = {(n, "requests") for n in REQUESTS} | {(n, s) for n, (_, s, _) in SCENARIOS.items()}
    everyone = {m for m, _, _ in outcome}
    assert failed(outcome, everyone - set(ACCEPTANCE)) == expected, failed(outcome, everyone)
    assert {g for m, g in failed(outcome, set(ACCEPTANCE))} == {"acceptance"}
    for (m, g, _), o in outcome.items():
        if m in ("ngram", "baseline"):  # (a figure this machine has no stored baseline for skips)
            assert o["outcome"] in ("passed", "skipped"), (m, g, o["message"][:500])
    assert {g for (m, g, _), o in outcome.items() if m == "ngram" and o["outcome"] == "passed"} >= {
        "equivalence",
        "structured",
        "prefix_soak",
        "requests",
    }
    assert {o["outcome"] for o in of(outcome, "baseline", "requests")} == {"passed"}
    # the plain gate cannot tell the planted copies from ngram: the same greedy tokens, the same acceptance
    assert figures(table, "ngram", "acceptance"), "ngram measured no acceptance"
    for name in [*REQUESTS, *SCENARIOS]:
        assert figures(table, name, "acceptance") == figures(table, "ngram", "acceptance"), name
        assert figures(table, name, "equivalence")[("greedy", "identical", None)] == 60
        assert {o["outcome"] for (m, g, _), o in outcome.items() if m == name and g in PLAIN} <= {"passed", "skipped"}


def test_the_requests_scenario_fails_on_each_planted_request_bug_that_the_plain_gate_passes(planted):
    _, outcome, _, _, _ = planted
    for name, (plant, klass, says) in REQUESTS.items():
        message = of(outcome, name, "requests")[0]["message"]
        line = next((m for m in message.splitlines() if f"'{name}', {klass}: " in m), "")
        assert says in line, (plant, klass, message[:3000])
        print(f"{plant}: requests fails ({klass}): {line[:400]}")


def test_each_scenario_fails_on_its_plant_that_the_plain_gate_passes(planted):
    _, outcome, _, _, _ = planted
    for name, (plant, scenario, says) in SCENARIOS.items():
        message = of(outcome, name, scenario)[0]["message"]
        assert says in message, (plant, message)
        print(f"{plant}: {scenario} fails: {message.splitlines()[0][:300]}")


def test_a_drop_the_size_of_vllm_26191_fails_the_acceptance_gate(planted):
    _, outcome, table, _, profile = planted
    mine = {(g, k): o for (m, g, k), o in outcome.items() if m == "eagle3"}
    assert mine[("equivalence", "greedy")]["outcome"] == "passed"  # the same tokens, fewer per step
    drops = {
        r["key"]: r["value"] / r["baseline"] - 1
        for r in table
        if r["method"] == "eagle3" and r["metric"] == "mean_acceptance_length" and r["baseline"]
    }
    print(
        "eagle3 mean acceptance length against the stored figures: "
        + ", ".join(f"{k} {d:+.1%}" for k, d in drops.items())
    )
    assert drops and all(d < 0 for d in drops.values())
    rtol = load_profile(profile, ROOT).tolerance.acceptance_rtol
    lost = [k for (g, k), o in mine.items() if g == "acceptance" and o["outcome"] == "failed"]
    assert lost and set(lost) >= {k for k, d in drops.items() if d < -rtol}  # every drop past acceptance_rtol fails
    # which steps lose a token depends on how requests were batched, so a category's drop varies between
    # runs (-1.9 % to -5.2 % measured): the claim is that drops inside vLLM's own +-5 % band fail
    inside_band = {k for k, d in drops.items() if d > -0.05}
    assert inside_band & set(lost), f"no drop inside vLLM's +-5 % band failed: {drops}, failed {lost}"
    assert sum(drops.values()) / len(drops) > -0.05  # the plant as a whole is the size of #26191
