"""Acceptance from counters: deltas between snapshots, summed over engines."""

from dataclasses import dataclass

from specgate.figures.acceptance import SpecCounters, counters_from_metrics


@dataclass
class Counter:
    name: str
    value: int
    labels: dict


@dataclass
class Vector:
    name: str
    values: list
    labels: dict


def snapshot(drafts, draft_tokens, accepted, per_pos, engine="0"):
    labels = {"engine": engine}
    return [
        Counter("vllm:spec_decode_num_drafts", drafts, labels),
        Counter("vllm:spec_decode_num_draft_tokens", draft_tokens, labels),
        Counter("vllm:spec_decode_num_accepted_tokens", accepted, labels),
        Vector("vllm:spec_decode_num_accepted_tokens_per_pos", per_pos, labels),
        Counter("vllm:prompt_tokens", 999, labels),
    ]


def test_counters_are_summed_over_data_parallel_engines():
    c = counters_from_metrics(snapshot(10, 30, 12, [6, 4, 2]) + snapshot(5, 15, 3, [2, 1, 0], engine="1"))
    assert c == SpecCounters(15, 45, 15, (8, 5, 2))


def test_delta_between_snapshots_gives_the_batch_alone():
    before = counters_from_metrics(snapshot(10, 30, 12, [6, 4, 2]))
    after = counters_from_metrics(snapshot(20, 60, 42, [16, 14, 12]))
    batch = after - before
    assert batch == SpecCounters(10, 30, 30, (10, 10, 10))
    assert batch.mean_acceptance_length == 4.0 and batch.acceptance_rate == 1.0
    assert batch.per_position_rates == (1.0, 1.0, 1.0)


def test_rates_are_undefined_without_drafts():
    empty = SpecCounters()
    assert empty.mean_acceptance_length is None and empty.acceptance_rate is None and empty.per_position_rates == ()


def test_vllms_per_request_histogram_is_taken_over_the_stream_whose_chunks_may_be_merged():
    from specgate.figures.acceptance import AcceptanceResult

    stream = {"a": [1, 2, 4, 7], "b": [1, 1, 3]}  # a chunk of 7 tokens at k = 3: several steps merged
    merged = AcceptanceResult.from_batch(SpecCounters(), stream, k=3)
    assert merged.source == "stream" and merged.merged_chunks == 1 and merged.record()["merged_stream_chunks"] == 1
    exact = AcceptanceResult.from_batch(
        SpecCounters(), stream, k=3, step_histograms={"a": [1, 1, 0, 2], "b": [2, 0, 1, 0]}
    )
    assert exact.source == "engine" and exact.histogram == (0, 3, 1, 1, 2)  # j accepted -> j + 1 tokens
    assert "merged_stream_chunks" not in exact.record()
