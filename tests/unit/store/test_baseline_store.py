"""Two machines under one name (issue 74): each keeps its own file, and each judges the other's figures as a
first run does: portable figures strictly, speed coarsely, the step cost and process memory not at all; the
summary says so in one line naming both. A file without an identity is no machine's own."""

import json

import pytest

from specgate.checks import Basis, Verdict
from specgate.errors import BaselineError
from specgate.machine import Identity
from specgate.profile import load_profile
from specgate.testing import FakeScript, fake_session

from ..fakes import fake_profile

pytestmark = pytest.mark.needs_vllm  # fake gate sessions: a boot tokenizes with the target's tokenizer (torch)

NAME = "cpu-amd-epyc-2c"  # the bare /proc/cpuinfo name "AMD EPYC" of several generations
EPYC = {
    "kind": "cpu",
    "vendor": "AuthenticAMD",
    "name": "AMD EPYC",
    "stepping": 1,
    "flags": ["avx", "avx2", "avx512_bf16", "avx512f", "fma"],
    "caches": {"L2": "1024K", "L3": "32768K"},
    "cores": 2,
}
ZEN5 = Identity({**EPYC, "family": 26, "model": 2})  # the reporter's
ZEN4 = Identity({**EPYC, "family": 25, "model": 17})  # this instance's
CATEGORY = "doc_prose"


@pytest.fixture
def profile(tmp_path):
    path = tmp_path / "fake.toml"
    path.write_text(
        fake_profile(
            "concurrency = [1]\n[methods.good]\n"
            'speculative_config = { method = "ngram", num_speculative_tokens = 2 }\n'
            "tolerance = { draft_cost_tol = 0.05 }\n"
        )
    )
    return load_profile(path, tmp_path)


def run(profile, root, identity, update=False, **good):
    """One gate run of 'good' (speedup at C=1, acceptance) on `identity` under the name NAME."""
    script = FakeScript.from_dict({"methods": {"good": good}})
    s = fake_session(profile, root, script, methods=["good"], update_baselines=update, hardware=NAME, identity=identity)
    s.judge("speedup", "baseline", 1)
    judged = {"speedup": s.judge("speedup", "good", 1), "acceptance": s.judge("acceptance", "good", CATEGORY)}
    if update:
        s.write_baselines()
    s.release_all()
    return s, judged


def test_two_machines_under_one_name_keep_their_own_figures_and_judge_each_others_as_a_first_run(profile, tmp_path):
    stored, _ = run(profile, tmp_path, ZEN5, update=True)
    zen5_file = stored.baselines.path
    assert zen5_file.name == f"{NAME}.{ZEN5.id}.json"
    assert json.loads(zen5_file.read_text())["identity"] == ZEN5.to_json()
    assert json.loads(zen5_file.read_text())["methods"]["good"]["provenance"]["identity"]["family"] == 26
    slower = {"draft_call_s": 0.003}  # a drafting call at 1.5x its stored share of a step (0.33 against 0.22)

    # on its own machine, the step cost check sees it
    _, own = run(profile, tmp_path, ZEN5, **slower)
    assert own["speedup"].verdict is Verdict.FAIL and own["speedup"].basis == Basis.OWN
    assert "step cost: a drafting call costs 0.333" in own["speedup"].message

    # on the other generation under the same name: not its figures; speed coarsely, no step cost ceiling
    here, other = run(profile, tmp_path, ZEN4, **slower)
    assert other["speedup"].passed and other["speedup"].basis == "coarse"
    assert f"stored on {NAME}, machine {ZEN5.id} ({zen5_file.name})" in other["speedup"].message
    cost = next(r for r in other["speedup"].rows if r.metric == "draft_cost")
    assert cost.baseline == pytest.approx(0.222, abs=0.001) and cost.bound is None  # shown, never a ceiling
    assert other["acceptance"].passed and other["acceptance"].basis == "portable"
    (line,) = here.baselines.header()
    assert line == (
        "speed judged coarsely (coarse_speedup_rtol 0.35), step cost and process memory not judged, portable figures "
        f"(acceptance, drafter weights, KV tokens lost) held to another machine's baselines: {zen5_file.name}, "
        "stored on AMD EPYC (AuthenticAMD family 26 model 2 stepping 1, Zen 5; AVX-512 bf16; L2 1 MiB, L3 32 MiB; 2 "
        f"cores); this is AuthenticAMD family 25 model 17 stepping 1, Zen 4, machine {ZEN4.id}, without baselines "
        "of its own: `a gate run with profile fake, update_baselines` stores them"
    )
    # portable figures strictly: an acceptance loss fails there all the same
    _, worse = run(profile, tmp_path, ZEN4, accepted=0.75)
    assert worse["acceptance"].verdict is Verdict.FAIL and worse["acceptance"].basis == "portable"

    # an update there writes that machine's file beside the other's, which stays as it was
    before = zen5_file.read_bytes()
    written, _ = run(profile, tmp_path, ZEN4, update=True, **slower)
    assert written.baselines.path.name == f"{NAME}.{ZEN4.id}.json" and zen5_file.read_bytes() == before
    mine, judged = run(profile, tmp_path, ZEN4, **slower)
    assert judged["speedup"].passed and judged["speedup"].basis == Basis.OWN and mine.baselines.header() == []
    _, theirs = run(profile, tmp_path, ZEN5, **slower)  # and the first machine still holds its own
    assert theirs["speedup"].verdict is Verdict.FAIL and theirs["speedup"].basis == Basis.OWN


def test_a_file_without_an_identity_is_no_machines_own(profile, tmp_path):
    stored, _ = run(profile, tmp_path, ZEN5, update=True)
    data = json.loads(stored.baselines.path.read_text())
    del data["identity"]  # a file of before identities were recorded, under the name alone
    legacy = stored.baselines.path.with_name(f"{NAME}.json")
    legacy.write_text(json.dumps(data))
    stored.baselines.path.unlink()
    here, judged = run(profile, tmp_path, ZEN5, draft_call_s=0.003)  # the machine that stored it, unbeknown
    assert judged["speedup"].passed and judged["speedup"].basis == "coarse"
    assert judged["acceptance"].basis == "portable"
    (line,) = here.baselines.header()
    assert f"baselines: {NAME}.json, stored on {NAME}, identity not recorded; this is AMD EPYC (" in line
    run(profile, tmp_path, ZEN5, update=True)
    assert json.loads(legacy.read_text()) == data  # never written over


def test_a_file_under_another_identitys_name_is_refused_naming_both(profile, tmp_path):
    stored, _ = run(profile, tmp_path, ZEN5, update=True)
    stored.baselines.path.rename(stored.baselines.path.with_name(f"{NAME}.{ZEN4.id}.json"))
    with pytest.raises(BaselineError, match=f"holds the figures of machine {ZEN5.id}, not of this machine .{ZEN4.id}"):
        run(profile, tmp_path, ZEN4)
