"""Which speculator Model Runner V2 builds per method, from both shapes vLLM has used: an if/elif dispatch
whose conditions go through SpeculativeConfig's helpers (0.32-0.33), and a method -> config registry whose
subclasses are the checkpoint's variants (0.34)."""

from __future__ import annotations

from specgate.release.vllm_speculators import speculators
from specgate.release.vllm_tree import Tree

from .vllm_trees import pair


def test_the_speculators_of_a_dispatch_and_of_a_registry(tmp_path):
    old, new = pair(tmp_path)
    built, why = speculators(Tree(old))
    assert why == "" and built["dflash"] == ("DFlashSpeculator", "BigDFlashSpeculator")  # the unconditional one first
    assert built["mtp"] == built["eagle"] == ("EagleSpeculator",)  # through SpeculativeConfig.use_eagle()
    assert "suffix" not in built and "dspark" not in built
    built, _ = speculators(Tree(new))
    assert built["suffix"] == ("SuffixSpeculator",)
    # a subclass with its own speculator and the same base_method is a variant; DSpark has a method of its own
    assert built["dflash"] == ("DFlashSpeculator", "BigDFlashSpeculator") and built["dspark"] == ("DSparkSpeculator",)
