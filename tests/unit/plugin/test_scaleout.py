"""GPU slices for pytest-xdist workers."""

import json
from types import SimpleNamespace

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
    workers recorded (the property suite's cases, the matrix run's module fixture), in a project that asks for
    it outside gate runs (this one's pyproject.toml does)."""
    pytest.importorskip("xdist")
    pytester.makeini("[pytest]\nspecgate_xdist_scheduler = true\n")
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


class _Worker:
    """What the scheduler calls on an xdist worker: the tests it was sent (node ids), and shutdown."""

    def __init__(self, name: str, collection: list[str]):
        self.gateway, self.collection = SimpleNamespace(id=name), collection
        self.sent: list[str] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent += [self.collection[i] for i in indices]

    def shutdown(self):
        self.shutting_down = True


def test_scopes_go_out_in_collection_order_and_a_worker_holds_one_beyond_the_test_it_runs(tmp_path):
    """The slow stage's imbalance (docs/ci-budget.md): a worker whose quick tests end in a row must not take
    the long scopes still queued while the other worker runs one long test."""
    pytest.importorskip("xdist")
    from specgate.plugin.scaleout import method_scheduler

    collection = ["t.py::long", *(f"t.py::quick[{i}]" for i in range(3)), *(f"t.py::s{i}" for i in range(4))]
    (tmp_path / "gw0.json").write_text(json.dumps({nodeid: "quick" for nodeid in collection[1:4]}))
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"], option=SimpleNamespace(loadscopereorder=True))
    scheduler = method_scheduler(config, None, [], str(tmp_path))
    a, b = _Worker("gw0", collection), _Worker("gw1", collection)
    for worker in (a, b):
        scheduler.add_node(worker)
    for worker in (a, b):
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    # collection order, though xdist's own order puts the scope of three tests first
    assert a.sent == ["t.py::long", "t.py::s0"] and b.sent == collection[1:4]
    for index in (1, 2, 3):  # gw1's quick tests end while gw0 runs `long`
        scheduler.mark_test_complete(b, index)
    assert b.sent == [*collection[1:4], "t.py::s1", "t.py::s2"]  # s1 runs, s2 is its next: s3 waits
    assert list(scheduler.workqueue) == ["t.py::s3"] and config.option.loadscopereorder is True
    scheduler.mark_test_complete(a, 0)  # `long` ends: the scope left goes to the worker that is free
    assert a.sent == ["t.py::long", "t.py::s0", "t.py::s3"] and not scheduler.workqueue
