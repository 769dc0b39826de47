"""How each vLLM builds the speculators the GPU profiles name, read from its source: one n-gram engine
for `ngram` and `ngram_gpu` on Model Runner V2, and the profile's DSpark checkpoint as a Qwen3 DSpark
draft. vLLM moved both between releases: until 0.33 `config/speculative.py` and
`v1/worker/gpu/spec_decode/__init__.py` decide them in if/elif chains; from 0.34 a config class per
method does (`spec_decode/speculator_config.py`'s `_CONFIG_BY_METHOD`, `spec_decode/<method>/config.py`).
Each test finds which layout the release has and follows it; one it recognises in neither fails, naming
what to read."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from specgate import vllm_compat
from specgate.vllm_compat.releases import version_key

from .sources import function, klass, vllm_root, where

SPEC_DECODE = "vllm.v1.worker.gpu.spec_decode"
REGISTRY = f"{SPEC_DECODE}.speculator_config"  # 0.34 on: the config class of each method


def _config_by_method(source) -> dict[str, str] | None:
    """method -> qualified name of its SpeculatorConfig class (speculator_config.py's `_CONFIG_BY_METHOD`,
    0.34 on); None where the release decides methods elsewhere."""
    path = vllm_root(source).joinpath(*REGISTRY.split(".")).with_suffix(".py")
    if not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {
        t.id: n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in tree.body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) else None)
        )
        if isinstance(target, ast.Name) and target.id == "_CONFIG_BY_METHOD" and isinstance(node.value, ast.Dict):
            helper = ast.unparse(function(source, REGISTRY, "_builtin"))
            assert "_PKG" in helper, f"{where(source)}: {REGISTRY}._builtin changed: {helper}"
            package = constants.get("_PKG", SPEC_DECODE)
            out = {}
            for key, value in zip(node.value.keys, node.value.values):
                # "ngram": _builtin("ngram.config", "NgramSpeculatorConfig"): {_PKG}.ngram.config.NgramSpeculatorConfig
                assert isinstance(value, ast.Call) and ast.unparse(value.func) == "_builtin", ast.unparse(value)
                module, name = (a.value for a in value.args)
                out[key.value] = f"{package}.{module}.{name}"
            return out
    return None


def _class_attribute(source, qualname: str, attribute: str):
    """The value (AST) a class assigns to `attribute`, following its bases within the same module."""
    module, _, name = qualname.rpartition(".")
    node = klass(source, module, name)
    for item in node.body:
        targets = [item.target] if isinstance(item, ast.AnnAssign) else getattr(item, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == attribute for t in targets):
            return item.value
    for base in node.bases:
        if isinstance(base, ast.Name):
            try:
                return _class_attribute(source, f"{module}.{base.id}", attribute)
            except AssertionError:
                continue
    return None


def test_ngram_and_ngram_gpu_are_one_speculator_on_model_runner_v2(source):
    """The GPU profiles run one n-gram engine: on V2 both method names build NgramGPUSpeculator. Until
    0.33 suffix is what V2 leaves to the V1 runner (so its speedups compare across runners); 0.34 has no
    V1 to leave anything to."""
    configs = _config_by_method(source)
    if configs is not None:  # 0.34 on: each method's config names its speculator class
        built = {}
        for method in ("ngram", "ngram_gpu"):
            assert method in configs, f"{where(source)}: {REGISTRY} builds no speculator for {method!r}"
            value = _class_attribute(source, configs[method], "speculator_class")
            assert value is not None, f"{where(source)}: {configs[method]} names no speculator_class"
            built[method] = ast.literal_eval(value)
        assert set(built.values()) == {f"{SPEC_DECODE}.ngram.speculator.NgramGPUSpeculator"}, (
            f"{where(source)}: ngram and ngram_gpu build {built}"
        )
        assert vllm_compat.v1_gone(source), f"{where(source)}: has V1, but no list of the methods V2 leaves to it"
        return
    init = vllm_root(source).joinpath(*SPEC_DECODE.split("."), "__init__.py")
    if not init.is_file() or "NgramGPUSpeculator" not in init.read_text(encoding="utf-8"):
        version, _ = vllm_compat.identify(source)
        if version and version_key(version) < (0, 32, 0):
            pytest.skip(f"{where(source)}: Model Runner V2's n-gram speculator came with 0.32")
        pytest.fail(
            f"{where(source)}: neither {REGISTRY}'s _CONFIG_BY_METHOD nor {init} says which speculator ngram "
            "builds on V2: find where this release decides it and follow it here"
        )
    use_ngram = ast.unparse(function(source, "vllm.config.speculative", "SpeculativeConfig.use_ngram"))
    assert "('ngram', 'ngram_gpu')" in use_ngram, f"{where(source)}: use_ngram changed: {use_ngram}"
    branch = init.read_text(encoding="utf-8").split("speculative_config.use_ngram()", 1)[-1].split("elif", 1)[0]
    assert "NgramGPUSpeculator(" in branch, f"{where(source)}: V2 no longer builds NgramGPUSpeculator for use_ngram()"
    v2_lacks = ast.unparse(function(source, "vllm.config.vllm", "VllmConfig._get_v2_model_runner_unsupported_features"))
    assert "'suffix'" in v2_lacks and "'ngram'" not in v2_lacks, f"{where(source)}: the methods V2 leaves to V1 changed"


# The DSpark checkpoints the GPU profiles use, with the architecture and model_type their config.json
# declares: checked against this vLLM's own mapping before a runner downloads 5 GB to find out.
DSPARK_CHECKPOINTS = {"deepseek-ai/dspark_qwen3_8b_block7": (["DSparkDraftModel"], "qwen3")}
DEEPSEEK_V4 = "deepseek_v4"  # what a draft taken for DeepSeek-V4's DSpark becomes


def _evaluate(test: ast.expr, scope: dict) -> bool:
    return bool(eval(compile(ast.Expression(test), "speculative.py", "eval"), scope))  # noqa: S307 - vLLM's own condition


def _dspark_by_chain(text: str, architectures: list[str], model_type: str) -> str:
    """Until 0.33: what SpeculativeConfig's if/elif chain (config/speculative.py) makes of a DSpark draft
    declaring `architectures` / `model_type` next to a Qwen3 target. DEEPSEEK_V4 when it takes the draft
    for DeepSeek-V4's DSpark, else the architecture it keeps or sets."""
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
        if isinstance(n, ast.If) and "self.method == 'dspark'" in ast.unparse(n.test) and DEEPSEEK_V4 in ast.unparse(n)
    )
    draft = NS(architectures=architectures, hf_config=NS(model_type=model_type))
    scope = {
        **names,
        "self": NS(method="dspark", draft_model_config=draft, target_model_config=NS(hf_config=NS(model_type="qwen3"))),
    }
    node = head
    while True:
        if _evaluate(node.test, scope):
            body = "\n".join(ast.unparse(b) for b in node.body)
            break
        if len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
            node = node.orelse[0]
            continue
        body = "\n".join(ast.unparse(b) for b in node.orelse)
        break
    if DEEPSEEK_V4 in body:
        return DEEPSEEK_V4
    set_to = [
        n.value
        for n in ast.walk(ast.parse(body or "pass"))
        if isinstance(n, ast.Assign)
        and ast.unparse(n.targets[0]).endswith("architectures")
        and isinstance(n.value, ast.List)
    ]
    return set_to[0].elts[0].value if set_to else architectures[0]


