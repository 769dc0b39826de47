"""`specgate download`: which hub models a profile needs, disk and access checked before fetching."""

import argparse
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from specgate.cli import download as cli_download
from specgate.profile import find_profile, load_profile
from specgate.release import download

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3


def test_the_target_and_every_drafter_of_the_selected_methods_are_fetched_once():
    profile = load_profile(find_profile("llama31-8b-h100", ROOT), ROOT)
    repos = download.hub_models(profile, profile.select(None))
    assert repos[0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "meta-llama/Llama-3.2-1B-Instruct" in repos and "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in repos
    assert len(repos) == len(set(repos))
    only = download.hub_models(profile, profile.select(["ngram"]))
    assert only == ["meta-llama/Llama-3.1-8B-Instruct"]
    cpu = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    assert download.hub_models(cpu, cpu.select(None)) == []  # zoo models only


class FakeApi:
    def __init__(self, siblings=None, error=None):
        self.siblings, self.error = siblings or [], error

    def model_info(self, repo, revision=None, files_metadata=False):
        if self.error:
            raise self.error
        return SimpleNamespace(sha="abc", siblings=[SimpleNamespace(rfilename=n, size=s) for n, s in self.siblings])


def test_only_what_vllm_loads_is_counted_and_missing_disk_is_said_before_fetching(tmp_path, monkeypatch):
    api = FakeApi(
        [
            ("config.json", 1000),
            ("model-00001.safetensors", 5 * GIB),
            ("original/consolidated.00.pth", 16 * GIB),
            ("tokenizer.json", 9000),
            ("README.md", 10),
        ]
    )
    monkeypatch.setattr(download, "_cached", lambda repo, name, rev, cache: name == "config.json")
    p = download.plan("meta-llama/Llama-3.1-8B-Instruct", api, tmp_path)
    assert set(p.files) == {"config.json", "model-00001.safetensors", "tokenizer.json"}
    assert p.total_bytes == 5 * GIB + 10000 and p.missing_bytes == 5 * GIB + 9000
    monkeypatch.setattr(download.shutil, "disk_usage", lambda path: SimpleNamespace(free=2 * GIB))
    with pytest.raises(download.DownloadError, match=r"needs 5.0 GiB more .* but its disk has 2.0 GiB free; .*HF_HOME"):
        download.check_disk([p], tmp_path / "hub")


def test_a_gated_repository_says_to_accept_the_licence(monkeypatch):
    import httpx
    from huggingface_hub.errors import GatedRepoError

    response = httpx.Response(403, request=httpx.Request("GET", "https://huggingface.co/api/models/x"))
    try:
        error = GatedRepoError("gated", response=response)
    except TypeError:  # huggingface_hub releases differ in how errors carry their response
        pytest.skip("this huggingface_hub builds its errors differently")
    with pytest.raises(
        download.DownloadError, match=r"gated .* accept its licence at https://huggingface.co/meta-llama/x"
    ):
        download.plan("meta-llama/x", FakeApi(error=error))


def test_a_profile_without_hub_models_fetches_nothing(capsys):
    args = argparse.Namespace(profile="cpu-tiny", methods="", dry_run=False, root=ROOT)
    assert cli_download.main(args) == 0
    assert "names no hub model" in capsys.readouterr().out


def test_methods_the_installed_vllm_does_not_offer_are_skipped_saying_so(monkeypatch, capsys):
    from specgate import vllm_compat

    monkeypatch.setattr(
        vllm_compat, "speculative_methods", lambda: ("ngram", "suffix", "draft_model", "eagle", "eagle3", "dflash")
    )
    monkeypatch.setattr(vllm_compat, "release", lambda: "vLLM 0.33.0")
    monkeypatch.setattr(
        download, "plan", lambda repo, api, where, rev=None: download.Plan(repo, ("config.json",), 1, 0)
    )
    monkeypatch.setattr(download, "check_disk", lambda plans, where: None)
    args = argparse.Namespace(profile="llama31-8b-h100", methods="", dry_run=True, root=ROOT)
    assert cli_download.main(args) == 0
    out = capsys.readouterr().out
    assert (
        "download: skipping method 'mlp_speculator' (ibm-ai-platform/llama3-8b-accelerator): vLLM 0.33.0 does not "
        "offer speculative_config.method = 'mlp_speculator', so the gate skips it too"
    ) in out
    assert "download: ibm-ai-platform" not in out and "download: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in out


def test_a_head_with_only_pytorch_weights_is_fetched_without_training_leftovers(monkeypatch):
    api = FakeApi(
        [("config.json", 10), ("medusa_lm_head.pt", GIB), ("training_args.bin", 5), ("optimizer.pt", 2 * GIB)]
    )
    monkeypatch.setattr(download, "_cached", lambda repo, name, rev, cache: False)
    assert download.plan("org/medusa-head", api).files == ("config.json", "medusa_lm_head.pt")


SHAS = {
    "meta-llama/Llama-3.1-8B-Instruct": "0e9e39f249a16976918f6564b8830bc894c89659",
    "meta-llama/Llama-3.2-1B-Instruct": "9213176726f574b556790deb65791e0c5aa438b6",
    "XiaomiMiMo/MiMo-7B-RL": "4d3b0b4e4a2a6f1c9d1e8f7a6b5c4d3e2f1a0b9c",
}


class HubApi:
    """The hub's model_info as --pin asks it: the commit a repository's revision is at (a stand-in)."""

    def __init__(self):
        self.asked = []

    def model_info(self, repo, revision=None, files_metadata=False):
        self.asked.append((repo, revision))
        import hashlib

        sha = SHAS.get(repo) or hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()
        return SimpleNamespace(sha=sha, siblings=[])


def pin_args(profile, write=False):
    return argparse.Namespace(profile=str(profile), methods="", dry_run=False, pin=True, write=write, root=ROOT)


def copied(tmp_path, name):
    path = tmp_path / f"{name}.toml"
    path.write_text((ROOT / "fixtures" / "profiles" / f"{name}.toml").read_text())
    return path


def test_pin_prints_each_hub_models_current_commit_as_the_profiles_lines_and_fetches_nothing(
    tmp_path, monkeypatch, capsys
):
    import huggingface_hub

    api = HubApi()
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda token=None: api)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: pytest.fail("--pin fetches nothing"))
    path = copied(tmp_path, "llama31-8b-h100")
    before = path.read_text()
    assert cli_download.main(pin_args(path)) == 0
    out = capsys.readouterr().out
    assert (
        f"pin: target_revision = {SHAS['meta-llama/Llama-3.1-8B-Instruct']}  (meta-llama/Llama-3.1-8B-Instruct" in out
    )
    assert "# in [methods.draft_model], inside its speculative_config = { ... }:" in out
    assert f'revision = "{SHAS["meta-llama/Llama-3.2-1B-Instruct"]}"  # meta-llama/Llama-3.2-1B-Instruct at its' in out
    assert "code_revision" not in out  # no remote code in this profile
    assert path.read_text() == before  # printed, not written
    repos = [repo for repo, _ in api.asked]
    assert len(repos) == len(set(repos)) and "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B" in repos


