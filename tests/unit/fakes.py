"""The profile the fake-engine tests share (specgate.testing drives it without vLLM)."""

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
