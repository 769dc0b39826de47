"""The traffic-shape checks fail on each planted bug the rest of the gate passes, on real engines, in one
`pytest -m gpu` run of cpu-tiny (its name: judged against cpu-tiny's stored figures; concurrency 1 and 16, two
trials each):
- the load gate (specgate/checks/load.py), on bugs only large batches meet (batches of 13 or more requests:
  the greedy pass sends 12 at a time, the closed loop at C = 16 keeps 16 in flight): ngram keeping one token
  less in every other verified step there (acceptance at C = 16 fails, its outputs hold), medusa emitting a
  wrong token at the first rejection there (C = 16 fails naming the level, the prompt and the position: an
  output, not a stall), and eagle3 doing the same and then wedging its engine core in its first trial at C = 16
  (issue 74: C = 16 fails on the wrong tokens its warm-up and that trial streamed, then says the stall; C = 1,
  which ended before it, is judged as usual; the engine's processes are stopped, none is left);
- the edges scenario (specgate/checks/edges.py): eagle giving the wrong token within a draft window of
  max_model_len (the context_edge class), draft_model keeping one token a step after a split prefill (the split
  class accepts fewer drafts than its prompts sent one at a time, prefilled whole), and medusa, whose real
  counters count accepted drafts past an EOS, a stop token or the cap that ended the output
  (vllm-project/vllm#56101), with the profile's known-issue entry taken from it (counted_past_end; medusa's
  own plant fires only in batches of 13 or more, the edges' batches hold 6 at most: one engine fewer to boot).
Each passes equivalence, acceptance, memory and lifecycle (eagle3 the first two: its engine is gone by the memory
test), and the load plants' level C = 1 passes. The other
scenarios (each has its plants in test_plants.py) and the endpoint tests are left out.
"""

import re
from types import SimpleNamespace

import pytest

from tests.system.nested import CPU_TINY, NestedRun, outcomes, skip_without_vllm_cpu

pytestmark = [
    pytest.mark.system,
    pytest.mark.needs_vllm,
    pytest.mark.slow(wall_s=260),  # 244 s here (2-core AMD EPYC, 2026-12-07)
    skip_without_vllm_cpu(),
    pytest.mark.xdist_group("traffic_plants"),
]

LOAD = {  # method -> (plant, what its C = 16 failure says)
    "ngram": ("accept_less_in_large_batches:13", "C=16: mean acceptance length: measured"),
    "medusa": (
        "wrong_token_in_large_batches:13",
        "diverge from the baseline engine's output for the same prompt",
    ),
    # wedges at the 52nd request in batches of 13+: the warm-up's 32 and the first C = 16 trial's first wave pass
    "eagle3": ("wrong_then_wedge_in_large_batches:13", "diverge from the baseline engine's output for the same prompt"),
}
# Its engine stops at C = 16 (cpu-tiny's stall_timeout_s, 120 s, later): its tests after that need no engine (load)
# or say "not judged". (60 s was tried: a boot's silent import of vLLM passed it on a busy machine.)
WEDGED = "eagle3"
EDGES = {  # method -> (plant or None, the failing case, what its failure says)
    # (its wrong tokens are not in the logprobs vLLM returns for them: inconsistent before they differ)
    "eagle": ("corrupt_near_max_model_len", "context_edge", "context_edge: case context_edge@"),
    "draft_model": ("accept_less_after_split_prefill", "split_acceptance", "accepted after split prefills"),
}
UNLISTED = ("medusa", "counted_past_end", "past the end of its output")  # out of vllm#56101's entry
PLAIN = ("equivalence", "acceptance", "memory", "lifecycle")
SELECT = (  # (eagle's ids are [eagle-C=1] and [eagle]: "eagle" alone would take eagle3's out too)
    "not (structured_output_matches or prefix_soak or requests or preemption or endpoint) "
    "and not ((speedup or at_each_concurrency) and ([eagle- or [eagle] or draft_model))"
)


def planted_profile(path):
    """cpu-tiny with the plants in its own methods, concurrency 1 and 16 with two trials each, medusa out of
    vllm#56101's entry."""
    text = CPU_TINY.read_text()
    assert "concurrency = [1, 4, 16]" in text, "cpu-tiny.toml's concurrency line changed: update planted_profile"
    text = text.replace("concurrency = [1, 4, 16]", "concurrency = [1, 16]", 1)
    assert "\ntrials = 4\n" in text, "cpu-tiny.toml's [speedup] trials line changed: update planted_profile"
    text = text.replace("\ntrials = 4\n", "\ntrials = 2\n", 1)  # the load gate reads the trials' counters: two do
    for name, plant in [(m, p) for m, (p, _) in LOAD.items()] + [(m, p) for m, (p, _, _) in EDGES.items()]:
        head = f"[methods.{name}]\n"
        text = text.replace(head, f'{head}plant = "{plant}"\n', 1)
    entry = text.index('[known_issues."vllm#56101"]')
    line = re.search(r"methods = \[[^\]]*\]", text[entry:])
    unlisted = UNLISTED[0]
    listed = line.group(0).replace(f'"{unlisted}", ', "").replace(f', "{unlisted}"', "")
    assert listed != line.group(0), f"{unlisted} is not in cpu-tiny.toml's vllm#56101 entry: update UNLISTED"
    text = text[:entry] + text[entry:].replace(line.group(0), listed, 1)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("traffic")
    profile = planted_profile(tmp / "cpu-tiny.toml")
    methods = ",".join([*LOAD, *EDGES])
    run = NestedRun(["--specgate-profile", str(profile), "--specgate-methods", methods, "-k", SELECT], tmp / "out")
    try:
        code = run.start().wait(timeout_s=3600)  # noting the run's processes as it goes
        left = run.alive_after(10)  # the wedged engine's among them: stopped by the watchdog
    finally:
        run.kill_all()
    out = (tmp / "out.out").read_text()
    return SimpleNamespace(code=code, outcome=outcomes(tmp / "out"), out=out, left=left, results=tmp / "out")


