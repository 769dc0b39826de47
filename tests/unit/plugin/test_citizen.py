"""specgate installed, a pytest run that selects no gate test goes as if it were not (issue 68, point 2).

Each property is observed in a throwaway project (pytester, child pytest processes) from inside its tests
and compared with the same project run under `-p no:specgate`: the scheduler xdist chose, the environment,
SIGINT's and SIGTERM's handlers, the temporary directory, pytest-benchmark's options, pytest's log
handlers, a results directory, a test's own fixture named like a gate argument. The control, a gate run
of the same project, shows the observations tell specgate's wiring apart.
"""

import json
import os
from pathlib import Path

import pytest

import specgate
from specgate.plugin import options

pytest_plugins = ["pytester"]

CONFTEST = """
import pytest


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    scheduler = yield
    with open("scheduler.txt", "w") as fh:
        fh.write(f"{type(scheduler).__module__}.{type(scheduler).__qualname__}")
    return scheduler


@pytest.fixture
def method():  # a fixture of the project's own, named like a gate argument
    return "mine"
"""

TESTS = """
import json, os, signal, tempfile

import pytest


def handler(signum):
    h = signal.getsignal(signum)
    return getattr(h, "__qualname__", repr(h)) if callable(h) else repr(h)


def observe(request):
    logging = request.config.pluginmanager.get_plugin("logging-plugin")
    seen = {
        "environment": sorted(os.environ),
        "signals": [handler(signal.SIGINT), handler(signal.SIGTERM)],
        "temporary": sorted(os.listdir(tempfile.gettempdir())),
        "benchmark options": {k: repr(v) for k, v in vars(request.config.option).items() if "benchmark" in k},
        "log handler filters": [len(logging.caplog_handler.filters), len(logging.report_handler.filters)],
    }
    name = f"seen-{request.node.name}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json"
    with open(os.path.join(str(request.config.rootpath), name), "w") as fh:
        json.dump(seen, fh)


def test_ordinary(request):
    observe(request)


@pytest.mark.gpu
def test_on_a_gpu(request):  # the project's own gpu test: a gate run (-m gpu) runs it too
    observe(request)


def test_own_fixture(method):
    assert method == "mine"
"""


