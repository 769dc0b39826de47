"""Every vLLM internal specgate touches exists with the signature it needs: in the installed vLLM,
or, with SPECGATE_VLLM_SOURCE=DIR, in an unpacked vLLM tree read without importing it (the CUDA
wheel's Python files: `pip download --no-deps vllm==X && unzip -q vllm-*.whl '*.py' -d DIR`).

A vLLM upgrade that renames one fails here, naming it, before any engine time is spent.
"""

import importlib.util
import os
from pathlib import Path

import pytest

from specgate import vllm_compat
from specgate.acceptance import COUNTER_NAMES, PER_POSITION

SOURCE = Path(os.environ["SPECGATE_VLLM_SOURCE"]) if os.environ.get("SPECGATE_VLLM_SOURCE") else None


@pytest.fixture(autouse=True, scope="module")
def _vllm():
    if SOURCE is None and importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed; set SPECGATE_VLLM_SOURCE to check an unpacked vLLM tree")


def where() -> str:
    return str(SOURCE) if SOURCE else vllm_compat.release()


@pytest.mark.parametrize("internal", vllm_compat.INTERNALS, ids=[i.name for i in vllm_compat.INTERNALS])
def test_vllm_offers_what_specgate_uses(internal):
    found = vllm_compat.problems(internal, SOURCE)
    if found and internal.instead:
        instead = [p for name in internal.instead for p in vllm_compat.problems(vllm_compat.Internal(name, ""), SOURCE)]
        assert not instead, f"{where()}: neither {internal.name} ({found[0]}) nor what replaces it: {instead}"
        return
    assert not found, (
        f"{where()}: vLLM internal {internal.name} ({internal.need}; checked on {', '.join(internal.checked)}) "
        f"changed: {'; '.join(found)}. Update specgate/vllm_compat.py for this release."
    )


def test_the_spec_decode_counters_keep_their_names():
    root = SOURCE or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent
    text = (root / vllm_compat.METRICS_SOURCE).read_text(encoding="utf-8")
    for name in [*COUNTER_NAMES, PER_POSITION]:
        assert f'"{name}"' in text, f"{where()}: counter {name} is gone from {vllm_compat.METRICS_SOURCE}"


def test_the_methods_this_vllm_offers_are_read_from_it():
    if SOURCE is not None:
        text = (SOURCE / "vllm" / "config" / "speculative.py").read_text(encoding="utf-8")
        offered = vllm_compat._literal_from_source(text, "SpeculativeMethod")
    else:
        offered = vllm_compat.speculative_methods()
    assert {"ngram", "draft_model", "eagle", "eagle3"} <= set(offered), offered


def _vllm_root() -> Path:
    """The directory holding the `vllm` package: the unpacked tree, or the installed vLLM's."""
    return SOURCE or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent


def _class(module: str, name: str):
    import ast

    path = _vllm_root().joinpath(*module.split(".")).with_suffix(".py")
    found = [n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"{where()}: {path} defines no class {name}"
    return found[0]


def test_the_layers_split_over_tensor_parallel_ranks_along_the_attribute_specgate_reads():
    """vllm_compat.parameter_shard counts a parameter once per rank when its layer's weight loader
    narrows the checkpoint tensor along the parameter's output_dim / input_dim, and once in all for
    ReplicatedLinear, whose loader copies the whole tensor."""
    import ast

    modules = {i.name.split(":")[1]: i.name.split(":")[0] for i in vllm_compat.INTERNALS if "model_executor.layers" in i.name}
    for layer, along in {**vllm_compat.TP_SPLIT_ALONG, **{k: "" for k in vllm_compat.TP_WHOLE}}.items():
        cls = _class(modules[layer], layer)
        loader = next((ast.unparse(n) for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "weight_loader"), "")
        assert loader, f"{where()}: {layer} has no weight_loader of its own"
        if along:
            assert f"getattr(param, '{along}'" in loader and ".narrow(" in loader, (
                f"{where()}: {layer}.weight_loader no longer narrows along {along}: update vllm_compat.TP_SPLIT_ALONG")
        else:
            assert ".narrow(" not in loader, f"{where()}: {layer}.weight_loader now narrows: update vllm_compat.TP_WHOLE"
    row = ast.unparse(_class(modules["RowParallelLinear"], "RowParallelLinear"))
    assert "self.tp_rank" in row and "self.tp_size" in row and "input_size_per_partition" in row