def of(outcome, method, gate):
    return {k: o for (m, g, k), o in outcome.items() if (m, g) == (method, gate)}


def test_the_plain_gates_pass_every_planted_method(planted):
    assert planted.code == 1, planted.out[-3000:]
    for method in [*LOAD, *EDGES]:
        for gate in PLAIN if method != WEDGED else PLAIN[:2]:
            seen = {o["outcome"] for o in of(planted.outcome, method, gate).values()}
            assert seen and seen <= {"passed", "skipped"}, (method, gate, seen)
    assert {o["outcome"] for (m, _, _), o in planted.outcome.items() if m == "baseline"} <= {"passed", "skipped"}


def test_the_load_gate_fails_at_the_large_batch_level_only(planted):
    for method, (plant, says) in LOAD.items():
        load = of(planted.outcome, method, "load")
        assert load["C=1"]["outcome"] == "passed", (plant, load["C=1"]["message"][:500])
        assert load["C=16"]["outcome"] == "failed" and says in load["C=16"]["message"], (plant, load["C=16"])
        print(f"{plant}: load C=16 fails: {load['C=16']['message'].splitlines()[0][:300]}")
        speed = {o["outcome"] for o in of(planted.outcome, method, "speedup").values()}
        print(f"{plant}: speedup outcomes {sorted(speed)}")
    for method in ("medusa", WEDGED):  # an output, not (only) a stall: the prompt, the position and both tokens
        said = of(planted.outcome, method, "load")["C=16"]["message"]
        assert re.search(
            r"prompt \S+ \(\w+\): \d+ of its \d+ requests differ; first \(.*\) at token \d+: baseline .* vs method",
            said,
        ), said[:2000]


def test_a_stall_after_wrong_tokens_reads_as_the_wrong_tokens_then_the_stall(planted):
    """eagle3's engine wedges in its first trial at C = 16: that level fails on the wrong tokens it streamed, then
    says the stall; the gates that need the engine say "not judged", the summary and the results table are whole,
    and none of the engine's processes is left."""
    assert not planted.left, f"processes of the run still alive 10 s after it ended: {planted.left}"
    outcome = {(g, k): o for (m, g, k), o in planted.outcome.items() if m == WEDGED}
    (stalled,) = [k for (g, k), o in outcome.items() if o["outcome"] == "failed" and g == "speedup"]
    assert stalled == "C=16" and "no progress for" in outcome["speedup", "C=16"]["message"]
    said = outcome["load", "C=16"]["message"]
    stop = "then the engine stopped (no progress for"
    assert stop in said and said.index("at token") < said.index(stop), said[:3000]
    print(f"{WEDGED}: load C=16 fails: {said[:1500]}")
    after = {key for key, o in outcome.items() if o["outcome"] == "error"}
    assert after == {("speedup", "summary"), ("memory", "overhead"), ("lifecycle", "lifecycle"), ("edges", "classes")}
    assert all(outcome[key]["message"].startswith("not judged: ") for key in after), [outcome[k] for k in after]
    summary = (planted.results / "summary.md").read_text()
    assert f"| {WEDGED} | C=1 | pass |" in summary and f"**fail** {WEDGED} / C=16: method '{WEDGED}', C=16: " in summary
    engine = rf"{WEDGED} +load C=16: [1-9]\d* prompts diverged, then died: no progress for"  # its line: that order
    assert re.search(engine, summary), summary[-3000:]
    table = (planted.results / "measurements.csv").read_text()
    assert re.search(rf"(?m)^{WEDGED},load,C=16,[^,]*,[^,]*,diverged,[1-9]", table), table[:500]  # its rows, whole


def test_the_edges_scenario_fails_on_each_edge_plant(planted):
    outcome = planted.outcome
    for method, (plant, case, says) in EDGES.items():
        (edge,) = of(outcome, method, "edges").values()
        assert edge["outcome"] == "failed" and says in edge["message"], (plant, case, edge["message"][:2000])
        print(f"{plant}: edges fails ({case}): {edge['message'].splitlines()[0][:300]}")
    unlisted, case, says = UNLISTED
    for method in set(LOAD) - {WEDGED}:  # the large-batch plants: the edges' batches are small (6 requests at most)
        (edge,) = of(outcome, method, "edges").values()
        if method != unlisted:
            assert edge["outcome"] == "passed", (method, edge["message"][:1000])
            continue
        # vLLM's own count past the end, and nothing else: no request differs or is inconsistent, no class and no
        # split batch loses acceptance (those failures begin "method '...'" or say "N differs / inconsistent of")
        lines = edge["message"].splitlines()
        marks = (says, " differs", "inconsistent")
        failing = [ln for ln in lines if ln.startswith("method '") or any(m in ln for m in marks)]
        assert edge["outcome"] == "failed" and says in lines[0], (method, edge["message"][:2000])
        assert all(says in line for line in failing), (method, edge["message"][:2000])
        print(f"vllm#56101 with {method} unlisted: edges fails ({case}): {failing[0][:300]}")
