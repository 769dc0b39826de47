"""What one vLLM release says about speculative decoding, read from its unpacked sources (a Tree): the
methods it offers, SpeculativeConfig's keys (default, deprecation as vLLM marks it), the engine
arguments and their owning configs' constants, the model runners, the spec-decode metric names, the
rejection sampler's signatures, the speculator Model Runner V2 builds per method, the packages a method
needs, and the environment variables it knows, has removed or refuses.

Where each fact lives is written below with the release it was found in; when a release moves one,
`Facts.unread` names what could not be read, and the release-day report prints it rather than guessing.

Neighbours: vllm_tree (the ast reading) below; changes compares two Facts; advice and release_day above.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from specgate.release.vllm_speculators import speculators
from specgate.release.vllm_tree import (
    Field,
    Param,
    Tree,
    class_constants,
    fields,
    raised_message,
    signature,
    strings,
    text_of,
)
from specgate.vllm_compat import literal_from_source

SPECULATIVE = "vllm/config/speculative.py"  # SpeculativeMethod, RejectionSampleMethod, SpeculativeConfig (0.32-0.34)
ENGINE_ARGS = "vllm/engine/arg_utils.py"  # EngineArgs and its *_DEPRECATION_MESSAGE constants (0.34)
CONFIGS = "vllm/config"  # the config classes EngineArgs' defaults point at (CacheConfig.DEFAULT_BLOCK_SIZE)
VLLM_CONFIG = "vllm/config/vllm.py"  # VllmConfig: use_v2_model_runner, _get_*model_runner_unsupported_features
V1_RUNNER = "vllm/v1/worker/gpu_model_runner.py"  # Model Runner V1 (removed in 0.34)
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"  # Model Runner V2
CPU_WORKER = "vllm/v1/worker/cpu_worker.py"
CPU_PLATFORM = "vllm/platforms/cpu.py"
ENVS = "vllm/envs.py"  # environment_variables, removed_environment_variables (0.34)
ENV_CHECKS = "vllm/platforms"  # where a variable's value is refused (interface.py 0.34: VLLM_USE_V2_MODEL_RUNNER)
METRIC_PREFIX = "vllm:spec_decode"  # the counters (vllm/v1/spec_decode/metrics.py 0.32-0.34)
# The rejection sampler: V2's (what CUDA users run) and V1's (gone in 0.34).
KERNELS = (
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler.py",
    "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py",
    "vllm/v1/sample/rejection_sampler.py",
)
# Where a method's extra package is checked (`if not has_arctic_inference(): raise`, speculative.py 0.33).
REQUIREMENT_PLACES = (SPECULATIVE, "vllm/v1/spec_decode", "vllm/v1/worker/gpu/spec_decode")
UNSUPPORTED = re.compile(r"_get_(\w*?)_?model_runner_unsupported_features")


@dataclass(frozen=True)
class Refusal:
    """A value of an environment variable vLLM refuses: `raise` under `if <var> <op> <values>`."""

    var: str
    op: str  # '!=', '==', 'in', 'not in', or '' when the condition is not that simple
    values: tuple[str, ...]
    message: str
    where: str

    def refuses(self, value: str) -> bool | None:
        """Whether setting the variable to `value` raises (None: the condition could not be read)."""
        ops = {"!=": value not in self.values, "==": value in self.values}
        ops |= {"in": value in self.values, "not in": value not in self.values}
        return ops.get(self.op)


@dataclass(frozen=True)
class Runners:
    v1: bool  # Model Runner V1's GPU runner is in the tree
    v2: bool
    default: str  # which the GPU worker builds when nothing is forced
    unsupported: dict[str, tuple[tuple[str, str], ...]]  # runner key -> (what it lacks, under which condition)
    cpu_runners: tuple[str, ...]  # the modules the CPU worker builds its runner from
    cpu_refusals: tuple[str, ...]  # what the CPU platform raises about Triton

    def v2_unsupported(self) -> tuple[tuple[str, str], ...] | None:
        """What Model Runner V2 does not support: its own list, or the GPU runner's once V1 is gone."""
        if "v2" in self.unsupported:
            return self.unsupported["v2"]
        return self.unsupported.get("") if not self.v1 else None


