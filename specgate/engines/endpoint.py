"""Endpoint mode: the same measurements against an already running OpenAI-compatible vLLM server.

The run's endpoints setting, `METHOD=URL` pairs (METHOD may be `baseline`), points profile methods at
servers someone else started, e.g. `vllm serve ... --speculative-config ...`. Prompts go in as token
ids (`/v1/completions` accepts them) with streaming and `return_token_ids`, so each streamed chunk
is one engine step and carries its token ids; the spec-decode counters come from the server's
Prometheus `/metrics`. What a client cannot see (the server's memory, its shutdown, worker step
timings) is skipped with a reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field

from specgate.backend import StreamingBackend
from specgate.engines.eventloop import EventLoopThread
from specgate.errors import EngineStalled, SpecgateError
from specgate.figures.acceptance import COUNTER_NAMES, PER_POSITION, SpecCounters
from specgate.figures.completions import Reply, collect, reply_of
from specgate.lifetime.watchdog import Overdue, Watch, describe
from specgate.settings import NAMES, Spelling

REQUEST_TIMEOUT_S = 600.0


class EndpointError(SpecgateError):
    """The server could not be reached or answered something that is not vLLM's API."""


def parse_endpoints(values: list[str], say: Spelling = NAMES) -> dict[str, str]:
    """['ngram=http://host:8000', ...] -> {'ngram': 'http://host:8000'}; a bare URL names no method. A bad value
    is an EndpointError naming the setting as the caller's user spells it (`say`)."""
    endpoints: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name.strip() or not url.strip().startswith(("http://", "https://")):
            raise EndpointError(
                f"{say('endpoints')} {value!r}: expected METHOD=URL, e.g. eagle3=http://127.0.0.1:8000 (METHOD is a "
                "method of the profile, or 'baseline' for a server without speculation)."
            )
        if name.strip() in endpoints:
            raise EndpointError(f"{say('endpoints')}: method {name.strip()!r} is given twice.")
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
    boot_s: float = 0.0  # nothing booted: a client of a server someone else started
    watch: Watch | None = None  # the profile's stall_timeout_s: a server that stops answering fails, in time
    _requests: int = 0
    # tag -> the server's per-request figures of a finished request (its final usage chunk's
    # metrics.speculative_decoding, where the server was started with --per-request-spec-decode-metrics)
    step_histograms: dict[str, list[int]] = field(default_factory=dict)
    step_series: dict[str, list[int]] = field(default_factory=dict)
    _version: str | None = None
    _http: object | None = None  # one httpx.AsyncClient for every request, on `loop`

    def _client(self):
        """The endpoint's one client (created on its loop at first use): its connections are kept and
        reused. A client per request cost ~30 ms of CPU each (httpx loads its TLS context every time),
        about 20 s per engine over the requests scenario's ~700 requests."""
        import httpx

        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=httpx.Timeout(REQUEST_TIMEOUT_S, pool=None),  # a request waits for a connection
                # idle connections dropped before vLLM's server drops them (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): a
                # request sent on a socket the server is closing fails, and httpx does not retry it
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0),
            )
        return self._http

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
            resp = await self._client().get(self.url + path, timeout=30.0)
            resp.raise_for_status()
            return resp.text
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {self.url} (method '{self.method_name}'): GET {path} failed ({type(exc).__name__}: {exc}); "
                "is the server running and reachable? Check the URL the run was given for this method."
            ) from None

    def served_model(self) -> str:
        if self.model is None:
            data = json.loads(self.run(self._get("/v1/models")))
            models = [m["id"] for m in data.get("data", [])]
            if not models:
                raise EndpointError(f"endpoint {self.url}: /v1/models lists no model.")
            self.model = models[0]
        return self.model

    def version(self) -> str:
        """The server's vLLM version ('0.31.0'), from its /version; '' when it does not say."""
        if self._version is None:
            try:
                said = json.loads(self.run(self._get("/version"))).get("version", "")
                self._version = str(said).split("+")[0]
            except (EndpointError, ValueError, AttributeError):
                self._version = ""
        return self._version

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
        tag: str = "",
    ):
        """The streamed completion's chunks (choice dicts), one per engine step; the server's per-request
        spec-decode figures, where its final usage chunk carries them, kept under `tag`."""
        import httpx

        self._requests += 1
        body = {
            "model": self.model,
            "prompt": list(token_ids),
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "return_token_ids": True,
            "stream_options": {"include_usage": True},
        }
        if top_logprobs:
            body.update(logprobs=top_logprobs, return_tokens_as_token_ids=True)
        if seed is not None:
            body["seed"] = seed
        if schema is not None:  # vLLM's extra parameter, as SamplingParams.structured_outputs
            body["structured_outputs"] = {"json": schema, "disable_any_whitespace": True}
        try:
            async with self._client().stream("POST", self.url + "/v1/completions", json=body) as resp:
                if resp.status_code != 200:
                    detail = (await resp.aread()).decode(errors="replace")[:300]
                    raise EndpointError(f"endpoint {self.url}: /v1/completions answered {resp.status_code}: {detail}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    payload = line[len("data: ") :]
                    if payload.strip() == "[DONE]":
                        break
                    data = json.loads(payload)
                    self._keep_figures(tag, data)
                    for choice in data.get("choices", []):
                        yield choice
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {self.url}: streaming a completion failed ({type(exc).__name__}: {exc})."
            ) from None

    def _keep_figures(self, tag: str, data: dict) -> None:
        spec = (data.get("metrics") or {}).get("speculative_decoding") if tag else None
        if spec and spec.get("acceptance_histogram") is not None:
            self.step_histograms[tag] = [int(n) for n in spec["acceptance_histogram"]]
            if spec.get("per_step_accepted"):
                self.step_series[tag] = [int(n) for n in spec["per_step_accepted"]]

    def take_step_histograms(self, tags) -> dict[str, list[int]]:
        return {t: self.step_histograms.pop(t) for t in tags if t in self.step_histograms}

    def take_step_series(self, tags) -> dict[str, list[int]]:
        return {t: self.step_series.pop(t) for t in tags if t in self.step_series}

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
        async for choice in self._chunks(token_ids, max_tokens, top_logprobs, temperature, seed, schema, tag):
            top = [
                {int(t.split(":", 1)[1]): float(lp) for t, lp in (pos or {}).items()}
                for pos in (choice.get("logprobs") or {}).get("top_logprobs") or []
            ]
            if self.watch is not None:
                self.watch.progress()
            yield [int(t) for t in choice.get("token_ids") or []], top

    async def complete(self, token_ids, params: dict, tag: str, stream: bool = True) -> Reply:
        """One request as a client sends it to /v1/completions (the scenario's SamplingParams keywords as
        the request's fields), streamed or not: each of its n outputs with the usage the server reports,
        or the server's refusal (a 400, or the error event of a stream)."""
        import httpx

        self.served_model()
        body = completion_body(self.model, token_ids, params, stream)
        parts: dict[int, dict] = {}
        prompt_logprobs = None
        client = self._client()
        try:
            if not stream:
                resp = await client.post(self.url + "/v1/completions", json=body)
                if resp.status_code != 200:
                    return Reply(refused=refusal_of(resp.status_code, resp.text, self.url))
                data = resp.json()
                for choice in data.get("choices", []):
                    collect(parts, choice_fields(choice, data, params), False)
                    prompt_logprobs = prompt_logprobs or prompt_logprob_fields(choice)
                return reply_of(parts, prompt_logprobs, False)
            async with client.stream("POST", self.url + "/v1/completions", json=body) as resp:
                if resp.status_code != 200:
                    return Reply(refused=refusal_of(resp.status_code, (await resp.aread()).decode(), self.url))
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line[6:].strip() == "[DONE]":
                        continue
                    data = json.loads(line[6:])
                    if "error" in data:  # vLLM reports a refusal inside a streamed 200
                        return Reply(refused=str(data["error"].get("message", data["error"])))
                    for choice in data.get("choices", []):
                        collect(parts, choice_fields(choice, None, params), True)
                    if data.get("usage") and len(parts) == 1:
                        next(iter(parts.values()))["usage"] = int(data["usage"]["completion_tokens"])
                    if self.watch is not None:
                        self.watch.progress()
        except httpx.HTTPError as exc:
            raise EndpointError(
                f"endpoint {self.url}: a completion request failed ({type(exc).__name__}: {exc})."
            ) from None
        return reply_of(parts, prompt_logprobs, True)

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
        from specgate.figures import kvstats

        return kvstats.from_prometheus(self.run(self._get("/metrics")))

    def closed_loop(self, prompts, concurrency: int, max_tokens: int, temperature: float = 0.0):
        self.served_model()
        return super().closed_loop(prompts, concurrency, max_tokens, temperature)

    def shutdown(self) -> None:
        """Close the client (the server is not ours to stop); its workers are not ours to time either."""
        if self.alive:
            self.alive = False
            if self._http is not None:
                # its kept connections closed (a server gone away: the loop's close drops what is left)
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(self._http.aclose(), self.loop.loop).result(timeout=10)
                self._http = None
            self.loop.close()

    close = shutdown


