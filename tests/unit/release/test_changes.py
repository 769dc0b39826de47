"""Two releases compared section by section: every kind of change a release day reports is found in a
pair of small synthetic trees, and a release compared with itself changes nothing."""

from __future__ import annotations

import pytest

from specgate.release import changes, vllm_facts
from specgate.release.vllm_tree import Param, Tree

from .vllm_trees import pair


@pytest.fixture(scope="module")
def sections(tmp_path_factory):
    old, new = (vllm_facts.read(Tree(p)) for p in pair(tmp_path_factory.mktemp("trees")))
    args = ("gpu_memory_utilization", "num_gpu_blocks_override", "max_num_seqs", "swap_space")
    return {s.title: s.lines for s in changes.compare(old, new, args)}


def test_methods_and_rules(sections):
    assert sections["methods"][:3] == (
        "added: dspark",
        "removed: custom_class",
        "verification rules (RejectionSampleMethod): block, standard -> block, fly, standard",
    )


def test_config_keys_added_removed_deprecated_with_defaults(sections):
    keys = sections["SpeculativeConfig keys"]
    assert "added: suffix_decoding_corpus_tokens: int = 1 << 20" in keys
    assert "removed: disable_padded_drafter_batch (was bool = False)" in keys
    assert 'deprecated: parallel_drafting (default False -> None): "Deprecated and has no effect."' in keys
    assert any(k.startswith("deprecated: suffix_decoding_max_spec_factor (default 1.0)") for k in keys)
    assert "type changed: method: SpeculativeMethod | None -> SpeculativeMethod | str | None" in keys


def test_engine_arguments_and_their_configs_constants(sections):
    assert sections["engine arguments the profiles and the suite set"] == (
        'default changed: gpu_memory_utilization: 0.92 -> None ("If unspecified, 0.92.")',
        "removed: max_num_seqs (was default None)",
        'deprecated: swap_space: "--swap-space is deprecated and has no effect."',
        "constant changed: CacheConfig.DEFAULT_BLOCK_SIZE: 16 -> 64",
    )


def test_model_runners(sections):
    runners = sections["model runners"]
    assert runners[0] == "Model Runner V1: present -> removed (vllm/v1/worker/gpu_model_runner.py)"
    assert "the GPU worker's runner: V2 (V1 where V2 lacks a feature) -> V2 (the only GPU runner)" in runners
    assert any(r.startswith("V2 supports now: speculative method") and "'suffix'" in r for r in runners)
    assert (
        "the CPU worker builds its runner from: vllm.v1.worker.cpu_model_runner -> vllm.v1.worker.cpu.model_runner"
        in runners
    )
    assert (
        'the CPU platform now raises: "vLLM on x86 CPUs requires Triton (triton-cpu)." (vllm/platforms/cpu.py)'
        in runners
    )


def test_metrics_sampler_speculators_packages_environment(sections):
    assert sections["metric names"] == (
        "added: vllm:spec_decode_accepted_tokens",
        "removed: vllm:spec_decode_num_accepted_tokens",
    )
    kernels = sections["rejection sampler signatures"]
    utils = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
    assert (
        f"{utils}: rejection_sample: draft_logits: torch.Tensor | None -> draft_logits_cache: DraftLogitsCache | None; "
        "+ skip: bool = False"
    ) in kernels
    assert "vllm/v1/sample/rejection_sampler.py: removed, 1 function(s) (public: rejection_sample)" in kernels
    assert (
        kernels[-1]
        == "DraftLogitsCache, new in these signatures, is vllm.v1.worker.gpu.spec_decode.draft_logits.DraftLogitsCache"
    )
    assert sections["speculators Model Runner V2 builds"][:2] == (
        "dspark: none (V2 builds no speculator) -> DSparkSpeculator",
        "suffix: none (V2 builds no speculator) -> SuffixSpeculator",
    )
    assert sections["packages a method needs"][0].startswith("arctic_inference: no longer required")
    assert sections["environment variables"] == (
        'VLLM_OLD_KNOB: removed, and setting it raises: "Use --new-knob instead."',
        'VLLM_USE_V2_MODEL_RUNNER: refused: "VLLM_USE_V2_MODEL_RUNNER={value} is no longer supported." '
        "(vllm/platforms/interface.py:6)",
    )


def test_a_release_compared_with_itself_changes_nothing(tmp_path):
    old = vllm_facts.read(Tree(pair(tmp_path)[0]))
    assert all(s.lines == () for s in changes.compare(old, old, ("gpu_memory_utilization",)))


def test_a_replaced_parameter_is_one_change_not_two():
    a = (Param("x", "int"), Param("draft", "Tensor"), Param("k", "int", "3", True))
    b = (Param("x", "int"), Param("cache", "Cache"), Param("k", "int", "4", True), Param("y"))
    assert changes.param_changes(a, b) == ["draft: Tensor -> cache: Cache", "+ y", "k: int = 3 -> k: int = 4"]
