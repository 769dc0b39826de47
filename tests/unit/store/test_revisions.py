"""Model revisions: the profile's pins (validated, handed to vLLM), the models each engine loads, their
resolved revisions without the network (a stand-in huggingface_hub), the zoo's content hashes, and the
refusals of a run whose remote code (or, under --specgate-strict, any hub model) is not pinned."""

import shutil
import time
import tomllib
from pathlib import Path

import pytest

from specgate.engines.engine_args import engine_kwargs
from specgate.errors import ProfileError
from specgate.models import ZOO_MODELS, zoo_dir
from specgate.profile import find_profile, load_profile
from specgate.settings import Spelling
from specgate.store import revisions

from ..fakes import stand_in_hub
from ..profile.test_profile import GOOD, load_text

ROOT = Path(__file__).resolve().parents[3]
SHA = "0123456789abcdef0123456789abcdef01234567"
SHA2 = "fedcba9876543210fedcba9876543210fedcba98"
HUB = """
name = "hub"
hardware = "cuda"
target = "org/target"
dtype = "bfloat16"
max_model_len = 512
max_tokens = 32
prompts = ["fixtures/prompts/embedded.jsonl"]
{top}
[engine]
kwargs = {{ {kwargs} }}
[equivalence]
mode = "tie-aware"
logprob_margin = 0.25
max_forgiven_share = 0.3
[methods.eagle3]
speculative_config = {{ method = "eagle3", model = "org/eagle3-head", num_speculative_tokens = 3{sc} }}
[methods.mtp]
speculative_config = {{ method = "mtp", num_speculative_tokens = 1 }}
"""


def hub_profile(tmp_path, top="", kwargs="gpu_memory_utilization = 0.8", sc=""):
    return load_text(tmp_path, HUB.format(top=top, kwargs=kwargs, sc=sc))


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch):
    monkeypatch.setattr(revisions, "_HASHES", {})
    monkeypatch.setattr(revisions, "_COMMITS", {})


@pytest.mark.parametrize(
    "value, words",
    [
        ('"abc1234"', "looks like a commit but is not one"),
        (f'"{SHA.upper()}"', "looks like a commit but is not one"),
        ('"bad revision"', "must be a commit \\(40 hex digits\\) or a tag or branch name"),
        ('"../main"', "must be a commit"),
        ("7", "must be a str"),
    ],
)
def test_a_revision_is_a_whole_commit_or_a_tag_or_branch_name(tmp_path, value, words):
    with pytest.raises(ProfileError, match=rf"p.toml: key 'target_revision' .*{words}"):
        load_text(tmp_path, f"target_revision = {value}\n" + GOOD)
    assert load_text(tmp_path, f'target_revision = "{SHA}"\n' + GOOD).target_revision == SHA
    assert load_text(tmp_path, 'target_revision = "v1.2"\n' + GOOD).target_revision == "v1.2"


def test_the_targets_pins_are_top_level_keys_and_a_drafters_its_speculative_config(tmp_path):
    with pytest.raises(ProfileError, match=r"key 'engine.kwargs.revision' pins the target: write it as the top-level"):
        hub_profile(tmp_path, kwargs=f'revision = "{SHA}"')
    with pytest.raises(ProfileError, match=r"key 'methods.eagle3.speculative_config.revision' .*looks like a commit"):
        hub_profile(tmp_path, sc=', revision = "abc1234"')
    with pytest.raises(ProfileError, match=r"'methods.mtp.speculative_config.revision' pins a drafter, but .*no model"):
        load_text(
            tmp_path,
            HUB.format(top="", kwargs="", sc="").replace(
                'method = "mtp", num', f'method = "mtp", revision = "{SHA}", num'
            ),
        )


