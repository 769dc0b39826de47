"""The upgrade rehearsal's decisions and files, without servers (the servers are tests/gate's)."""

import json
from pathlib import Path

from specgate import rehearse
from specgate.endpoint import Endpoint
from specgate.profile import find_profile, load_profile

ROOT = Path(__file__).resolve().parents[2]


def test_only_a_change_whose_whole_interval_is_past_the_tolerance_counts():
    assert rehearse.verdict_of(0.80, 0.84, 0.15) == rehearse.WORSE  # upper bound below 0.85
    assert rehearse.verdict_of(0.80, 0.90, 0.15) == rehearse.UNCHANGED
    assert rehearse.verdict_of(1.20, 1.30, 0.15) == rehearse.BETTER  # lower bound above 1 / 0.85
    assert rehearse.verdict_of(1.10, 1.30, 0.15) == rehearse.UNCHANGED
    assert rehearse.verdict_of(1.3, 1.3, 0.1, higher_is_better=False) == rehearse.WORSE  # e.g. memory


def test_a_rehearsal_writes_the_usual_results_with_the_old_release_as_baseline(tmp_path):
    profile = load_profile(find_profile("cpu-tiny", ROOT), ROOT)
    r = rehearse.Rehearsal(profile, ROOT, tmp_path / "out", ("0.31.0", Path("old")), ("0.32.0", Path("new")), [])
    r._judge("ngram", "acceptance", "doc_prose", "mean_acceptance_length", 2.0, 2.26, rehearse.WORSE, "-11.5%", bound=2.147)
    r._judge("ngram", "equivalence", "greedy", "identical", 60, 60, rehearse.UNCHANGED, "")
    r.fail_method("eagle", RuntimeError("server 'eagle' exited with 1 before it answered /health"))
    paths = r.write(started=0.0)
    run = json.loads(paths["run"].read_text())
    assert run["rehearsal"] == {"from": "0.31.0", "to": "0.32.0"}
    assert [o["change"] for o in run["outcomes"]] == ["worse", "unchanged", "error"]
    summary = paths["summary"].read_text()
    assert "| ngram | doc_prose | **fail** | 2 (baseline 2.26, floor 2.15) |" in summary
    assert "'baseline' is vLLM 0.31.0" in summary and "server 'eagle' exited with 1" in summary


def test_kv_capacity_comes_from_the_servers_cache_config_gauge():
    text = ('# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="10920",engine="0"} 1.0\n')
    client = Endpoint("x", "http://127.0.0.1:1")
    client.run = lambda coro: (coro.close(), text)[1]
    try:
        assert client.kv_capacity_tokens() == 174720
    finally:
        client.shutdown()
