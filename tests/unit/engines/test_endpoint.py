"""Endpoint mode's parsing (the option, the server's Prometheus counters) and its client."""

import http.server
import threading

import pytest

from specgate.engines.endpoint import EndpointError, counters_from_prometheus, parse_endpoints
from specgate.settings import Spelling

METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 50.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 15.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 5.0
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
"""


def test_counters_are_summed_over_engines_and_ordered_by_position():
    c = counters_from_prometheus(METRICS)
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (42, 120, 50)
    assert c.accepted_per_pos == (30, 15, 5)


def test_a_server_without_speculation_has_zero_counters():
    assert (
        counters_from_prometheus("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n").num_drafts
        == 0
    )


def test_endpoint_option_parsing():
    assert parse_endpoints(["eagle3=http://127.0.0.1:8000/", "baseline=https://h:1"]) == {
        "eagle3": "http://127.0.0.1:8000",
        "baseline": "https://h:1",
    }
    flag = Spelling({"endpoints": "--server"})  # how the caller's user gave them
    for bad in (["http://127.0.0.1:8000"], ["eagle3=localhost:8000"], ["a=http://x", "a=http://y"]):
        with pytest.raises(EndpointError, match="^--server"):
            parse_endpoints(bad, flag)
        with pytest.raises(EndpointError, match="^endpoints"):  # no spelling: the setting's name
            parse_endpoints(bad)


class _Metrics(http.server.BaseHTTPRequestHandler):
    """/metrics over HTTP/1.1 keep-alive, noting each request's client port (one per connection)."""

    protocol_version = "HTTP/1.1"
    ports: list[int]

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.ports.append(self.client_address[1])
        body = METRICS.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_one_client_serves_every_request_of_an_endpoint_over_kept_connections():
    from specgate.engines.endpoint import Endpoint

    _Metrics.ports = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = Endpoint("ngram", f"http://127.0.0.1:{server.server_port}")
    try:
        readings = [endpoint.counters() for _ in range(10)]
        client = endpoint._http
    finally:
        endpoint.shutdown()
        server.shutdown()
    assert {r.num_drafts for r in readings} == {42}
    assert len(_Metrics.ports) == 10 and len(set(_Metrics.ports)) == 1  # a client per request: 10 connections
    assert client.is_closed and endpoint._http is None  # closed with the endpoint


class _Completions(_Metrics):
    """/v1/completions streamed as vLLM's server does: a chunk per step, then the usage chunk, which carries the
    request's spec-decode figures when the server was started with --per-request-spec-decode-metrics."""

    figures: dict | None = None

    def do_POST(self):  # noqa: N802 (http.server's name)
        import json

        self.rfile.read(int(self.headers["Content-Length"]))
        events = [{"choices": [{"index": 0, "text": "x", "token_ids": ids}]} for ids in ([7], [8, 9, 10], [11, 12])]
        events.append(
            {"choices": [], "usage": {"completion_tokens": 6}, "metrics": {"speculative_decoding": self.figures}}
        )
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.mark.parametrize("detailed", [True, False, None])
def test_the_servers_per_request_figures_reach_the_batch_where_it_gives_them(detailed):
    from types import SimpleNamespace

    from specgate.engines.endpoint import Endpoint

    figures = {"acceptance_histogram": [0, 0, 2, 0], "mean_acceptance_length": 2.5}
    if detailed:
        figures["per_step_accepted"] = [2, 1]
    _Completions.ports, _Completions.figures = [], None if detailed is None else figures
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Completions)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = Endpoint("ngram", f"http://127.0.0.1:{server.server_port}", model="m")
    try:
        batch = endpoint.run_batch([SimpleNamespace(id="p1", token_ids=[1, 2, 3])], 6)
    finally:
        endpoint.shutdown()
        server.shutdown()
    assert batch.outputs["p1"].token_ids == (7, 8, 9, 10, 11, 12) and batch.tokens_per_step["p1"] == [1, 3, 2]
    assert batch.step_histograms == ({} if detailed is None else {"p1": [0, 0, 2, 0]})
    assert batch.step_series == ({"p1": [2, 1]} if detailed else {})
