"""`specgate download`: which hub models a profile needs, disk and access checked before fetching."""

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from specgate import download
from specgate.profile import find_profile, load_profile

ROOT = Path(__file__).resolve().parents[2]
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

    def model_info(self, repo, files_metadata=False):
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
    assert download.main(args) == 0
    assert "names no hub model" in capsys.readouterr().out


def test_methods_the_installed_vllm_does_not_offer_are_skipped_saying_so(monkeypatch, capsys):
    from specgate import vllm_compat

    monkeypatch.setattr(
        vllm_compat, "speculative_methods", lambda: ("ngram", "suffix", "draft_model", "eagle", "eagle3", "dflash")
    )
    monkeypatch.setattr(vllm_compat, "release", lambda: "vLLM 0.33.0")
    monkeypatch.setattr(download, "plan", lambda repo, api, where: download.Plan(repo, ("config.json",), 1, 0))
    monkeypatch.setattr(download, "check_disk", lambda plans, where: None)
    args = argparse.Namespace(profile="llama31-8b-h100", methods="", dry_run=True, root=ROOT)
    assert download.main(args) == 0
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
