"""Endpoint mode: the same measurements against an already running OpenAI-compatible vLLM server.

`--specgate-endpoint METHOD=URL` (repeatable; METHOD may be `baseline`) points a profile method at a
server someone else started, e.g. `vllm serve ... --speculative-config ...`. Prompts go in as token
ids (`/v1/completions` accepts them) with streaming and `return_token_ids`, so each streamed chunk
is one engine step and carries its token ids; the spec-decode counters come from the server's
Prometheus `/metrics`. What a client cannot see (the server's memory, its shutdown, worker step
timings) is skipped with a reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from specgate.acceptance import COUNTER_NAMES, PER_POSITION, SpecCounters
from specgate.backend import StreamingBackend
from specgate.errors import EngineStalled, SpecgateError
from specgate.eventloop import EventLoopThread
from specgate.watchdog import Overdue, Watch, describe

REQUEST_TIMEOUT_S = 600.0


class EndpointError(SpecgateError):
    """The server could not be reached or answered something that is not vLLM's API."""


def parse_endpoints(values: list[str]) -> dict[str, str]:
    """['ngram=http://host:8000', ...] -> {'ngram': 'http://host:8000'}; a bare URL names no method."""
    endpoints: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name.strip() or not url.strip().startswith(("http://", "https://")):
            raise EndpointError(
                f"--specgate-endpoint {value!r}: expected METHOD=URL, e.g. eagle3=http://127.0.0.1:8000 (METHOD is a "
                "method of the profile, or 'baseline' for a server without speculation)."
            )
        if name.strip() in endpoints:
            raise EndpointError(f"--specgate-endpoint: method {name.strip()!r} is given twice.")
        endpoints[name.strip()] = url.strip().rstrip("/")
    return endpoints


def counters_from_prometheus(text: str) -> SpecCounters:
    """The spec-decode counters in a Prometheus text exposition, summed over engines/models."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys(COUNTER_NAMES.values(), 0)
    per_pos: dict[int, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name in COUNTER_NAMES and sample.name.endswith("_total"):
                totals[COUNTER_NAMES[name]] += int(sample.value)
            elif name == PER_POSITION and sample.name.endswith("_total"):
                pos = int(sample.labels.get("position", 0))
                per_pos[pos] = per_pos.get(pos, 0) + int(sample.value)
    positions = tuple(per_pos.get(i, 0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(accepted_per_pos=positions, **totals)


@dataclass
class Endpoint(StreamingBackend):
    """A running server, driven like an in-process Engine (run_batch, closed_loop, counters)."""

    name: str
    url: str
    loop: EventLoopThread = field(default_factory=EventLoopThread)
    model: str | None = None
    alive: bool = True
    watch: Watch | None = None  # the profile's stall_timeout_s: a server that stops answering fails, in time
    _requests: int = 0

    @property
    def method_name(self) -> str:
        return self.name

    def run(self, coro, what: str = "waiting for the server"):
        what = f"{what} (endpoint '{self.name}', {self.url})"
        try:
            return self.loop.run(coro, self.watch, what)
        except Overdue as over:
            raise EngineStalled(
                f"{describe(over, f'endpoint {self.name!r}', self.watch.stall_s, None, 'the profile', None)}; the "
                "server is not this run's to stop: look at its own log",
                self.name,
                f"no progress for {over.idle_s:.0f} s",
            ) from None

    async def _get(self, path: str) -> str:
        import httpx

        try:
            async with httpx.AsyncClient(timeout=30.0) as client:
                resp = await client.get(self.url + path)
                resp.raise_for_status()
                return resp.text
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {self.url} (method '{self.method_name}'): GET {path} failed ({type(exc).__name__}: {exc}); "
                "is the server running and reachable? Check the URL given to --specgate-endpoint."
            ) from None

    def served_model(self) -> str:
        if self.model is None:
            data = json.loads(self.run(self._get("/v1/models")))
            models = [m["id"] for m in data.get("data", [])]
            if not models:
                raise EndpointError(f"endpoint {self.url}: /v1/models lists no model.")
            self.model = models[0]
        return self.model

    def counters(self) -> SpecCounters:
        return counters_from_prometheus(self.run(self._get("/metrics")))

    def kv_capacity_tokens(self) -> int | None:
        """KV-cache capacity (blocks x block size) from the server's `vllm:cache_config_info` gauge."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.run(self._get("/metrics"))):
            for sample in family.samples:
                if sample.name.startswith("vllm:cache_config_info"):
                    blocks, size = sample.labels.get("num_gpu_blocks"), sample.labels.get("block_size")
                    if blocks and size and blocks != "None":
                        return int(blocks) * int(size)
        return None

    async def _chunks(
        self,
        token_ids,
        max_tokens: int,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ):
        """The streamed completion's chunks (choice dicts), one per engine step."""
        import httpx

        self._requests += 1
        body = {
            "model": self.model,
            "prompt": list(token_ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "return_token_ids": True,
        }
        if top_logprobs:
            body.update(logprobs=top_logprobs, return_tokens_as_token_ids=True)
        if seed is not None:
            body["seed"] = seed
        if schema is not None:  # vLLM's extra parameter, as SamplingParams.structured_outputs
            body["structured_outputs"] = {"json": schema, "disable_any_whitespace": True}
        try:
            async with (
                httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client,
                client.stream("POST", self.url + "/v1/completions", json=body) as resp,
            ):
                if resp.status_code != 200:
                    detail = (await resp.aread()).decode(errors="replace")[:300]
                    raise EndpointError(f"endpoint {self.url}: /v1/completions answered {resp.status_code}: {detail}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[len("data: ") :]
                    if payload.strip() == "[DONE]":
                        break
                    for choice in json.loads(payload).get("choices", []):
                        yield choice
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {self.url}: streaming a completion failed ({type(exc).__name__}: {exc})."
            ) from None

    async def steps(
        self,
        token_ids,
        max_tokens: int,
        tag: str,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ):
        async for choice in self._chunks(token_ids, max_tokens, top_logprobs, temperature, seed, schema):
            top = [
                {int(t.split(":", 1)[1]): float(lp) for t, lp in (pos or {}).items()}
                for pos in (choice.get("logprobs") or {}).get("top_logprobs") or []
            ]
            if self.watch is not None:
                self.watch.progress()
            yield [int(t) for t in choice.get("token_ids") or []], top

    def run_batch(
        self,
        prompts,
        max_tokens: int,
        top_logprobs: int = 0,
        temperature: float = 0.0,
        seed: int | None = None,
        schema: dict | None = None,
    ):
        self.served_model()
        return super().run_batch(prompts, max_tokens, top_logprobs, temperature, seed, schema)

    def kv_stats(self):
        from specgate import kvstats

        return kvstats.from_prometheus(self.run(self._get("/metrics")))

    def closed_loop(self, prompts, concurrency: int, max_tokens: int, temperature: float = 0.0):
        self.served_model()
        return super().closed_loop(prompts, concurrency, max_tokens, temperature)

    def shutdown(self) -> None:
        """Close the client (the server is not ours to stop); its workers are not ours to time either."""
        if self.alive:
            self.alive = False
            self.loop.close()

    close = shutdown
