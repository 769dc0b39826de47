"""The model runner's side of vLLM, called inside vLLM's worker processes through `collective_rpc`:
which runner (V1 / V2), the drafter's module, a parameter's tensor-parallel shard, what to time for
the analytic speedup. These import nothing beyond the standard library."""

from __future__ import annotations

from typing import Any


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
TP_SPLIT_ALONG = {
    "ColumnParallelLinear": "output_dim",
    "VocabParallelEmbedding": "output_dim",
    "RowParallelLinear": "input_dim",
}
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
        raise UnknownSplit(
            f"{type(module).__name__} with its K/V heads replicated over {module.num_kv_head_replicas} ranks"
        )
    return int(module.tp_rank) if getattr(param, along, None) is not None else None


def step_timers(runner) -> dict[str, tuple[Any, str, Any]]:
    """What to time for the analytic speedup model: name -> (owner, attribute, skip(kwargs)).
    V1 (to 0.33): `_model_forward` (the target forward alone) and `propose_draft_token_ids`. V2 (0.34's only
    runner, on GPU and CPU): `execute_model` (input preparation plus the target forward over the step's drafts)
    and the speculator's `propose` (called by `sample_tokens` after the rejection sampler), leaving out warm-up
    calls (dummy_run) and steps that drafted nothing (0.33+ may skip drafting). internals/v2_engine.py lists them."""

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
