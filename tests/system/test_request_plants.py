"""The requests scenario fails on each class of 2026's spec-decode request bugs, on real engines: one
`pytest -m gpu` run of cpu-tiny's ngram next to copies of it, each with one such bug written into vLLM
(specgate/engines/plants.py: its front end or its worker). The copies' plain gates (equivalence, acceptance,
memory, lifecycle) give ngram's figures and pass; their requests scenario fails in the class the bug is
in, naming it, while ngram's own passes. The last copy biases sampled verification (the drafts held to
the target at 1.5 times the temperature): the two-sample test at T > 0 must reject it even with
vllm#55005's repair.
"""

import json
from pathlib import Path

import pytest

from tests.system.nested import NestedRun, ngram_with_plants, skip_without_vllm_cpu

pytestmark = [pytest.mark.system, pytest.mark.needs_vllm, pytest.mark.slow, skip_without_vllm_cpu()]

PLANTED = {  # method -> (plant, the requests class that must fail, what its failure says)
    "ngram_stop": ("stop_trims_text_not_ids", "stop", "yet the output goes on"),
    # the streamed chunks run past the stop (what a server counts as usage); the final-only twin is trimmed
    "ngram_stream": ("stream_counts_whole_run", "stop", "yet the output goes on"),
    "ngram_penalty": ("penalty_skips_drafts", "penalties", "at token"),
    "ngram_bias": ("logit_bias_bonus_only", "processors", "biased by -100"),
    "ngram_logprobs": ("logprobs_one_late", "logprobs", "does not hold the token emitted there"),
    "ngram_sampled": ("verify_temperature_scaled:0.5", "sampled_repaired", "not the plain engine's distribution"),
}
PLAIN = ("equivalence", "acceptance", "memory", "lifecycle")


def profile_with_plants(path: Path) -> Path:
    """ngram and the planted copies; vllm#55005 names the copies too (they are ngram, on the same sampler)."""
    names = ", ".join(f'"{m}"' for m in ["ngram", *PLANTED])
    known = f'[known_issues."vllm#55005"]\ncheck = "requests"\ncases = ["sampled"]\nmethods = [{names}]\n'
    known += 'releases = ["0.29.0", "0.31.0", "0.32.0"]\n\n'
    return ngram_with_plants(path, {name: plant for name, (plant, _, _) in PLANTED.items()}, known)


def test_the_requests_scenario_fails_on_each_planted_request_bug_that_the_plain_gate_passes(tmp_path):
    profile = profile_with_plants(tmp_path / "cpu-tiny.toml")
    run = NestedRun(
        [
            "--specgate-profile",
            str(profile),
            "-k",
            "not speedup and not endpoint and not preemption and not structured and not prefix_soak",
        ],
        tmp_path / "out",
    ).start()
    code = run.proc.wait(timeout=2400)
    out = (tmp_path / "out.out").read_text()
    assert code == 1, out[-3000:]  # the planted copies' requests fail, nothing else
    results = json.loads((tmp_path / "out" / "run.json").read_text())
    outcome = {(o["method"], o["gate"]): o for o in results["outcomes"]}
    failed = {(m, g) for (m, g), o in outcome.items() if o["outcome"] in ("failed", "error")}
    assert failed == {(name, "requests") for name in PLANTED}, failed
    table = json.loads((tmp_path / "out" / "measurements.json").read_text())

    def rows(method, gate):
        return {
            (r["key"], r["metric"], r["position"]): r["value"]
            for r in table
            if r["method"] == method and r["gate"] == gate
        }

    for name, (plant, klass, says) in PLANTED.items():
        message = outcome[(name, "requests")]["message"]
        line = next((m for m in message.splitlines() if f"'{name}', {klass}: " in m), "")
        assert says in line, (plant, klass, message[:3000])
        print(f"{plant}: requests fails ({klass}): {line[:400]}")
        # the plain gate cannot tell the copy from ngram
        assert rows(name, "acceptance") == rows("ngram", "acceptance"), name
        assert {o["outcome"] for (m, g), o in outcome.items() if m == name and g in PLAIN} <= {"passed", "skipped"}
    assert outcome[("ngram", "requests")]["outcome"] == "passed", outcome[("ngram", "requests")]["message"][:3000]
    assert outcome[("baseline", "requests")]["outcome"] == "passed"
