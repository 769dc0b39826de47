"""What a module keeps for its process (the reaper, the sampler workers, the patched V2 samplers, the
engine-log route) a test can reset, so that no test sees another's."""

import os
import sys

from specgate.engines import logstream
from specgate.lifetime import reaper
from specgate.sampler import v2 as rejection_v2
from specgate.sampler import v2_child as v2_worker


def test_the_reaper_is_forgotten_on_reset(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(reaper, "_running", {})  # a reaper this test process already has stays its own
    monkeypatch.setattr(reaper.subprocess, "Popen", lambda *a, **k: started.append(a) or object())
    reaper.ensure(tmp_path)
    reaper.ensure(tmp_path)  # once per process
    assert len(started) == 1
    reaper.reset()
    reaper.ensure(tmp_path)
    assert len(started) == 2


def test_the_sampler_workers_are_stopped_on_reset(monkeypatch):
    closed = []

    class Fake:
        def __init__(self, source):
            self.source = source

        def ready(self):
            return self

        def close(self):
            closed.append(self)

    monkeypatch.setattr(rejection_v2, "Worker", Fake)
    monkeypatch.setattr(rejection_v2, "unavailable", lambda source: "")
    first = rejection_v2.workers(None, 2)
    assert rejection_v2.workers(None, 2) == first  # kept for the process
    rejection_v2.close_workers()
    assert sorted(map(id, closed)) == sorted(map(id, first))
    assert all(a is not b for a, b in zip(rejection_v2.workers(None, 2), first))  # started afresh
    rejection_v2.close_workers()


def test_the_patched_samplers_are_forgotten_on_reset():
    v2_worker._mutants[("a patch",)] = sys  # what a test left behind
    v2_worker.reset()
    assert not v2_worker._mutants


def test_the_engine_log_route_is_reset(tmp_path, capsys):
    logstream.STREAM.route_to(tmp_path / "engine.log")
    logstream.STREAM.write("to the log\n")
    logstream.STREAM.reset()
    logstream.STREAM.write("to stdout\n")
    assert (tmp_path / "engine.log").read_text() == "to the log\n"
    assert "to stdout" in capsys.readouterr().out and logstream.STREAM.owner == os.getpid()
