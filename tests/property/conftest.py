"""The samplers under test: vLLM's (CPU kernels, no engine) and our reference."""

from __future__ import annotations

import importlib.util

import pytest

from specgate.rejection import reference_rejection_sample, vllm_rejection_sample


@pytest.fixture(scope="session")
def vllm_sampler():
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install -e '.[cpu]')")
    from vllm.platforms import current_platform  # a broken install fails here, loudly

    if not current_platform.is_cpu():
        pytest.skip(
            "the adapter drives vLLM's CPU kernels; "
            f"this vLLM targets {current_platform.device_type}"
        )
    return vllm_rejection_sample


@pytest.fixture(scope="session", params=["vllm", "reference"])
def rejection_sampler(request):
    """Each property runs against both samplers."""
    if request.param == "vllm":
        return request.getfixturevalue("vllm_sampler")
    return reference_rejection_sample