@dataclass(frozen=True)
class Facts:
    release: str
    methods: tuple[str, ...] = ()
    rules: tuple[str, ...] = ()  # RejectionSampleMethod
    spec_keys: dict[str, Field] = field(default_factory=dict)
    deprecated: dict[str, str] = field(default_factory=dict)  # key -> vLLM's words
    engine_args: dict[str, Field] = field(default_factory=dict)  # defaults resolved through the config classes
    engine_deprecated: dict[str, str] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)  # engine argument -> the config class it lives in
    constants: dict[str, str] = field(default_factory=dict)  # Class.NAME of the configs engine args live in
    runners: Runners | None = None
    metrics: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> files
    kernels: dict[str, tuple[Param, ...]] = field(default_factory=dict)  # file:function -> parameters
    kernel_types: dict[str, str] = field(default_factory=dict)  # a name the kernels' files import -> its module
    speculators: dict[str, tuple[str, ...]] = field(default_factory=dict)  # method -> speculator (condition)
    requirements: dict[str, str] = field(default_factory=dict)  # package -> where and vLLM's message
    env_vars: frozenset[str] = frozenset()
    env_removed: dict[str, str] = field(default_factory=dict)  # var -> vLLM's hint
    refusals: tuple[Refusal, ...] = ()
    unread: tuple[str, ...] = ()  # what could not be read from this tree, and why


def read(tree: Tree) -> Facts:
    """Every fact of one release (a section vLLM moved is named in `unread`, not guessed)."""
    unread: list[str] = []
    tree.module(SPECULATIVE)  # a file that does not parse is a damaged tree (TreeError), said before anything else
    spec_text = tree.text(SPECULATIVE) or ""
    methods = tuple(literal_from_source(spec_text, "SpeculativeMethod"))
    if not methods:
        unread.append(f"methods: no SpeculativeMethod Literal in {SPECULATIVE}")
    spec_keys = (
        fields(tree.classes(SPECULATIVE)["SpeculativeConfig"])
        if "SpeculativeConfig" in tree.classes(SPECULATIVE)
        else {}
    )
    if not spec_keys:
        unread.append(f"config keys: no class SpeculativeConfig in {SPECULATIVE}")
    engine_args, engine_deprecated, owners, constants = _engine_args(tree, unread)
    found_speculators, why = speculators(tree)
    if why:
        unread.append(f"speculators: {why}")
    return Facts(
        release=tree.release,
        methods=methods,
        rules=tuple(literal_from_source(spec_text, "RejectionSampleMethod")),
        spec_keys=spec_keys,
        deprecated=_deprecated(tree, spec_keys),
        engine_args=engine_args,
        engine_deprecated=engine_deprecated,
        owners=owners,
        constants=constants,
        runners=_runners(tree, unread),
        metrics=_metrics(tree, unread),
        kernels=_kernels(tree),
        kernel_types={
            alias.asname or alias.name: node.module
            for rel in KERNELS
            for node in ast.walk(tree.module(rel) or ast.Module(body=[], type_ignores=[]))
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        },
        speculators=found_speculators,
        requirements=_requirements(tree),
        env_vars=_env_vars(tree, unread),
        env_removed=_env_removed(tree),
        refusals=_refusals(tree),
        unread=tuple(unread),
    )


def _deprecated(tree: Tree, keys: dict[str, Field]) -> dict[str, str]:
    """Keys vLLM marks deprecated: a docstring that says so (0.34: "Deprecated and has no effect"), or a
    warning in speculative.py that names the key ("parallel_drafting is deprecated ...")."""
    out = {name: _sentence(f.doc) for name, f in keys.items() if re.search(r"\bdeprecated\b", f.doc, re.I)}
    module = tree.module(SPECULATIVE)
    for text, _ in strings(module) if module else ():
        for name in keys:
            if name not in out and re.search(rf"\b{name}`? (is|are) deprecated\b", text):
                out[name] = _sentence(" ".join(text.split()))
    return out


