"""Real runs of the gate on vLLM's CPU build (marker `system`)."""

import os
from pathlib import Path

import pytest

from specgate.plugin.scaleout import group_of

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
    """Every test in this directory is a real run: marker `system` (a new file cannot forget it). The slow
    ones go longest first: see `longest_first`."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.system)
    items[:] = longest_first(items)


def longest_first(items: list) -> list:
    """`items` with the slow tests first, longest first, by the wall time their marker states
    (`slow(wall_s=...)`, measured: docs/ci-budget.md); the tests of one `xdist_group` count as one, as long as
    its longest, and stay together. The others keep their order, after them. Under xdist the scheduler hands
    the tests out in this order (specgate/plugin/scaleout.py), so the slow stage's two workers end together."""
    scopes = [f"group:{group}" if (group := group_of(item)) else item.nodeid for item in items]
    first: dict[str, int] = {}
    cost: dict[str, float] = {}
    for index, (item, scope) in enumerate(zip(items, scopes)):
        first.setdefault(scope, index)
        mark = item.get_closest_marker("slow")
        cost[scope] = max(cost.get(scope, 0.0), float(mark.kwargs.get("wall_s", 0)) if mark else 0.0)
    timed = sorted(
        (index for index, scope in enumerate(scopes) if cost[scope]),
        key=lambda index: (-cost[scopes[index]], first[scopes[index]], index),
    )
    return [items[index] for index in timed] + [item for item, scope in zip(items, scopes) if not cost[scope]]


@pytest.fixture(scope="session")
def v2_run(tmp_path_factory, vllm_cpu_build):
    """The one nested run of cpu-tiny-v2 that test_v2_engines.py and test_v2_plants.py read (both in xdist_group
    'v2', so under .ci/run's two workers one worker runs it once): tests/system/v2_run.py."""
    from .v2_run import run

    return run(tmp_path_factory.mktemp("v2"))