def test_the_pins_reach_vllms_engine_arguments_and_an_mtp_drafter_takes_the_targets(tmp_path):
    top = f'target_revision = "{SHA}"\ncode_revision = "{SHA}"\ntokenizer_revision = "v2"'
    p = hub_profile(tmp_path, top=top, kwargs='tokenizer = "org/tok"', sc=f', revision = "{SHA2}"')
    eagle3 = engine_kwargs(p, p.methods["eagle3"], ROOT)
    assert (eagle3["revision"], eagle3["code_revision"], eagle3["tokenizer_revision"]) == (SHA, SHA, "v2")
    assert eagle3["speculative_config"]["revision"] == SHA2 and "code_revision" not in eagle3["speculative_config"]
    mtp = engine_kwargs(p, p.methods["mtp"], ROOT)["speculative_config"]
    assert (mtp["revision"], mtp["code_revision"]) == (SHA, SHA)  # vLLM would load the drafter at the newest
    assert "revision" not in engine_kwargs(p, p.baseline, ROOT).get("speculative_config", {})
    plain = hub_profile(tmp_path)
    assert "revision" not in engine_kwargs(plain, plain.methods["eagle3"], ROOT)


def test_each_engine_names_its_models_and_the_keys_that_pin_them(tmp_path):
    p = hub_profile(tmp_path, kwargs="trust_remote_code = true", sc=f', revision = "{SHA}"')
    assert [(m.role, m.ref, m.pin, m.key, m.code_key) for m in revisions.models_of(p, p.methods["eagle3"])] == [
        ("target", "org/target", None, "target_revision", "code_revision"),
        ("drafter", "org/eagle3-head", SHA, "methods.eagle3.speculative_config.revision",
         "methods.eagle3.speculative_config.code_revision"),
    ]  # fmt: skip
    assert [m.role for m in revisions.models_of(p, p.methods["mtp"])] == ["target"]  # MTP lives in the target
    cpu = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    eagle = revisions.models_of(cpu, cpu.methods["eagle"])
    assert [(m.ref, m.hub, m.code_key) for m in eagle] == [("zoo:target", False, ""), ("zoo:eagle", False, "")]
    assert revisions.unpinned(cpu, cpu.select(None)) == []  # the zoo is pinned by its hashes


def test_a_hub_models_revision_is_the_cached_snapshots_commit_never_the_network(tmp_path, monkeypatch):
    calls = []
    stand_in_hub(monkeypatch, {("org/target", None): SHA, ("org/eagle3-head", "v1"): SHA2}, calls)
    p = hub_profile(tmp_path, sc=', revision = "v1"')
    got = revisions.resolved(revisions.models_of(p, p.methods["eagle3"]), ROOT)
    assert got == {
        "target": {"ref": "org/target", "revision": SHA},
        "drafter": {"ref": "org/eagle3-head", "revision": SHA2},
    }
    revisions.resolved(revisions.models_of(p, p.methods["eagle3"]), ROOT)
    assert len(calls) == 2  # resolved once per run
    assert revisions.hub_commit("org/elsewhere") is None  # not cached: unknown, not guessed
    assert revisions.hub_commit("org/elsewhere", SHA) == SHA  # a pinned commit is what vLLM loads


def test_the_zoos_content_hashes_are_cheap_stable_and_see_one_changed_byte(tmp_path):
    started = time.perf_counter()
    hashes = {name: revisions.content_hash(zoo_dir(ROOT) / name) for name in ZOO_MODELS}
    spent = time.perf_counter() - started
    assert all(h.startswith("sha256:") and len(h) == 71 for h in hashes.values())
    assert len(set(hashes.values())) == len(hashes)
    assert spent < 1.0, f"hashing the zoo took {spent:.3f} s"
    again = time.perf_counter()
    assert revisions.content_hash(zoo_dir(ROOT) / "eagle3") == hashes["eagle3"]
    assert time.perf_counter() - again < 0.01  # once per run
    copy = tmp_path / "eagle3"
    shutil.copytree(zoo_dir(ROOT) / "eagle3", copy)
    assert revisions.content_hash(copy) == hashes["eagle3"]  # names and bytes, not where it lies
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (copy / "model.safetensors").write_bytes(bytes(data))
    revisions._HASHES.clear()
    assert revisions.content_hash(copy) != hashes["eagle3"]