def _sentence(text: str) -> str:
    m = re.match(r"(.+?\.)(\s|$)", text)
    return m.group(1) if m else text


def _engine_args(tree: Tree, unread: list[str]):
    """EngineArgs' fields with defaults resolved (`CacheConfig.block_size` -> CacheConfig's default), the
    deprecation messages (`--flag is deprecated ...` constants), and the owning config classes' constants."""
    args = fields(tree.classes(ENGINE_ARGS)["EngineArgs"]) if "EngineArgs" in tree.classes(ENGINE_ARGS) else {}
    if not args:
        unread.append(f"engine arguments: no class EngineArgs in {ENGINE_ARGS}")
        return {}, {}, {}, {}
    owners_named = {f.default.partition(".")[0] for f in args.values() if "." in f.default}
    configs = {  # only the config modules that define a class EngineArgs' defaults name (parsing is the cost)
        name: cls
        for owner in owners_named
        if owner.isidentifier()
        for rel in tree.grep(f"class {owner}", under=CONFIGS)
        for name, cls in tree.classes(rel).items()
    }
    resolved, owners, constants, owned = {}, {}, {}, {}
    for name, f in args.items():
        owner, _, attr = f.default.partition(".")
        if owner in configs and attr.isidentifier():
            if owner not in owned:
                owned[owner] = fields(configs[owner])
                constants |= {f"{owner}.{k}": v for k, v in class_constants(configs[owner]).items() if k[0] != "_"}
            if attr in owned[owner]:
                f = Field(name, f.annotation, owned[owner][attr].default, owned[owner][attr].doc, f.line)
            owners[name] = owner
        resolved[name] = f
    deprecated = {}
    module = tree.module(ENGINE_ARGS)
    for text, _ in strings(module):
        for flag in re.findall(r"--([a-z0-9-]+) is deprecated", text):
            deprecated[flag.replace("-", "_")] = " ".join(text.split())
    return resolved, deprecated, owners, constants


def _runners(tree: Tree, unread: list[str]) -> Runners:
    config = tree.classes(VLLM_CONFIG).get("VllmConfig")
    unsupported: dict[str, tuple[tuple[str, str], ...]] = {}
    default = ""
    for item in config.body if config else ():
        if isinstance(item, ast.FunctionDef) and (m := UNSUPPORTED.fullmatch(item.name)):
            unsupported[m.group(1)] = _appended(item)
        if isinstance(item, ast.FunctionDef) and item.name == "use_v2_model_runner":
            last = item.body[-1]
            if isinstance(last, ast.Return) and isinstance(last.value, ast.Constant):
                default = "V2 (V1 where V2 lacks a feature)" if last.value.value else "V1"
    v1, v2 = tree.has(V1_RUNNER), tree.has(V2_RUNNER)
    if v2 and not v1:
        default = "V2 (the only GPU runner)"
    if not default:
        unread.append(
            f"model runners: the default runner ({VLLM_CONFIG} has no use_v2_model_runner ending in a constant)"
        )
    cpu = tree.module(CPU_WORKER)
    cpu_runners = sorted(
        {
            n.module
            for n in ast.walk(cpu)
            if isinstance(n, ast.ImportFrom) and n.module and "model_runner" in n.module.rsplit(".", 1)[-1]
        }
        if cpu
        else set()
    )
    platform = tree.module(CPU_PLATFORM)
    refusals = tuple(
        m
        for n in (ast.walk(platform) if platform else ())
        if isinstance(n, ast.Raise) and re.search("triton", m := raised_message(n), re.I)
    )
    return Runners(v1, v2, default, unsupported, tuple(cpu_runners), refusals)


def _appended(fn: ast.FunctionDef) -> tuple[tuple[str, str], ...]:
    """`unsupported.append(X)` calls of a method, each with the conditions of the `if`s around it."""
    out = []

    def visit(nodes, conditions):
        for node in nodes:
            if isinstance(node, ast.If):
                visit(node.body, [*conditions, ast.unparse(node.test)])
                visit(node.orelse, [*conditions, f"not ({ast.unparse(node.test)})"])
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value
                if isinstance(call.func, ast.Attribute) and call.func.attr == "append" and call.args:
                    what = text_of(call.args[0]) or ast.unparse(call.args[0])
                    out.append((" ".join(what.split()), " and ".join(conditions)))
            elif hasattr(node, "body") and isinstance(node.body, list):
                visit(node.body, conditions)

    visit(fn.body, [])
    return tuple(out)


