"""cpu-tiny-bf16 on a real engine: the zoo in bfloat16 judged by the GPU profiles' tie-aware rule, with
the margin and forgiven-share its A/A runs gave (docs/bf16.md). Honest bf16 near-ties pass; a
verifier that emits the draft at the first rejection (specgate/engines/plants.py) fails, however many of its
divergences look like near-ties. On a CPU without native bf16 the run says so in one line.
"""

import json

import pytest

from specgate.machine import missing_cpu_flags
from tests.system.nested import ROOT, NestedRun, skip_without_vllm_cpu

pytestmark = [pytest.mark.needs_vllm, pytest.mark.slow, skip_without_vllm_cpu()]

BF16 = ROOT / "fixtures" / "profiles" / "cpu-tiny-bf16.toml"
EQUIVALENCE = ["-k", "test_method_reproduces or test_baseline_engine_produces"]
NGRAM = (
    'speculative_config = { method = "ngram", num_speculative_tokens = 3, prompt_lookup_min = 2, '
    "prompt_lookup_max = 4 }"
)


def with_planted_verifier(path):
    """cpu-tiny-bf16 (its name, its rule) with ngram, mtp and a copy of ngram whose verifier is broken."""
    text = BF16.read_text()
    head, tail = text[: text.index("[methods.ngram]")], text[text.index("[methods.suffix]") :]
    path.write_text(
        head + f'[methods.ngram]\n{NGRAM}\n\n[methods.ngram_verify]\n{NGRAM}\nplant = "verify_emits_draft"\n\n' + tail
    )
    return path


@pytest.mark.skipif(
    missing_cpu_flags(("avx512_bf16", "amx_bf16")) is None,
    reason="this CPU has native bf16: the profile runs (the test below)",
)
def test_without_native_bf16_the_run_says_which_flag_is_missing(tmp_path):
    run = NestedRun(
        ["--specgate-profile", str(BF16), "--specgate-methods", "ngram", *EQUIVALENCE], tmp_path / "out"
    ).start()
    assert run.proc.wait(timeout=600) == 0
    out = (tmp_path / "out.out").read_text()
    assert "needs a CPU with avx512_bf16 or amx_bf16" in out, out[-3000:]  # the summary's line, under -q
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "has none of the flags avx512_bf16, amx_bf16" in summary  # the whole reason (the line is cut at 240)


@pytest.mark.slow(wall_s=170)
@pytest.mark.skipif(
    missing_cpu_flags(("avx512_bf16", "amx_bf16")) is not None,
    reason=f"needs native bf16: {missing_cpu_flags(('avx512_bf16', 'amx_bf16'))}",
)
def test_honest_near_ties_pass_and_a_verifier_that_emits_drafts_fails(tmp_path):
    profile = with_planted_verifier(tmp_path / "cpu-tiny-bf16.toml")
    run = NestedRun(
        ["--specgate-profile", str(profile), "--specgate-methods", "ngram,mtp,ngram_verify", *EQUIVALENCE],
        tmp_path / "out",
    ).start()
    run.proc.wait(timeout=1200)
    results = json.loads((tmp_path / "out" / "run.json").read_text())
    outcome = {o["method"]: o for o in results["outcomes"] if o["gate"] == "equivalence"}
    table = json.loads((tmp_path / "out" / "measurements.json").read_text())
    counts = {
        (r["method"], r["metric"]): r["value"] for r in table if r["gate"] == "equivalence" and r["position"] is None
    }
    for method in ("ngram", "mtp", "ngram_verify"):
        print(
            f"{method}: {outcome[method]['outcome']}; identical {counts[(method, 'identical')]:.0f}, forgiven "
            f"{counts.get((method, 'forgiven'), 0):.0f}, diverged {counts[(method, 'diverged')]:.0f} of 60"
        )
    assert outcome["ngram"]["outcome"] == "passed" and outcome["mtp"]["outcome"] == "passed", outcome
    assert counts[("mtp", "forgiven")] >= 1  # bf16's near-ties are there, and forgiven
    assert outcome["ngram_verify"]["outcome"] == "failed"
    assert counts[("ngram_verify", "diverged")] + counts[("ngram_verify", "forgiven")] > 6
