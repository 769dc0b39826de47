"""A suite run in a child pytest: its counts, failing ids with their first lines (a module that cannot be
imported as its error, the other modules still run) and skip reasons come back from its JUnit file; a
suite that writes none (stopped at its timeout) says so with the end of its output; each suite gets the
variable that points it at the release."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.release import suites
from specgate.sampler import cuda_sources

TESTS = """
import os, time
import pytest

def test_passes():
    assert os.environ["SPECGATE_VLLM_SOURCE"].endswith("1.1.0")

def test_fails():
    assert 1 == 2, "the second line is not shown\\nhere"

def test_a_child_process_failed():
    raise RuntimeError(
        "V2 sampler worker (x): Traceback (most recent call last):\\n  File 'k.py', line 1\\n"
        "AttributeError: 'Tensor' object has no attribute 'row_mapping'"
    )

@pytest.mark.skip(reason="not on this release")
def test_skips():
    pass

def test_sleeps():
    if os.environ.get("SLOW"):
        time.sleep(60)
"""


@pytest.fixture(autouse=True)
def bare_pytest(monkeypatch):
    """The child pytest loads no installed plugin (specgate's, hypothesis, xdist): seconds of start-up here."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def checkout(tmp_path: Path) -> Path:
    (tmp_path / "tests" / "contract").mkdir(parents=True)
    (tmp_path / "tests" / "contract" / "test_it.py").write_text(TESTS)
    (tmp_path / "tests" / "contract" / "test_broken.py").write_text("RULES = {}\nRULES['0.34.0']\n")
    return tmp_path


def test_counts_failures_and_skips_come_back_from_the_junit_file(tmp_path):
    root = checkout(tmp_path)
    run = suites.run(suites.CONTRACT, "1.1.0", tmp_path / "1.1.0", suites.Plan(root, tmp_path / "out"))
    assert (run.passed, run.failed, run.errors, run.skipped) == (2, 2, 1, 1) and not run.ok
    assert run.failures == (
        ("tests/contract/test_broken.py (collecting it)", "KeyError: '0.34.0'"),  # and the other module still ran
        ("tests/contract/test_it.py::test_fails", "AssertionError: the second line is not shown"),
        (
            "tests/contract/test_it.py::test_a_child_process_failed",
            "RuntimeError: V2 sampler worker (x): ... AttributeError: 'Tensor' object has no attribute 'row_mapping'",
        ),
    )
    assert run.skip_reasons == ("not on this release",)
    assert run.command.startswith(f"SPECGATE_VLLM_SOURCE={tmp_path / '1.1.0'} pytest")
    assert (tmp_path / "out" / "contract.log").is_file() and run.seconds > 0


def test_a_suite_stopped_at_its_timeout_says_so(tmp_path, monkeypatch):
    root = checkout(tmp_path)
    monkeypatch.setenv("SLOW", "1")
    run = suites.run(suites.CONTRACT, "1.1.0", tmp_path / "1.1.0", suites.Plan(root, tmp_path / "out", timeout_s=2))
    assert run.returncode == 124 and not run.junit and not run.ok
    assert "stopped after 2 s (--suite-timeout)" in run.tail


def test_the_property_suite_runs_the_release_only():
    args, env = suites.command(suites.PROPERTIES, "0.34.0", Path("/t/0.34.0"), Path("/o/p.xml"))
    assert args[-3:] == ["tests/property", "-k", "0.34.0 or kernel_mutant"]
    assert env == {cuda_sources.RELEASES_VARIABLE: "0.34.0"}
