"""The scheduler's KV-cache counters, from an engine's metrics snapshot and from a server's /metrics."""

from types import SimpleNamespace

from specgate.figures import kvstats

PROMETHEUS = """\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 5.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 21624.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 6912.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""


def test_counters_from_a_servers_metrics_and_their_difference():
    now = kvstats.from_prometheus(PROMETHEUS)
    assert now == kvstats.KvStats(5, 21624, 6912, 0.25)
    moved = now - kvstats.KvStats(2, 10812, 0, 0.0)
    assert (moved.preemptions, moved.prefix_queries, moved.prefix_hits, moved.usage) == (3, 10812, 6912, 0.25)
    assert abs(moved.hit_rate - 6912 / 10812) < 1e-12 and kvstats.KvStats().hit_rate is None


def test_counters_from_an_engines_snapshot_summed_over_engines():
    snapshot = [
        SimpleNamespace(name=kvstats.PREEMPTIONS, value=2),
        SimpleNamespace(name=kvstats.PREEMPTIONS, value=1),
        SimpleNamespace(name=kvstats.PREFIX_QUERIES, value=100),
        SimpleNamespace(name=kvstats.PREFIX_HITS, value=40),
        SimpleNamespace(name=kvstats.KV_USAGE, value=0.0),
        SimpleNamespace(name="vllm:request_num_preemptions", value=None),
    ]
    assert kvstats.from_metrics(snapshot) == kvstats.KvStats(3, 100, 40, 0.0)
