"""The terminal summary's figure lines (specgate.run.results)."""

from specgate.run import results


def test_each_keys_acceptance_length_says_the_share_of_its_steps_that_drafted_where_measured():
    kinds = {
        "acceptance": {"doc_prose": {"mean_acceptance_length": 2.264, "draft_share": 0.312}},
        "load": {
            "C=1": {"mean_acceptance_length": 2.464},
            "C=16": {"mean_acceptance_length": 2.667, "draft_share": 0.5},
        },
    }
    lines = results._figure_lines(kinds, is_baseline=False)
    assert lines[0].endswith("mean acceptance length (steps that drafted): doc_prose 2.26 (31%)")
    assert lines[1].endswith("mean acceptance length under load (steps that drafted): C=1 2.46, C=16 2.67 (50%)")