def _metrics(tree: Tree, unread: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, set[str]] = {}
    for rel in tree.grep(METRIC_PREFIX):
        for text, _ in strings(tree.module(rel)):
            for name in re.findall(rf"{METRIC_PREFIX}_\w*[a-z]", text):
                out.setdefault(name, set()).add(rel)
    if not out:
        unread.append(f"metrics: no string starting {METRIC_PREFIX!r} anywhere in the tree")
    return {name: tuple(sorted(files)) for name, files in sorted(out.items())}


def _kernels(tree: Tree) -> dict[str, tuple[Param, ...]]:
    return {f"{rel}:{name}": signature(fn) for rel in KERNELS for name, fn in tree.functions(rel).items()}


def _requirements(tree: Tree) -> dict[str, str]:
    """`if not has_<package>(): raise ...` in the spec-decode code: the packages a method needs."""
    out = {}
    for place in REQUIREMENT_PLACES:
        for rel in [place] if place.endswith(".py") else tree.grep("if not has_", under=place):
            module = tree.module(rel)
            for node in ast.walk(module) if module else ():
                test = node.test if isinstance(node, ast.If) else None
                if (
                    isinstance(test, ast.UnaryOp)
                    and isinstance(test.op, ast.Not)
                    and isinstance(test.operand, ast.Call)
                    and isinstance(test.operand.func, ast.Name)
                    and test.operand.func.id.startswith("has_")
                ):
                    raises = [raised_message(r) for r in node.body if isinstance(r, ast.Raise)]
                    if raises:
                        out[test.operand.func.id[4:]] = f"{rel}:{node.lineno}: {raises[0]}"
    return out


def _env_vars(tree: Tree, unread: list[str]) -> frozenset[str]:
    value = tree.assigned(ENVS, "environment_variables")
    if not isinstance(value, ast.Dict):
        unread.append(f"environment variables: no environment_variables dict in {ENVS}")
        return frozenset()
    return frozenset(k.value for k in value.keys if isinstance(k, ast.Constant))


def _env_removed(tree: Tree) -> dict[str, str]:
    value = tree.assigned(ENVS, "removed_environment_variables")
    if not isinstance(value, ast.Dict):
        return {}
    return {
        k.value: " ".join(text_of(v).split()) for k, v in zip(value.keys, value.values) if isinstance(k, ast.Constant)
    }


def _refusals(tree: Tree) -> tuple[Refusal, ...]:
    """`if env == "VLLM_X": ... if value != "1": raise ...` (platforms/interface.py 0.34)."""
    out = []
    for rel in tree.grep('"VLLM_', under=ENV_CHECKS):
        for node in ast.walk(tree.module(rel)):
            if not (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)):
                continue
            named = [
                c.value
                for c in node.test.comparators
                if isinstance(c, ast.Constant) and str(c.value).startswith("VLLM_")
            ]
            for var in named:
                for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                    if isinstance(inner, ast.If) and any(isinstance(r, ast.Raise) for r in inner.body):
                        raise_ = next(r for r in inner.body if isinstance(r, ast.Raise))
                        op, values = _simple_test(inner.test)
                        out.append(Refusal(var, op, values, raised_message(raise_), f"{rel}:{raise_.lineno}"))
    return tuple(out)


def _simple_test(test: ast.expr) -> tuple[str, tuple[str, ...]]:
    ops = {ast.NotEq: "!=", ast.Eq: "==", ast.In: "in", ast.NotIn: "not in"}
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in ops:
        right = test.comparators[0]
        items = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
        if all(isinstance(i, ast.Constant) for i in items):
            return ops[type(test.ops[0])], tuple(str(i.value) for i in items)
    return "", ()
