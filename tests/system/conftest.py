"""Real runs of the gate on vLLM's CPU build (marker `system`)."""

import os
from pathlib import Path

import pytest

from .nested import vllm_cpu_build_missing

# Under pytest-xdist (.ci/run's slow stage runs on two workers) each worker's engines compute on a core
# of their own: vLLM's CPU build otherwise binds every engine's threads to the same first core.
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and "VLLM_CPU_OMP_THREADS_BIND" not in os.environ:
    _cores = sorted(os.sched_getaffinity(0))
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(_cores[int(_worker[2:]) % len(_cores)])


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
