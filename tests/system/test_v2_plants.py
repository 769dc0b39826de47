"""Model Runner V2's plants (specgate/engines/plants_v2.py) caught on real V2 engines, from the one nested run of
cpu-tiny-v2 (tests/system/v2_run.py; its unplanted engines: test_v2_engines.py). The two whose V2 seam is
furthest from V1's and which need no engine of their own: verification's output as V2 returns it
(RejectionSampler.__call__'s SamplerOutput, a row per request: tokens and num_sampled / num_rejected), once
changed in a token (verify_emits_draft on a copy of eagle: equivalence fails) and once in the counts by request id
(accept_less_for_prompt:5 on draft_model: acceptance per request fails naming the fifth prompt of each category
that drew one, the other categories pass, the outputs hold). Each planted method passes its other plain checks.
The other V2 plants were caught on V2 engines by hand (docs/plants.md).
"""

import pytest

from tests.system.v2_run import COPIES, IN_PLACE, MARKS

pytestmark = MARKS  # the shared V2 run's (tests/system/v2_run.py)

PLAIN = ("equivalence", "acceptance", "memory", "lifecycle")


@pytest.mark.parametrize("method", [*IN_PLACE, *COPIES])
def test_each_v2_plant_fails_the_check_it_is_for_and_only_that(v2_run, method):
    plant, gate = {**IN_PLACE, **COPIES}[method]
    judged = v2_run.of(method, gate)
    failing = {k: o for k, o in judged.items() if o["outcome"] == "failed"}
    assert failing, (plant, judged)
    others = {(g, o["outcome"]) for (m, g, _), o in v2_run.outcome.items() if m == method and g != gate}
    assert {g for g, _ in others} >= {g for g in PLAIN if g != gate}, (plant, others)
    assert {o for _, o in others} <= {"passed", "skipped"}, (plant, others)
    print(f"{plant} on V2: {gate} fails: {next(iter(failing.values()))['message'].splitlines()[0][:300]}")


def test_the_rejected_draft_emitted_makes_prompts_diverge(v2_run):
    (method,) = COPIES
    (greedy,) = v2_run.of(method, "equivalence").values()
    assert greedy["outcome"] == "failed" and "diverge" in greedy["message"], greedy["message"][:1000]
    assert {o["outcome"] for o in v2_run.of(method, "lifecycle").values()} == {"passed"}


def test_the_request_that_accepts_less_is_named_in_each_category_that_sent_it_and_its_outputs_hold(v2_run):
    (method,) = IN_PLACE
    number = int(IN_PLACE[method][0].rpartition(":")[2])
    planted = {i.rpartition("-")[0] for i in v2_run.prompt_ids() if i.endswith(f"-{number:02d}")}
    acceptance = v2_run.of(method, "acceptance")
    assert planted and set(acceptance) - planted, (planted, set(acceptance))  # some categories hit, some not
    for category, o in acceptance.items():
        if category in planted:
            assert o["outcome"] == "failed" and f"prompt {category}-{number:02d}:" in o["message"], o["message"][:1000]
            mark = f"{category}-{number:02d}"
            others = [i for i in v2_run.prompt_ids() if i.startswith(f"{category}-") and i != mark]
            assert not any(f"prompt {i}:" in o["message"] for i in others), o["message"][:1000]
        else:
            assert o["outcome"] == "passed", (category, o["message"][:1000])
    assert {o["outcome"] for o in v2_run.of(method, "equivalence").values()} == {"passed"}
