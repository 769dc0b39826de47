"""GPU slices for pytest-xdist workers."""

import pytest

from specgate.errors import SpecgateError
from specgate.plugin.scaleout import gpus_per_engine, pin_worker, slice_devices
from specgate.profile import find_profile, load_profile

pytest_plugins = ["pytester"]


def test_each_worker_gets_a_disjoint_slice():
    visible = ["0", "1", "2", "3", "4", "5", "6", "7"]
    slices = [slice_devices(visible, i, 4, 2) for i in range(2)]
    assert slices == [["0", "1", "2", "3"], ["4", "5", "6", "7"]]
    assert [slice_devices(visible, i, 1, 8)[0] for i in range(8)] == visible


def test_too_few_gpus_names_the_fix():
    with pytest.raises(SpecgateError, match=r"needs 8 GPUs, but 4 are visible.*use -n 1"):
        slice_devices(["0", "1", "2", "3"], 0, 4, 2)


@pytest.fixture
def root(pytestconfig):
    return pytestconfig.rootpath


def test_tensor_parallel_profile_needs_four_gpus_per_worker(root, monkeypatch):
    profile = load_profile(find_profile("llama33-70b-tp4-a100", root), root)
    assert gpus_per_engine(profile) == 4
    env = {"PYTEST_XDIST_WORKER_COUNT": "2", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    assert pin_worker(profile, env) == ["4", "5", "6", "7"]
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"


def test_nothing_is_pinned_outside_xdist_or_on_cpu(root, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    cpu = load_profile(find_profile("cpu-tiny", root), root)
    assert pin_worker(cpu, {}) is None
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    assert pin_worker(cpu, {}) is None


def test_gate_test_ids_map_to_their_method():
    from specgate.plugin.scaleout import method_of

    methods = ["baseline", "draft", "draft_model", "eagle3"]
    assert method_of("tests/gate/test_speedup.py::test_speedup_holds_per_concurrency[eagle3-C=4]", methods) == "eagle3"
    assert (
        method_of("tests/gate/test_memory.py::test_memory_overhead_within_baseline[draft_model]", methods)
        == "draft_model"
    )
    assert (
        method_of("tests/gate/test_acceptance.py::test_acceptance_holds_per_category[draft-doc_prose]", methods)
        == "draft"
    )
    assert method_of("tests/unit/figures/test_stats.py::test_leviathan_model", methods) is None
    assert method_of("tests/unit/test_x.py::test_y[other-1]", methods) is None


def test_a_pytest_started_by_a_worker_is_no_worker_itself(root, monkeypatch):
    """It inherits PYTEST_XDIST_WORKER (the endpoint test's nested run); only xdist's workerinput makes a worker."""
    from types import SimpleNamespace

    from specgate.plugin.scaleout import worker_id

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    nested, worker = SimpleNamespace(), SimpleNamespace(workerinput={"workerid": "gw1", "workercount": 2})
    assert worker_id(nested) is None and worker_id(worker) == "gw1"
    profile = load_profile(find_profile("llama33-70b-tp4-a100", root), root)
    assert pin_worker(profile, {"CUDA_VISIBLE_DEVICES": "0"}, config=nested) is None  # no slicing, no error
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}
    assert pin_worker(profile, env, config=worker) == ["4", "5", "6", "7"]


def test_the_tests_of_one_xdist_group_run_on_one_worker(pytester):
    """pytest 9 forbids xdist's loadgroup its renamed node ids: the method scheduler keeps the groups the
    workers recorded (the property suite's cases, the matrix run's module fixture)."""
    pytest.importorskip("xdist")
    pytester.makepyfile(
        test_groups="""
        import os, pytest

        @pytest.mark.xdist_group("one")
        @pytest.mark.parametrize("i", range(4))
        def test_a(i):
            pass

        @pytest.mark.xdist_group("two")
        @pytest.mark.parametrize("i", range(4))
        def test_b(i):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        if " PASSED " in line and line.startswith("[gw"):
            workers.setdefault(line.split("::")[1].split("[")[0], set()).add(line.split("]")[0].lstrip("["))
    assert set(workers) == {"test_a", "test_b"} and all(len(w) == 1 for w in workers.values()), workers