def _dspark_by_config_class(source, architectures: list[str], model_type: str, read=None) -> str:
    """From 0.34: SpeculativeConfig.hf_config_override renames the draft's architecture (config/
    speculative.py), the model registry maps it to a model class, and DSparkSpeculatorConfig.
    adapt_draft_model_config (spec_decode/dspark/config.py) takes a draft whose model class declares no
    `speculator_config_class` for DeepSeek-V4's DSpark. DEEPSEEK_V4 then, else the architecture.
    `read(module path) -> text` reads a model module (a test hands in an edited one)."""
    read = read or (lambda path: path.read_text(encoding="utf-8"))
    override = function(source, "vllm.config.speculative", "SpeculativeConfig.hf_config_override")
    hf_config = NS(model_type=model_type, architectures=architectures)
    arch = architectures[0]
    for node in override.body:
        if isinstance(node, ast.If) and "initial_architecture" in ast.unparse(node.test):
            scope = {"initial_architecture": arch, "hf_config": hf_config, "getattr": getattr}
            if "DSpark" in ast.unparse(node.test) and _evaluate(node.test, scope):
                renamed = re.search(r"'architectures': \['(\w+)'\]", "\n".join(ast.unparse(b) for b in node.body))
                arch = renamed.group(1) if renamed else arch
                break
    adapt = ast.unparse(
        function(source, f"{SPEC_DECODE}.dspark.config", "DSparkSpeculatorConfig.adapt_draft_model_config")
    )
    assert "speculator_config_class is None" in adapt and DEEPSEEK_V4 in adapt, (
        f"{where(source)}: DSparkSpeculatorConfig.adapt_draft_model_config no longer decides DeepSeek-V4's DSpark "
        f"by the model's speculator_config_class: {adapt[:300]}"
    )
    registry = vllm_root(source).joinpath("vllm", "model_executor", "models", "registry.py").read_text(encoding="utf-8")
    entry = re.search(rf'"{arch}": \(\s*"([\w.]+)",\s*"(\w+)"', registry)
    assert entry, f"{where(source)}: {arch} is not in vLLM's model registry"
    if "." in entry.group(1):  # a package of its own (vllm.models.deepseek_v4: per-platform classes), not followed
        return arch
    module = vllm_root(source).joinpath("vllm", "model_executor", "models", f"{entry.group(1)}.py")
    classes = {n.name: n for n in ast.parse(read(module)).body if isinstance(n, ast.ClassDef)}
    assert entry.group(2) in classes, f"{where(source)}: {module} defines no {entry.group(2)}"
    declares = any(
        isinstance(item, (ast.Assign, ast.AnnAssign))
        and "speculator_config_class" in ast.unparse(item).split("=")[0]
        and ast.unparse(item.value) != "None"
        for item in classes[entry.group(2)].body
    )
    return arch if declares else DEEPSEEK_V4


