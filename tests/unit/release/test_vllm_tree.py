"""An unpacked vLLM tree read with ast: what is not a tree is refused in one paragraph, fields keep their
defaults and docstrings, signatures their annotations, strings read as a person reads them."""

from __future__ import annotations

import ast

import pytest

from specgate.release import vllm_tree
from specgate.release.vllm_tree import Tree, TreeError

from .vllm_trees import write


def test_a_directory_without_vllm_is_not_a_tree(tmp_path):
    with pytest.raises(TreeError, match=r"has no vllm/__init__\.py.*fetch it again"):
        Tree(tmp_path)


def test_a_tree_without_dist_info_has_no_release(tmp_path):
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    with pytest.raises(TreeError, match="no vllm-<release>.dist-info"):
        Tree(tmp_path)


def test_a_damaged_module_names_the_file_the_line_and_the_fix(tmp_path):
    tree = Tree(write(tmp_path, "1.0.0", changes={"vllm/envs.py": "environment_variables = {\n"}))
    assert tree.release == "1.0.0"
    with pytest.raises(TreeError, match=r"vLLM 1\.0\.0's vllm/envs\.py .* does not parse: .* line 1.*delete"):
        tree.module("vllm/envs.py")


def test_an_absent_module_is_none_not_an_error(tmp_path):
    tree = Tree(write(tmp_path, "1.0.0"))
    assert tree.module("vllm/nowhere.py") is None and tree.classes("vllm/nowhere.py") == {}


def test_fields_keep_defaults_and_docstrings_and_leave_out_classvars_and_init_false(tmp_path):
    tree = Tree(write(tmp_path, "1.0.0"))
    keys = vllm_tree.fields(tree.classes("vllm/config/speculative.py")["SpeculativeConfig"])
    assert keys["prompt_lookup_max"].default == "None"  # Field(default=None, ge=1)
    assert keys["parallel_drafting"].doc == "Enable parallel drafting."
    assert "custom" not in keys  # field(default=None, init=False)
    cache = tree.classes("vllm/config/cache.py")["CacheConfig"]
    assert "DEFAULT_BLOCK_SIZE" not in vllm_tree.fields(cache)
    assert vllm_tree.class_constants(cache) == {"DEFAULT_BLOCK_SIZE": "16"}


def test_signatures_and_strings_read_as_written():
    fn = ast.parse("def f(self, a: int, b: str | None = None, *, c=3): pass").body[0]
    assert [str(p) for p in vllm_tree.signature(fn)] == ["a: int", "b: str | None = None", "c = 3"]
    assert vllm_tree.signature(fn)[2].keyword_only
    raised = ast.parse('raise ValueError(f"X={value} is " "refused.")').body[0]
    assert vllm_tree.raised_message(raised) == "X={value} is refused."