def completion_body(model: str | None, token_ids, params: dict, stream: bool) -> dict:
    """The /v1/completions request for the scenario's SamplingParams keywords: token ids in and out,
    logprobs keyed by token id, the usage chunk at the end of a stream."""
    body = {"model": model, "prompt": list(token_ids), "stream": stream, "return_token_ids": True, **params}
    if "logit_bias" in body:
        body["logit_bias"] = {str(t): v for t, v in body["logit_bias"].items()}
    if body.get("logprobs") is not None or body.get("prompt_logprobs") is not None:
        body["return_tokens_as_token_ids"] = True
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def _token_id(key: str) -> int:
    return int(key.split(":", 1)[1]) if key.startswith("token_id:") else int(key)


def choice_fields(choice: dict, response: dict | None, params: dict) -> dict:
    """One completion choice (a chunk of a stream, or the whole answer) as completions.collect reads it."""
    logprobs = None
    if params.get("logprobs") is not None and choice.get("logprobs") is not None:
        lp = choice["logprobs"]
        logprobs = [
            {_token_id(t): float(v) for t, v in (top or {}).items()} | {_token_id(tok): float(val)}
            for tok, val, top in zip(
                lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
            )
        ]
    usage = None
    if response is not None and response.get("usage") and len(response.get("choices", [])) == 1:
        usage = response["usage"].get("completion_tokens")
    return {
        "index": int(choice.get("index", 0)),
        "text": choice.get("text") or "",
        "token_ids": choice.get("token_ids") or [],
        "finish_reason": choice.get("finish_reason"),
        "stop_reason": choice.get("stop_reason"),
        "logprobs": logprobs,
        "usage": usage,
    }


def prompt_logprob_fields(choice: dict) -> list | None:
    """vLLM's prompt_logprobs of a choice: [None | {token id: logprob}] per prompt token."""
    rows = choice.get("prompt_logprobs")
    if rows is None:
        return None
    return [None if row is None else {int(t): float(v["logprob"]) for t, v in row.items()} for row in rows]


def refusal_of(status: int, body: str, url: str) -> str:
    """The server's words for a refused request (a 4xx's error.message); a 5xx is not a refusal."""
    if status >= 500 or status < 400:
        raise EndpointError(f"endpoint {url}: /v1/completions answered {status}: {body[:300]}")
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.strip()[:500]
