"""Spreading a run over several GPUs with pytest-xdist (`pytest -n N`).

Each method's tests stay together on one worker (one engine boot per method), and each worker gets
its own slice of the visible GPUs: as many as one engine needs (tensor x pipeline parallel size), so
a 70B target with tensor_parallel_size = 4 runs on four GPUs per worker through vLLM's own
multiprocessing or Ray backend. Every worker measures its own baseline engine on its own GPUs, so
each speedup is still a ratio taken on one device.
"""

from __future__ import annotations

import os

from specgate.errors import SpecgateError
from specgate.machine import visible_devices

RUN_OUT_ENV = "SPECGATE_RUN_OUT"  # the controller's results directory, inherited by its workers
# Where each xdist worker writes the `xdist_group` of the tests it collected, for the controller's scheduler
# (xdist's own `loadgroup` renames node ids to carry the group, which pytest 9 no longer allows).
GROUPS_ENV = "SPECGATE_XDIST_GROUPS"


def worker_id(config=None) -> str | None:
    """'gw0', 'gw1', ... inside an xdist worker, else None. With pytest's config, a process is a worker
    only when xdist gave it its workerinput: PYTEST_XDIST_WORKER is inherited by any pytest a worker
    starts (the endpoint test's nested run, the suite's own), which is not a worker itself."""
    if config is not None:
        return getattr(config, "workerinput", {}).get("workerid")
    return os.environ.get("PYTEST_XDIST_WORKER")


def worker_index(config=None) -> int | None:
    wid = worker_id(config)
    return int(wid[2:]) if wid and wid.startswith("gw") and wid[2:].isdigit() else None


def gpus_per_engine(profile) -> int:
    """GPUs one engine of this profile needs: the largest tensor x pipeline parallel product."""
    needs = []
    for kwargs in [profile.engine_kwargs, *(m.engine_kwargs for m in profile.methods.values())]:
        merged = {**profile.engine_kwargs, **kwargs}
        needs.append(int(merged.get("tensor_parallel_size", 1)) * int(merged.get("pipeline_parallel_size", 1)))
    return max(needs)


def slice_devices(visible: list[str], index: int, per_engine: int, workers: int) -> list[str]:
    """Worker `index`'s devices out of `visible`: a disjoint slice of `per_engine` devices."""
    if per_engine * workers > len(visible):
        raise SpecgateError(
            f"pytest -n {workers} with {per_engine} GPU(s) per engine needs {per_engine * workers} GPUs, but "
            f"{len(visible)} are visible ({', '.join(visible) or 'none'}); use -n {max(1, len(visible) // per_engine)} "
            "or make more devices visible (CUDA_VISIBLE_DEVICES)."
        )
    return visible[index * per_engine : (index + 1) * per_engine]


def pin_worker(profile, env=os.environ, config=None) -> list[str] | None:
    """Inside an xdist worker of a CUDA profile, restrict CUDA_VISIBLE_DEVICES to this worker's
    slice; returns the slice (None when there is nothing to pin)."""
    index = worker_index(config)
    if index is None or profile.hardware != "cuda":
        return None
    workers = int(getattr(config, "workerinput", {}).get("workercount") or env.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    devices = slice_devices(visible_devices(env), index, gpus_per_engine(profile), workers)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    return devices


def method_of(nodeid: str, methods: list[str]) -> str | None:
    """The method a gate test id belongs to: its first parameter id ('...[eagle3-C=4]' -> 'eagle3')."""
    if "[" not in nodeid:
        return None
    params = nodeid[nodeid.index("[") + 1 : nodeid.rindex("]")]
    for name in sorted(methods, key=len, reverse=True):  # 'draft_model' before 'draft'
        if params == name or params.startswith(name + "-"):
            return name
    return None


def group_of(item) -> str | None:
    """The name of the `xdist_group` a collected test carries (positional or `name=`), or None."""
    mark = item.get_closest_marker("xdist_group")
    name = (mark.args[0] if mark.args else mark.kwargs.get("name")) if mark is not None else None
    return str(name) if name else None


def record_groups(items, directory: str, worker: str) -> None:
    """In an xdist worker: {node id: its xdist_group name} of the collected tests that carry one, written to
    `directory`/<worker>.json (whole, then renamed: the scheduler never reads half a file)."""
    import json

    groups = {item.nodeid: name for item in items if (name := group_of(item))}
    path = os.path.join(directory, f"{worker}.json")
    with open(path + ".part", "w", encoding="utf-8") as fh:
        json.dump(groups, fh)
    os.replace(path + ".part", path)


def read_groups(directory: str | None) -> dict[str, str]:
    """The groups every worker recorded (node id -> group name); {} when there are none."""
    import glob
    import json

    out: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.json"))) if directory else ():
        with open(path, encoding="utf-8") as fh:
            out.update(json.load(fh))
    return out


def method_scheduler(config, log, methods: list[str], groups_dir: str | None = None):
    """xdist's load-scope scheduler with one scope per method, one per `xdist_group` (the groups the
    workers recorded in `groups_dir`), and one scope each for the other tests.

    Two changes to how xdist hands the scopes out, so that workers running long tests end together:
    - in collection order, where xdist puts the scopes with the most tests first: the session orders a gate's
      methods, a suite can put its longest tests first (the project's own: tests/system/conftest.py);
    - a worker is given its next scope only when it holds no other test besides the one it runs. A worker
      starts a test once it holds the one after it (pytest's `nextitem`), so that keeps it busy; xdist tops a
      worker up whenever it holds two or fewer, so a worker whose quick tests end in a row takes several
      long scopes while the other worker, busy with one long test, gets none of them afterwards."""
    from xdist.scheduler import LoadScopeScheduling

    class MethodScopeScheduling(LoadScopeScheduling):
        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if method := method_of(nodeid, methods):
                return f"specgate-method:{method}"
            if self._groups is None:
                self._groups = read_groups(groups_dir)
            return f"xdist-group:{self._groups[nodeid]}" if nodeid in self._groups else nodeid

        def schedule(self) -> None:
            option = self.config.option
            reorder, option.loadscopereorder = getattr(option, "loadscopereorder", False), False
            try:  # xdist reads the option only while it builds its queue of scopes, here
                super().schedule()
            finally:
                option.loadscopereorder = reorder

        def _reschedule(self, node) -> None:
            if self.workqueue and not node.shutting_down and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return MethodScopeScheduling(config, log)