def test_remote_code_not_pinned_to_a_commit_is_refused_on_a_gpu_run(tmp_path):
    p = hub_profile(tmp_path, kwargs="trust_remote_code = true", sc=f', revision = "{SHA}", code_revision = "{SHA}"')
    refused = revisions.refusal(p, p.select(None))
    assert str(refused).startswith(f"profile {p.path}: trust_remote_code = true makes vLLM run Python code")
    assert "org/target (key 'code_revision' not set)" in str(refused) and "eagle3-head" not in str(refused)
    assert "specgate download --profile hub --pin" in str(refused) and "allow_unpinned_code = true" in str(refused)
    branch = hub_profile(tmp_path, top='code_revision = "main"', kwargs="trust_remote_code = true")
    assert "key 'code_revision' is 'main', a branch or tag" in str(revisions.refusal(branch, branch.select(None)))
    assert "methods.eagle3.speculative_config.code_revision" in str(revisions.refusal(branch, branch.select(None)))
    pinned = hub_profile(
        tmp_path,
        top=f'code_revision = "{SHA}"',
        kwargs="trust_remote_code = true",
        sc=f', code_revision = "{SHA2}"',
    )
    assert revisions.refusal(pinned, pinned.select(None)) is None
    allowed = hub_profile(tmp_path, top="allow_unpinned_code = true", kwargs="trust_remote_code = true")
    assert revisions.refusal(allowed, allowed.select(None)) is None
    assert revisions.refusal(hub_profile(tmp_path), p.select(None)) is None  # no remote code


def test_the_shipped_mimo_profile_is_refused_until_the_runner_pins_its_code():
    mimo = load_profile(find_profile("mimo-7b-mtp-h100", ROOT), ROOT)
    refused = str(revisions.refusal(mimo, mimo.select(None)))
    assert "XiaomiMiMo/MiMo-7B-RL (key 'code_revision' not set)" in refused
    assert "specgate download --profile mimo-7b-mtp-h100 --pin" in refused


def test_unpinned_hub_models_are_named_once_and_refused_only_under_strict(tmp_path):
    p = hub_profile(tmp_path, sc=', revision = "main"')
    line = revisions.unpinned_line(p, p.select(None))
    assert line.startswith(
        "hub models not pinned to a commit: org/target (target_revision not set), org/eagle3-head "
        "(methods.eagle3.speculative_config.revision 'main', a branch or tag that can move);"
    )
    assert revisions.refusal(p, p.select(None)) is None
    strict = str(revisions.refusal(p, p.select(None), strict=True, say=Spelling({"strict": "--strict"})))
    assert strict.startswith(f"profile {p.path}: --strict refuses hub models not pinned to a commit: org/target")
    assert strict.endswith("or run without --strict.") and "(--strict refuses such a run)" in revisions.unpinned_line(
        p, p.select(None), Spelling({"strict": "--strict"})
    )
    assert str(revisions.refusal(p, p.select(None), strict=True)).endswith("or run without strict.")
    pinned = hub_profile(tmp_path, top=f'target_revision = "{SHA}"', sc=f', revision = "{SHA2}"')
    assert revisions.unpinned_line(pinned, pinned.select(None)) == ""
    assert revisions.refusal(pinned, pinned.select(None), strict=True) is None


def test_pins_are_written_in_each_layout_a_method_table_takes_and_verified(tmp_path):
    from specgate.profile.edit import CannotEdit, Pin, apply

    drafter = Pin("methods.e.speculative_config.revision", SHA, "org/head")
    layouts = [
        '[methods.e]\nspeculative_config = { method = "eagle", model = "org/head" }  # the head\n',
        '[methods.e.speculative_config]\nmethod = "eagle"\nmodel = "org/head"\n\n# next\n[tolerance]\n',
        '[methods.e]\nspeculative_config.method = "eagle"\nspeculative_config.model = "org/head"\n',
        f'[methods.e]\nspeculative_config = {{ method = "eagle", revision = "{SHA2}", model = "org/head" }}\n',
    ]
    for layout in layouts:
        text = 'name = "x"\n# the target\ntarget = "org/t"\n\n# engines\n' + layout
        edited = apply(text, [Pin("target_revision", SHA2, "org/t"), drafter])
        data = tomllib.loads(edited)
        assert data["target_revision"] == SHA2 and data["methods"]["e"]["speculative_config"]["revision"] == SHA
        assert edited.splitlines()[3] == f'target_revision = "{SHA2}"  # org/t'  # above the first table's comment
        assert "# the head" in edited or "the head" not in layout  # comments kept
    tricky = 'name = "x"\ndescription = """\n[methods.e]\n"""\n[methods.e]\nspeculative_config = 3\n'
    with pytest.raises(CannotEdit):
        apply(tricky, [drafter])