@pytest.fixture
def project(pytester, monkeypatch, tmp_path_factory):
    """An ordinary project; its child runs import the specgate this test imports, in a clean environment with
    a temporary directory of their own."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_project=TESTS)
    pytester.makeini("[pytest]\nmarkers =\n    gpu: needs a GPU\n    slow: takes minutes\n")
    # where specgate would put a results directory (its project root: the directory holding fixtures/profiles)
    (pytester.path / "fixtures" / "profiles").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", str(Path(specgate.__file__).resolve().parents[1]))
    monkeypatch.setenv("TMPDIR", str(tmp_path_factory.mktemp("child-tmp")))
    for name in list(os.environ):
        if name.startswith(("SPECGATE_", "PYTEST_", "VLLM_")):
            monkeypatch.delenv(name)
    return pytester


def run(pytester, *args) -> dict:
    """Run the project; what its tests saw (by test name), the scheduler xdist used, whether a results
    directory appeared."""
    for old in [*pytester.path.glob("seen-*.json"), pytester.path / "scheduler.txt"]:
        old.unlink(missing_ok=True)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
    assert result.ret == 0, f"pytest {' '.join(args)}:\n{result.stdout.str()}\n{result.stderr.str()}"
    seen = {}
    for path in sorted(pytester.path.glob("seen-*.json")):
        seen.setdefault(path.stem.split("-")[1], json.loads(path.read_text()))
    scheduler = pytester.path / "scheduler.txt"
    return {
        "tests": seen,
        "scheduler": scheduler.read_text() if scheduler.exists() else None,
        "results directory": (pytester.path / "results").exists(),
        "outcomes": result.parseoutcomes(),
    }


@pytest.mark.parametrize(
    ("reference", "runs"),
    [
        pytest.param([], [[], ["-m", "not (gpu or slow)"], ["-m", "not slow"]], id="one process"),
        pytest.param(["-n", "2"], [["-n", "2"], ["-n", "2", "-m", "not (gpu or slow)"]], id="two xdist workers"),
    ],
)
def test_a_run_that_selects_no_gate_test_goes_as_without_specgate(project, reference, runs):
    without = run(project, "-p", "no:specgate", *reference)
    assert without["tests"]["test_ordinary"] and not without["results directory"]
    for args in runs:
        said = f"pytest {' '.join(args)} with specgate installed"
        seen = run(project, *args)
        assert seen["scheduler"] == without["scheduler"], f"{said}: scheduled by {seen['scheduler']}"
        assert not seen["results directory"], f"{said} made a results directory"
        assert seen["outcomes"]["passed"] >= 2, f"{said}: {seen['outcomes']} (its own fixture `method` kept?)"
        mine, theirs = seen["tests"]["test_ordinary"], without["tests"]["test_ordinary"]
        for observed in ("signals", "temporary", "benchmark options", "log handler filters"):
            assert mine[observed] == theirs[observed], f"{said}: {observed} {mine[observed]} != {theirs[observed]}"
        extra = sorted(set(mine["environment"]) - set(theirs["environment"]))
        assert not extra, f"{said} set environment variables {extra}"


def test_a_gate_run_still_gets_specgate_wiring(project):
    """The control: `-m gpu` is a gate run, and each observation above tells it (the specgate scheduler,
    its variables, its temporary directory, its signal handlers, pytest-benchmark's --benchmark-json in its
    results directory)."""
    without = run(project, "-p", "no:specgate", "-n", "2", "-m", "gpu")
    seen = run(project, "-n", "2", "-m", "gpu")
    assert seen["scheduler"].startswith("specgate.plugin.scaleout.") and seen["scheduler"] != without["scheduler"]
    mine, theirs = seen["tests"]["test_on_a_gpu"], without["tests"]["test_on_a_gpu"]
    assert {"SPECGATE_RUN_OUT", "SPECGATE_XDIST_GROUPS"} <= set(mine["environment"]) - set(theirs["environment"])
    assert mine["signals"] != theirs["signals"]
    assert any(name.startswith("specgate-groups-") for name in mine["temporary"])
    assert "results" in mine["benchmark options"]["benchmark_json"] and seen["results directory"]


@pytest.mark.parametrize(
    ("expression", "selects"),
    [
        ("gpu", True),
        ("gpu and not slow", True),
        ("correctness", True),  # the correctness gates
        ("specgate", True),
        ("specgate(gate='speedup')", True),
        ("", False),
        ("not gpu", False),
        ("not (gpu or slow)", False),  # a regex that looked for "not " right before "gpu" read this as the gate
        ("not slow", False),  # keeps gate tests, and every unmarked test: no request for the gate
        ("gpu or not slow", False),
        ("slow and not gpu", False),
        ("not gpu and not slow and not system", False),
        ("(gpu", False),  # pytest reports the expression itself
    ],
)
def test_the_marker_expression_selects_the_gate_by_pytests_rules(expression, selects):
    assert options.marks_select_gate(expression) is selects


@pytest.mark.parametrize(
    ("args", "selects"),
    [
        ([], False),
        (["-k", "gpu"], False),  # -k selects by names, which are unknown before collection
        (["-m", "gpu"], True),
        (["--specgate-strict"], True),  # no -m: an option of specgate's asks for the gate
        (["--update-baselines"], True),
        (["--specgate-profile", "cpu-tiny"], True),
        (["--specgate-profile", "auto"], False),  # its default
        (["-m", "not gpu", "--specgate-methods", "ngram"], False),  # -m leaves the gate out
    ],
)
def test_a_gate_run_is_told_from_the_command_line(pytester, monkeypatch, args, selects):
    monkeypatch.setenv(options.GPU_PROFILE_ENV, "llama31-8b-h100")  # a GPU runner's environment asks for nothing
    assert options.selects_gate(pytester.parseconfig(*args)) is selects


def test_every_specgate_option_counts_as_asking_for_the_gate(pytestconfig):
    group = next(g for g in pytestconfig._parser._groups if g.name == "specgate")
    assert sorted(name for option in group.options for name in option.names()) == sorted(options.OPTIONS)
