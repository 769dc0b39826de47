"""Hooks specgate adds to pytest (registered by plugin.py). Implement them in a conftest.py."""

from __future__ import annotations

import pytest

__all__ = ["pytest_specgate_boot_engine"]  # the public surface (specgate.PUBLIC)


@pytest.hookspec(firstresult=True)
def pytest_specgate_boot_engine(profile, method, root, log_path):
    """Return a live engine (specgate.backend.Backend) for `method`, or None to let specgate boot
    vLLM. Raise specgate.errors.EngineBootError for an engine that refuses to start.
    specgate.testing implements it with a scripted FakeEngine."""
