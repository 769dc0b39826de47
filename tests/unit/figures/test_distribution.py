"""Each request's acceptance figures from what the greedy pass streamed and vLLM's per-request counts."""

from specgate.figures.distribution import quantile, requests, window_size, windows

OUT = {"a": tuple(range(10))}


def test_lengths_come_from_vllms_histogram_and_windows_from_its_ordered_steps():
    # prefill token, then steps emitting 3, 1, 3, 2 tokens: positions 1, 4, 5, 8
    got = requests(OUT, {"a": [1, 3, 1, 3, 2]}, {"a": [1, 1, 2, 0]}, {"a": [2, 0, 2, 1]}, window=4)["a"]
    assert (got.source, got.positions) == ("engine", "engine")
    assert got.length == 1 + (0 * 1 + 1 * 1 + 2 * 2) / 4
    assert got.steps == ((3, 1), (4, 2), (2, 1))  # window 0: the step at 1; 1: at 4 and 5; 2: at 8
    assert got.record() == [2.25, 3.0, 2.0, 2.0]
    assert got.histogram == (1, 1, 2, 0)  # steps that emitted 1, 2, 3, 4 tokens


def test_windows_count_the_steps_vllm_shows_and_without_them_the_streamed_steps():
    # vLLM's steps with drafts only (1 + 3 + 3 = 7 of 10 tokens): the windows are theirs, whatever the stream says
    got = requests(OUT, {"a": [1, 3, 1, 1, 3, 1]}, {}, {"a": [2, 2]}, window=4)["a"]
    assert (got.source, got.positions) == ("stream", "engine")
    assert got.steps == ((3, 1), (3, 1), (0, 0))  # steps at 1 | 4
    # without vLLM's steps: the streamed ones
    got = requests(OUT, {"a": [1, 3, 1, 1, 3, 1]}, {}, {}, window=4)["a"]
    assert got.positions == "stream" and got.length == (3 + 1 + 1 + 3 + 1) / 5
    assert got.steps == ((3, 1), (5, 3), (1, 1))  # steps at 1 | 4, 5, 6 | 9
    assert got.histogram == (3, 0, 2)  # the streamed steps: three of 1 token, two of 3


def test_a_category_adds_its_requests_steps_per_window_and_long_outputs_get_wider_windows():
    per = requests(
        {"a": tuple(range(8)), "b": tuple(range(8))}, {"a": [1, 4, 3], "b": [1, 1, 1, 1, 1, 1, 1, 1]}, {}, {}, 4
    )
    assert windows(per) == (round((4 + 3) / (1 + 3), 4), round((3 + 4) / (1 + 4), 4))
    empty = requests({"a": tuple(range(9))}, {"a": [1, 8]}, {}, {}, 4)["a"]  # one merged chunk: windows 1-2 empty
    assert empty.windows == (8.0, None, None)
    assert window_size(48) == 16 and window_size(1024) == 128
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5 and quantile([], 0.1) is None
