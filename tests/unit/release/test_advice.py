"""A runner's owner's to-do list: the changes between two synthetic releases held against a profile's
methods and engine arguments, the environment advice in the project's files, the internals the suite
reaches and the constants it assumes; each line names the file and what to do, and nothing unchanged is
listed."""

from __future__ import annotations

import pytest

from specgate import vllm_compat
from specgate.release import advice, vllm_facts
from specgate.release.vllm_tree import Tree

from .vllm_trees import pair

PROFILE = advice.ProfileUse(
    "fixtures/profiles/p.toml",
    {
        "suffix": {"method": "suffix", "num_speculative_tokens": 8},
        "eagle": {"method": "eagle", "num_speculative_tokens": 3, "disable_padded_drafter_batch": True},
        "custom": {"method": "custom_class"},
        "pd": {"method": "draft_model", "parallel_drafting": True},
        "ngram": {"method": "ngram", "prompt_lookup_max": 5},
    },
    {"max_num_seqs": 64, "swap_space": 4, "gpu_memory_utilization": 0.9},
)


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    old, new = pair(tmp_path_factory.mktemp("trees"))
    return old, new, vllm_facts.read(Tree(old)), vllm_facts.read(Tree(new))


def test_a_profiles_changed_methods_keys_and_engine_arguments(trees):
    _, _, old, new = trees
    lines = advice.todo(old, new, [PROFILE], [], advice.SuiteUse(), [])
    where = "fixtures/profiles/p.toml [methods."
    assert lines == [
        f"{where}suffix]: Model Runner V2 builds SuffixSpeculator for 'suffix' in 1.1.0 (1.0.0: no V2 speculator (the "
        "engine fell back to Model Runner V1)): its baselines measure another drafter; store them anew (pytest -m gpu "
        "--specgate-profile p --specgate-methods suffix --update-baselines) and correct what the profile's comments "
        "say about its runner",
        f"{where}eagle]: remove speculative_config.disable_padded_drafter_batch: "
        "1.1.0's SpeculativeConfig has no such key",
        f"{where}custom]: method 'custom_class' is no SpeculativeMethod of 1.1.0: drop or replace it",
        f'{where}pd]: speculative_config.parallel_drafting is deprecated in 1.1.0: "Deprecated and has no effect."',
        "fixtures/profiles/p.toml [engine] kwargs: remove max_num_seqs: 1.1.0's EngineArgs has no such field",
        "fixtures/profiles/p.toml [engine] kwargs: swap_space is deprecated: "
        '"--swap-space is deprecated and has no effect."',
    ]


def test_environment_advice_that_raises_or_names_a_removed_variable(trees, tmp_path):
    _, _, old, new = trees
    (tmp_path / "README.md").write_text(
        'Put all on V1: `VLLM_USE_V2_MODEL_RUNNER = "0"` in engine.env.\n'
        "VLLM_USE_V2_MODEL_RUNNER=1 is harmless; VLLM_CPU_KVCACHE_SPACE=4 too.\n"
        "Set VLLM_OLD_KNOB=2 for speed.\n\n\n"
        "Up to 1.0.0 only: VLLM_USE_V2_MODEL_RUNNER=0 forces V1\n(it raises where V1 was removed).\n"
    )
    (tmp_path / "code.py").write_text(
        '"""VLLM_USE_V2_MODEL_RUNNER=0 raises on 1.1.0 (a docstring is not advice)."""\n'
        'ENV = {"VLLM_USE_V2_MODEL_RUNNER": "0"}\n'
        'os.environ["VLLM_OLD_KNOB"] = "1"\n'
    )
    found = advice.mentions(tmp_path, [tmp_path / "README.md", tmp_path / "code.py"])
    assert [(m.where, m.value, m.qualified) for m in found][4:] == [
        ("README.md:6", "0", True),  # the line after it says it raises
        ("code.py:2", "0", False),
        ("code.py:3", "1", False),
    ]
    assert [(m.where, m.var, m.value) for m in found][:2] == [
        ("README.md:1", "VLLM_USE_V2_MODEL_RUNNER", "0"),
        ("README.md:2", "VLLM_USE_V2_MODEL_RUNNER", "1"),
    ]
    assert advice.todo(old, new, [], found, advice.SuiteUse(), []) == [
        'code.py:3: VLLM_OLD_KNOB was removed in 1.1.0: "Use --new-knob instead."',
        'README.md:3: VLLM_OLD_KNOB was removed in 1.1.0: "Use --new-knob instead."',
        'README.md:1, code.py:2: VLLM_USE_V2_MODEL_RUNNER=0 raises in 1.1.0: "VLLM_USE_V2_MODEL_RUNNER={value} is no '
        'longer supported." (vllm/platforms/interface.py:6)',
    ]


def test_the_suites_own_assumptions(trees):
    _, _, old, new = trees
    suite = advice.SuiteUse(
        block_size=(16, "specgate/run/scenarios.py"),
        counters=(
            ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_accepted_tokens"),
            "specgate/figures/acceptance.py",
        ),
        package_mentions={"arctic_inference": ("specgate/engines/host.py:163",)},
    )
    lines = advice.todo(old, new, [], [], suite, [])
    assert lines[0].startswith(
        "specgate/run/scenarios.py: sizes KV caches by blocks of 16 tokens; "
        "1.1.0's CacheConfig.DEFAULT_BLOCK_SIZE is 64"
    )
    assert (
        lines[1]
        == "specgate/figures/acceptance.py: reads vllm:spec_decode_num_accepted_tokens, which 1.1.0 no longer names"
    )
    assert lines[2].startswith("specgate/engines/host.py:163: names arctic_inference, which 1.1.0 no longer needs")
    same = advice.SuiteUse(block_size=(64, "x"), counters=(("vllm:spec_decode_num_drafts",), "y"))
    assert advice.todo(old, new, [], [], same, []) == []


def test_internals_the_new_release_lost(trees, monkeypatch):
    old_root, new_root, _, _ = trees
    monkeypatch.setattr(
        vllm_compat,
        "INTERNALS",
        (
            vllm_compat.Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward", "V1: one forward"),
            vllm_compat.Internal(
                "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample",
                "V2: the kernels' entry",
                params=("draft_logits",),
            ),
            vllm_compat.Internal("vllm.v1.worker.gpu.model_runner:GPUModelRunner", "V2's runner"),
            # as the contract suite judges them: these skip on the new release, foreseen by their entries
            vllm_compat.Internal(
                "vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward", "V1 timer", model_runner="v1"
            ),
            vllm_compat.Internal("vllm.v1.sample.rejection_sampler:rejection_sample", "V1", optional="gone in 1.1"),
        ),
    )
    lines = advice.broken_internals(old_root, new_root)
    assert lines[0] == (
        "vllm.v1.worker.gpu_model_runner is gone, which 1 entries reach: "
        "GPUModelRunner._model_forward (V1: one forward)"
    )
    assert lines[1] == (
        "1 Model Runner V1's entries (vllm.v1.worker.gpu_model_runner gone: 1) and 1 optional entries "
        "(vllm.v1.sample.rejection_sampler gone: 1) skip on vllm 1.1.0 (source), as the entries foresee: "
        "nothing to do"
    )
    assert lines[2].startswith(
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils:rejection_sample (V2: the kernels' entry): "
    )
    assert "takes no parameter(s) ['draft_logits']" in lines[2]
    assert len(lines) == 3  # V2's runner is in both
