"""The models under the baselines, end to end through a session over fake engines and a stand-in hub (no
network): an update records each method's models (a hub drafter's commit, a local or zoo model's content
hash), a later run whose models moved says so at the top of the summary and in a failing check's
message, and the next update stores the new revisions while a kept group keeps its own."""

import json
import shutil

import pytest

from specgate.checks import Verdict
from specgate.profile import load_profile
from specgate.store import revisions
from specgate.testing import FakeScript, fake_session

from .fakes import ROOT, fake_profile, stand_in_hub

pytestmark = pytest.mark.needs_vllm  # a fake boot tokenizes with the target's transformers tokenizer

SHA1 = "1111111" + "a" * 33
SHA2 = "2222222" + "b" * 33
CATEGORY = "doc_prose"


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
    monkeypatch.setattr(revisions, "_HASHES", {})
    monkeypatch.setattr(revisions, "_COMMITS", {})


@pytest.fixture
def profile(tmp_path):
    drafter = tmp_path / "eagle3"
    shutil.copytree(ROOT / "fixtures" / "zoo" / "eagle3", drafter)
    (tmp_path / "fake.toml").write_text(
        fake_profile(
            f"""
[methods.hub]
speculative_config = {{ method = "ngram", num_speculative_tokens = 2, model = "org/head" }}
[methods.local]
speculative_config = {{ method = "ngram", num_speculative_tokens = 2, model = "{drafter}" }}
"""
        )
    )
    return load_profile(tmp_path / "fake.toml", tmp_path)


def run(profile, tmp_path, monkeypatch, commit, update=False, **behaviours):
    """A session over the stand-in hub whose org/head is at `commit`, each process's caches fresh."""
    monkeypatch.setattr(revisions, "_HASHES", {})
    monkeypatch.setattr(revisions, "_COMMITS", {})
    stand_in_hub(monkeypatch, {("org/head", None): commit})
    script = FakeScript.from_dict({"methods": behaviours})
    return fake_session(profile, tmp_path, script, methods=["hub", "local"], update_baselines=update)


def update(session):
    for method in ("hub", "local"):
        session.judge("acceptance", method, CATEGORY)
    text = session.write_baselines()
    session.release_all()
    return text


def test_the_baselines_record_each_methods_models_and_a_run_says_which_moved(profile, tmp_path, monkeypatch):
    update(run(profile, tmp_path, monkeypatch, SHA1, update=True))
    stored = json.loads(next((tmp_path / "baselines" / "fake").glob("*.json")).read_text())
    models = stored["methods"]["hub"]["provenance"]["models"]
    assert models["drafter"] == {"ref": "org/head", "revision": SHA1}
    assert models["target"]["revision"].startswith("sha256:")  # a local directory: its content hash
    assert stored["methods"]["local"]["provenance"]["models"]["drafter"]["revision"].startswith("sha256:")

    same = run(profile, tmp_path, monkeypatch, SHA1)
    assert not [line for line in same.header() if "since the baselines" in line]
    assert (
        "hub models not pinned to a commit: org/head (methods.hub.speculative_config.revision not set)"
        in (same.header()[0])
    )
    same.release_all()

    # the hub's head moved and one byte of the local drafter's weights changed
    weights = tmp_path / "eagle3" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    moved = run(profile, tmp_path, monkeypatch, SHA2, hub={"accepted": 0.5})
    header = moved.header()
    assert header[0] == (
        "hub's drafter: org/head 1111111 -> 2222222 since the baselines: figures that moved may have moved "
        "with the weights, not with vLLM"
    )
    assert header[1].startswith(f"local's drafter: {tmp_path / 'eagle3'} sha256:")
    assert not [line for line in header if "target" in line]  # the target is the same
    failed = moved.judge("acceptance", "hub", CATEGORY)
    assert failed.verdict is Verdict.FAIL
    assert failed.message.startswith(
        "the models changed since this figure's baseline was stored: hub's drafter: org/head 1111111 -> 2222222"
    )
    assert moved.judge("acceptance", "local", CATEGORY).passed  # a passing check says nothing more
    moved.release_all()

    # the update stores the new revisions; the next run is quiet again
    table = update(run(profile, tmp_path, monkeypatch, SHA2, update=True))
    assert "model: hub's drafter: org/head 1111111 -> 2222222" in table
    assert not [line for line in run(profile, tmp_path, monkeypatch, SHA2).header() if "since" in line]


def test_a_model_not_in_the_cache_is_recorded_unknown_and_never_called_a_move(profile, tmp_path, monkeypatch):
    update(run(profile, tmp_path, monkeypatch, SHA1, update=True))
    missing = run(profile, tmp_path, monkeypatch, None)  # org/head not in the cache: vLLM fetches it at the boot
    assert missing.models("hub")["drafter"] == {"ref": "org/head", "revision": None}
    assert not [line for line in missing.header() if "since the baselines" in line]


@pytest.mark.parametrize("name", ["cpu-tiny", "cpu-tiny-sweep"])
def test_the_committed_baselines_were_measured_with_the_zoo_as_it_is(name):
    # A retrained zoo model moves every figure measured with it: re-measure the baselines with it
    # (pytest -m gpu --update-baselines), which records its new hash. Hashing the zoo costs milliseconds.
    from specgate.profile import find_profile
    from specgate.store.baseline_store import BaselineStore

    profile = load_profile(find_profile(name, ROOT), ROOT)
    store = BaselineStore(ROOT, profile, "cpu-amd-epyc-2c")
    for spec in [profile.baseline, *profile.methods.values()]:
        if spec.name in store.file().methods:
            now = revisions.resolved(revisions.models_of(profile, spec), ROOT)
            assert store.file().models(spec.name) == now, spec.name
            assert store.models_moved(spec.name, now) == []