def _dspark_profiles():
    from specgate.profile import find_profile, load_profile

    root = Path(__file__).resolve().parents[2]
    for profile in sorted((root / "fixtures" / "profiles").glob("*.toml")):
        for m in load_profile(find_profile(profile.stem, root), root).methods.values():
            if m.kind == "dspark":
                assert m.draft_model in DSPARK_CHECKPOINTS, (
                    f"{profile.name}: method '{m.name}' uses {m.draft_model}; record its config.json architectures "
                    "and model_type in DSPARK_CHECKPOINTS so this test checks it against vLLM's DSpark mapping"
                )
                yield profile, m


def test_the_dspark_checkpoint_boots_as_a_qwen3_dspark_draft(source):
    """vLLM takes a DSpark draft it does not recognise as a Qwen3 (or other self-contained) draft for
    DeepSeek-V4's DSpark; the profile's Qwen3 head must be one it maps to Qwen3DSparkModel."""
    root = vllm_root(source)
    registry = root.joinpath("vllm", "model_executor", "models", "registry.py").read_text(encoding="utf-8")
    by_class = root.joinpath(*SPEC_DECODE.split("."), "dspark", "config.py").is_file()
    if by_class:
        # the check can say DeepSeek-V4: the same model class without its speculator_config_class
        def without_declaration(path):
            return re.sub(r"\n\s*speculator_config_class = \w+", "\n", path.read_text(encoding="utf-8"))

        qwen3 = DSPARK_CHECKPOINTS["deepseek-ai/dspark_qwen3_8b_block7"]
        assert _dspark_by_config_class(source, *qwen3, read=without_declaration) == DEEPSEEK_V4, (
            f"{where(source)}: this test no longer sees how vLLM maps a Qwen3 DSpark draft (hf_config_override, the "
            "registry, DSparkSpeculatorConfig.adapt_draft_model_config): follow where it moved"
        )
        config = root.joinpath(*SPEC_DECODE.split("."), "dspark", "config.py").read_text(encoding="utf-8")
    else:
        text = root.joinpath("vllm", "config", "speculative.py").read_text(encoding="utf-8")
        assert _dspark_by_chain(text, ["Qwen3DSparkSpeculator"], "qwen3") == DEEPSEEK_V4  # what issue 37 saw
    checked = 0
    for profile, m in _dspark_profiles():
        declared = DSPARK_CHECKPOINTS[m.draft_model]
        arch = _dspark_by_config_class(source, *declared) if by_class else _dspark_by_chain(text, *declared)
        assert arch != DEEPSEEK_V4, (
            f"{where(source)}: {profile.name}'s {m.draft_model} would boot as DeepSeek-V4's DSpark"
        )
        assert f'"{arch}": ("qwen3_dspark"' in registry, (
            f"{where(source)}: {arch} is no Qwen3 DSpark model in the registry"
        )
        named_in = config if by_class else text
        assert m.draft_model in named_in, f"{where(source)}: vLLM's DSpark config no longer names {m.draft_model}"
        checked += 1
    assert checked, "no profile has a DSpark method: this test checks nothing; remove it with the method"
