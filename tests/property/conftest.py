"""Samplers under test (samplers.py), built once per session; one that cannot run here skips."""

from __future__ import annotations

import pytest

from .samplers import Subject

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
