"""Acceptance per (method, prompt category[, temperature]) against the stored baseline and the
profile's floors."""

import pytest

# after equivalence: reuses the engine and the same generation pass
pytestmark = [pytest.mark.gpu, pytest.mark.specgate(gate="acceptance")]


def test_acceptance_holds_per_category(judge, method, category, temperature):
    verdict = judge(method, (category, temperature))
    assert verdict.passed, verdict.message
