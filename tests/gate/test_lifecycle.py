"""Engine lifecycle: each engine boots once and gives its processes and memory back on shutdown."""

import pytest

pytestmark = pytest.mark.gpu
SPECGATE_STAGE = 100  # last in each method's group: the next method's engine boots after it
SPECGATE_GATE = "lifecycle"


def test_engine_booted_once_and_released_its_memory(gate, engine_method, engine):
    if reason := gate.not_measurable_here("lifecycle"):
        pytest.skip(reason)
    record = gate.records[engine_method]
    report = gate.release(engine_method)
    assert record.boots == 1, f"engine '{engine_method}' booted {record.boots} times in one run"
    assert report is not None and report.released, report.describe() if report else "never shut down"
