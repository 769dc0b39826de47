"""What one release says about speculative decoding, read from a small synthetic tree of each shape
(0.33's: two runners and a dispatch; 0.34's: V2 only, a registry, a refused variable)."""

from __future__ import annotations

from specgate.release import vllm_facts
from specgate.release.vllm_tree import Tree

from .vllm_trees import NEW, pair, write


def read(path):
    return vllm_facts.read(Tree(path))


def test_the_old_shape(tmp_path):
    old = read(pair(tmp_path)[0])
    assert old.release == "1.0.0" and old.unread == ()
    assert set(old.methods) == {
        "ngram",
        "draft_model",
        "suffix",
        "custom_class",
        "eagle",
        "eagle3",
        "deepseek_mtp",
        "mtp",
    }
    assert old.rules == ("standard", "block") and old.deprecated == {}
    assert old.runners.v1 and old.runners.v2 and old.runners.default.startswith("V2")
    assert [what for what, _ in old.runners.v2_unsupported()] == [
        "speculative method '{self.speculative_config.method}'"
    ]
    assert old.requirements["arctic_inference"].endswith("Arctic Inference is required for suffix decoding.")
    assert old.engine_args["gpu_memory_utilization"].default == "0.92"  # through CacheConfig
    assert (
        old.constants == {"CacheConfig.DEFAULT_BLOCK_SIZE": "16"}
        and old.owners["num_gpu_blocks_override"] == "CacheConfig"
    )
    assert "vllm:spec_decode_num_accepted_tokens" in old.metrics
    assert "VLLM_USE_V2_MODEL_RUNNER" in old.env_vars and old.refusals == ()


def test_the_new_shape(tmp_path):
    new = read(pair(tmp_path)[1])
    assert new.deprecated["parallel_drafting"] == "Deprecated and has no effect."  # its docstring
    assert new.deprecated["suffix_decoding_max_spec_factor"].startswith("suffix_decoding_max_spec_factor is deprecated")
    assert not new.runners.v1 and new.runners.default == "V2 (the only GPU runner)"
    assert new.runners.v2_unsupported() == (
        ("pipeline parallelism with external_launcher", "self.parallel_config.pipeline_parallel_size > 1"),
    )
    assert new.runners.cpu_refusals == ("vLLM on x86 CPUs requires Triton (triton-cpu).",)
    assert new.engine_deprecated == {"swap_space": "--swap-space is deprecated and has no effect."}
    assert new.env_removed == {"VLLM_OLD_KNOB": "Use --new-knob instead."}
    (refusal,) = new.refusals
    assert refusal.var == "VLLM_USE_V2_MODEL_RUNNER" and refusal.where == "vllm/platforms/interface.py:6"
    assert refusal.refuses("0") and not refusal.refuses("1")
    assert new.kernel_types["DraftLogitsCache"] == "vllm.v1.worker.gpu.spec_decode.draft_logits"
    assert new.requirements == {}


def test_what_cannot_be_read_is_said_not_guessed(tmp_path):
    changes = {"vllm/config/speculative.py": "X = 1\n", "vllm/envs.py": "", "vllm/v1/spec_decode/metrics.py": ""}
    facts = read(write(tmp_path, "1.1.0", NEW, changes))
    assert facts.methods == () and facts.spec_keys == {}
    unread = "\n".join(facts.unread)
    for needle in (
        "no SpeculativeMethod Literal",
        "no class SpeculativeConfig",
        "no environment_variables dict",
        "no string starting 'vllm:spec_decode'",
    ):
        assert needle in unread


def test_a_tree_without_a_speculator_dispatch_says_so(tmp_path):
    tree = write(tmp_path, "1.0.0", changes={"vllm/v1/worker/gpu/spec_decode/__init__.py": None})
    assert read(tree).speculators == {} and "speculators: neither" in read(tree).unread[0]
