"""Real runs of the gate on vLLM's CPU build (marker `system`)."""

from pathlib import Path

import pytest

from .nested import vllm_cpu_build_missing


@pytest.fixture(scope="session")
def vllm_cpu_build():
    """Skips the test (skip_without_vllm_cpu) where cpu-tiny's engines cannot boot."""
    reason = vllm_cpu_build_missing()
    if reason:
        pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)  # before -m selects on it
def pytest_collection_modifyitems(items):
    """Every test in this directory is a real run: marker `system` (a new file cannot forget it)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.system)
