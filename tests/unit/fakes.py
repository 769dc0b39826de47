"""The profile the fake-engine tests share (specgate.testing drives it without vLLM)."""

import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fake_profile(body: str) -> str:
    """A cpu profile named 'fake' over the zoo target and the embedded prompts; `body` adds the rest."""
    return (
        'name = "fake"\nhardware = "cpu"\n'
        f'target = "{ROOT / "fixtures" / "zoo" / "target"}"\n'
        f'prompts = ["{ROOT / "fixtures" / "prompts" / "embedded.jsonl"}"]\n'
        "max_model_len = 512\nmax_tokens = 8\n" + body
    )


def stand_in_hub(monkeypatch, snapshots: dict, calls: list | None = None):
    """huggingface_hub replaced: snapshot_download answers from `snapshots` ((repo, revision) -> commit)
    and only with local_files_only (anything else would be the network)."""

    def snapshot_download(repo_id, revision=None, local_files_only=False, **kwargs):
        assert local_files_only, "resolving a revision must never reach the hub"
        if calls is not None:
            calls.append((repo_id, revision))
        commit = snapshots.get((repo_id, revision))
        if commit is None:
            raise FileNotFoundError(repo_id)
        return f"/cache/hub/models--{repo_id.replace('/', '--')}/snapshots/{commit}"

    try:  # the installed one keeps its other modules (transformers imports them); its snapshot_download replaced
        import huggingface_hub

        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    except ImportError:
        hub = types.ModuleType("huggingface_hub")
        hub.snapshot_download = snapshot_download
        monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