def test_pin_write_sets_every_pin_in_place_and_a_second_run_has_nothing_to_do(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    from specgate.store import revisions

    monkeypatch.setattr(huggingface_hub, "HfApi", lambda token=None: HubApi())
    path = copied(tmp_path, "mimo-7b-mtp-h100")
    mimo = load_profile(path, ROOT)
    assert revisions.refusal(mimo, mimo.select(None)) is not None  # remote code, not pinned
    assert cli_download.main(pin_args(path, write=True)) == 0
    out = capsys.readouterr().out
    assert f"pin: written to {path.resolve()}" in out or f"pin: written to {path}" in out
    pinned = load_profile(path, ROOT)
    sha = SHAS["XiaomiMiMo/MiMo-7B-RL"]
    assert pinned.target_revision == sha and pinned.code_revision == sha
    assert revisions.refusal(pinned, pinned.select(None), strict=True) is None
    assert (
        path.read_text().count("\n") == (ROOT / "fixtures/profiles/mimo-7b-mtp-h100.toml").read_text().count("\n") + 2
    )
    assert cli_download.main(pin_args(path, write=True)) == 0
    assert "is pinned to a commit" in capsys.readouterr().out


def test_pin_write_refuses_a_layout_it_cannot_edit_safely_and_prints_the_lines(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "HfApi", lambda token=None: HubApi())
    path = copied(tmp_path, "llama31-8b-h100")
    # the same document, the drafter's table written as one nested inline table: not a layout the edit takes
    text = re.sub(
        r"\[methods.eagle3\]\n(#.*\n)*speculative_config = (\{.*\})",
        r"[methods]\neagle3 = { speculative_config = \2 }",
        path.read_text(),
    )
    assert text != path.read_text()
    path.write_text(text)
    assert "eagle3" in load_profile(path, ROOT).methods
    assert cli_download.main(pin_args(path, write=True)) == 1
    out = capsys.readouterr().out
    assert f"pin: not written: {path}" in out and "cannot be edited safely" in out and "target_revision = " in out
    assert path.read_text() == text


def test_a_pinned_model_is_fetched_at_its_pin(tmp_path, monkeypatch):
    import huggingface_hub

    path = copied(tmp_path, "llama31-8b-h100")
    sha = "1" * 40
    path.write_text(f'target_revision = "{sha}"\n' + path.read_text())
    fetched = []
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda token=None: HubApi())
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo, revision=None, **kwargs: fetched.append((repo, revision))
    )
    monkeypatch.setattr(download, "offered", lambda methods: [m for m in methods if m.name == "ngram"])
    monkeypatch.setattr(download, "check_disk", lambda plans, where: None)
    monkeypatch.setattr(
        download, "plan", lambda repo, api, where, rev=None: download.Plan(repo, ("config.json",), 1, 1, rev)
    )
    args = argparse.Namespace(profile=str(path), methods="", dry_run=False, pin=False, write=False, root=ROOT)
    assert cli_download.main(args) == 0
    assert fetched == [("meta-llama/Llama-3.1-8B-Instruct", sha)]
