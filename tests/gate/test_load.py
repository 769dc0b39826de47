"""Correctness and acceptance at every concurrency level, from the speedup trials' own requests (no extra
request): each request's tokens against the baseline engine's for the same prompt, and the acceptance the
level's trials moved against the stored figure (specgate/checks/load.py)."""

import pytest

# after the level's speed trials (the data it judges), before the summary over the levels
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="load")]


def test_outputs_and_acceptance_hold_at_each_concurrency(judge, engine_method, concurrency):
    verdict = judge(engine_method, concurrency)
    assert verdict.passed, verdict.message
