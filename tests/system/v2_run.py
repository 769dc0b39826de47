"""The one nested `pytest -m gpu` run of fixtures/profiles/cpu-tiny-v2.toml that test_v2_engines.py and
test_v2_plants.py both read (the session fixture `v2_run`, tests/system/conftest.py): every engine on Model Runner
V2, its kernels in Triton's interpreter, judged against baselines/cpu-tiny-v2/. CI's slow stage pays for each
engine (docs/ci-budget.md), so the run is cpu-tiny-v2's unplanted methods and two plants in six engines:

- draft_model, planted in place with accept_less_for_prompt:5 (it keeps a token less at every step of each
  category's fifth prompt: the profile draws 3 of 12 per category, seeded, -05 among them in 4 of 5 categories):
  V2's seam is the rejection sampler's SamplerOutput (a token moved from num_sampled to
  num_rejected by request id), seen by acceptance, which names the request; its outputs are judged as unplanted;
- v2_emits, a copy of eagle planted with verify_emits_draft (the rejected draft emitted in a row's last emitted
  place): seen by equivalence; a copy has no stored figures, so only its equivalence, acceptance (a skip) and
  lifecycle run;
- ngram's engine booted once more for the preemption scenario (its KV cache in the engine's own blocks).

The other V2 plants (resume_corrupts_last_token on the preemption scenario, grammar_mask_ignores_drafts on the
structured one, accept_less_after_position) were caught on real V2 engines by hand: docs/plants.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.system.nested import ROOT, NestedRun, outcomes, skip_without_vllm_cpu

PROFILE = ROOT / "fixtures" / "profiles" / "cpu-tiny-v2.toml"
# The marks of every test module that reads this run: one xdist group, so one worker runs it once; one wall figure.
MARKS = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=450),
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("v2"),
]
RUNS = ("ngram", "draft_model", "eagle")  # the profile's methods vllm-cpu 0.32's V2 runs
REFUSED = ("suffix", "medusa")  # refused by vllm-cpu 0.32's V2 at config: no engine
PREEMPTED = "ngram"  # the one method whose preemption scenario runs (an engine booted once more)
IN_PLACE = {"draft_model": ("accept_less_for_prompt:5", "acceptance")}  # method -> (plant, the check it fails)
COPIES = {"v2_emits": ("verify_emits_draft", "equivalence")}  # copies of eagle
EAGLE = 'speculative_config = { method = "eagle", model = "zoo:eagle", num_speculative_tokens = 3 }\n'
# The planted methods run the checks their plant is for and the plain ones (equivalence, acceptance, memory,
# lifecycle): no load, speed or edges (each costs interpreted steps); unplanted, draft_model passed them all on V2
# (docs/v2-engines.md). The endpoint test boots one more engine (a server) for what the gate's engines show.
PLAIN = ("method_reproduces_baseline", "acceptance_holds_per_category", "memory_overhead", "engine_booted_once")
SELECT = " and ".join(
    [
        "not endpoint",
        f"(not preemption or {PREEMPTED})",
        *(f"(not {name} or {' or '.join(PLAIN)})" for name in [*IN_PLACE, *COPIES]),
    ]
)


@dataclass(frozen=True)
class Run:
    code: int
    outcome: dict  # (method, gate, key) -> the outcome's record
    record: dict  # run.json
    out: str  # the nested pytest's output
    summary: str  # summary.md

    def prompt_ids(self) -> list[str]:
        """The prompts the greedy pass sent (the profile's seeded draw)."""
        return [i for e in self.record["prompts"]["equivalence_acceptance"]["entries"] for i in e["prompt_ids"]]

    def of(self, method: str, gate: str) -> dict:
        return {k: o for (m, g, k), o in self.outcome.items() if (m, g) == (method, gate)}


def planted_profile(path: Path) -> Path:
    """cpu-tiny-v2 (its name: judged against its stored figures) with IN_PLACE's plants and COPIES."""
    text = PROFILE.read_text()
    for name, (plant, _) in IN_PLACE.items():
        assert f"[methods.{name}]\n" in text, f"cpu-tiny-v2.toml has no [methods.{name}]: update tests/system/v2_run"
        text = text.replace(f"[methods.{name}]\n", f'[methods.{name}]\nplant = "{plant}"\n', 1)
    copies = "".join(f'[methods.{name}]\n{EAGLE}plant = "{plant}"\n\n' for name, (plant, _) in COPIES.items())
    at = text.index("[scenarios.")
    path.write_text(text[:at] + copies + text[at:])
    return path


def run(tmp: Path) -> Run:
    args = ["--specgate-profile", str(planted_profile(tmp / "cpu-tiny-v2.toml")), "-k", SELECT]
    nested = NestedRun(args, tmp / "out").start()
    try:
        code = nested.wait(timeout_s=3600)
    finally:
        nested.kill_all()  # whatever happened, nothing of the run left behind
    out = tmp / "out"
    return Run(
        code,
        outcomes(out),
        json.loads((out / "run.json").read_text()),
        (tmp / "out.out").read_text(),
        (out / "summary.md").read_text(),
    )
