"""pytest wiring: options, the `gate` fixtures, method parametrization and ordering, the summary.

Everything it calls is plain Python (session.py and below). Gate tests ask for `method` (the
speculative methods) or `engine_method` (those plus the baseline); this plugin parametrizes them
from the profile and orders the items so each method's tests run together, baseline first, which is
what lets one engine at a time serve them all with one boot per method.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import pytest

from specgate.errors import EngineBootError, SpecgateError
from specgate.profile import BASELINE

_SESSION_KEY = pytest.StashKey["object"]()
_WATCH_KEY = pytest.StashKey["CorrectnessWatch"]()
GPU_PROFILE_ENV = "SPECGATE_GPU_PROFILE"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgate", "speculative-decoding regression gate")
    group.addoption(
        "--specgate-profile",
        metavar="NAME|PATH",
        default="auto",
        help="profile in fixtures/profiles (by name) or a TOML path. 'auto' (default): the GPU profile named "
        f"by ${GPU_PROFILE_ENV} when CUDA is present, otherwise cpu-tiny.",
    )
    group.addoption(
        "--specgate-methods",
        metavar="A,B",
        default="",
        type=_comma_list,
        help="run only these methods of the profile (default: all); the baseline always runs.",
    )
    group.addoption(
        "--update-baselines",
        action="store_true",
        default=False,
        help="write this run's measurements into baselines/<profile>/<hardware>.json (merged with what it did not "
        "measure) and print what moved; refused when a correctness test failed. Default: off.",
    )
    group.addoption(
        "--specgate-strict",
        action="store_true",
        default=False,
        help="a missing baseline fails instead of skipping (for CI). Default: off.",
    )
    group.addoption(
        "--specgate-out",
        metavar="DIR",
        default=None,
        type=Path,
        help="where results and engine logs go (default: results/<date-time>).",
    )


def _comma_list(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if value.strip() and not names:
        raise pytest.UsageError("--specgate-methods takes a comma-separated list of method names, e.g. ngram,eagle3")
    return names


def project_root(config: pytest.Config) -> Path:
    """The checkout that holds fixtures/profiles. pytest's rootdir is not always it: a path given as an
    option value outside the checkout (a profile in /tmp) moves rootdir to a common ancestor."""
    candidates = [Path(config.inipath).parent] if config.inipath else []
    candidates += [Path(config.rootpath), Path.cwd(), Path(__file__).resolve().parents[1]]
    for path in candidates:
        if (path / "fixtures" / "profiles").is_dir():
            return path
    return candidates[0]


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too (not only in pyproject.toml) for runs where pytest found no ini file.
    config.addinivalue_line("markers", "gpu: boots an inference engine (real vLLM); the gate itself")
    config.addinivalue_line("markers", "correctness: a failure here blocks --update-baselines")
    config.stash[_SESSION_KEY] = None
    config.stash[_WATCH_KEY] = watch = CorrectnessWatch()
    config.pluginmanager.register(watch, "specgate-correctness-watch")
    # Options given explicitly are checked now, where a UsageError prints as one clean paragraph;
    # otherwise the profile is parsed only once a gate test is collected.
    explicit = (
        config.getoption("--specgate-profile") != "auto"
        or config.getoption("--specgate-methods")
        or os.environ.get(GPU_PROFILE_ENV)
    )
    if explicit:
        gate_session(config)


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _profile_name(config: pytest.Config) -> str:
    name = config.getoption("--specgate-profile")
    if name != "auto":
        return name
    if not _cuda_available():
        return "cpu-tiny"
    gpu_profile = os.environ.get(GPU_PROFILE_ENV)
    if not gpu_profile:
        raise pytest.UsageError(
            f"--specgate-profile auto: CUDA is present, so a GPU profile is expected; set ${GPU_PROFILE_ENV} or pass "
            "--specgate-profile NAME (see fixtures/profiles/)."
        )
    return gpu_profile


def gate_session(config: pytest.Config):
    """Build the run session once, on first use, so runs without gate tests never parse a profile."""
    session = config.stash[_SESSION_KEY]
    if session is None:
        from specgate.profile import find_profile, load_profile
        from specgate.session import GateSession

        root = project_root(config)
        try:
            profile = load_profile(find_profile(_profile_name(config), root), root)
            methods = profile.select(config.getoption("--specgate-methods"))
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        out = config.getoption("--specgate-out") or root / "results" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        session = GateSession(
            profile,
            methods,
            root,
            Path(out),
            update_baselines=config.getoption("--update-baselines"),
            strict=config.getoption("--specgate-strict"),
        )
        config.stash[_SESSION_KEY] = session
    return session


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argname, with_baseline in (("method", False), ("engine_method", True)):
        if argname in metafunc.fixturenames:
            session = gate_session(metafunc.config)
            names = [m.name for m in session.methods]
            if with_baseline:
                names = [BASELINE, *names]
            metafunc.parametrize(argname, names, ids=names)
    if "category" in metafunc.fixturenames:
        session = gate_session(metafunc.config)
        try:
            categories = session.categories()
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("category", categories, ids=categories)


def _stage(item: pytest.Item) -> int:
    return getattr(item.module, "SPECGATE_STAGE", 50) if hasattr(item, "module") else 50


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Group gate items by method (baseline first), then by stage, keeping file order otherwise."""
    session = config.stash[_SESSION_KEY]
    if session is None:
        return
    order = {name: i for i, name in enumerate(session.method_order)}

    def key(indexed):
        index, item = indexed
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = params.get("method", params.get("engine_method"))
        if name is None and hasattr(getattr(item, "module", None), "SPECGATE_STAGE"):
            name = BASELINE  # a gate test without a method parameter is about the baseline engine
        if name is None:
            return (0, 0, 0, index)  # non-gate tests keep their place, first
        return (1, order.get(name, len(order)), _stage(item), index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


@pytest.fixture(scope="session")
def gate(request: pytest.FixtureRequest):
    """The run session (profile, prompts, engines); see specgate.session.GateSession."""
    session = gate_session(request.config)
    yield session
    session.release_current()


def _call(gate, fn, *args):
    """Run a session call; a boot failure becomes a skip (expected) or a one-paragraph failure."""
    try:
        return fn(*args)
    except EngineBootError as exc:
        reason = gate.expected_boot_failure(exc.method, exc)
        if reason:
            pytest.skip(reason)
        pytest.fail(f"{exc}\n--- engine log tail ---\n{exc.log_tail}", pytrace=False)
    except SpecgateError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def gate_call(gate):
    """`gate_call(fn, *args)`: a session measurement with boot failures reported as above."""
    return lambda fn, *args: _call(gate, fn, *args)


@pytest.fixture
def engine(gate, request):
    """The live engine of this test's method (baseline when it has none), booted during setup, so a
    boot failure shows as an error of this method's tests and nowhere else."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    name = params.get("method", params.get("engine_method", BASELINE))
    return _call(gate, gate.engine, name)


class CorrectnessWatch:
    """Collects failed `correctness` tests: --update-baselines refuses to write after any."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Failures of the test itself; an engine that did not boot (setup error) measured nothing.
        if report.failed and report.when == "call" and "correctness" in report.keywords:
            self.failures.append(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or not session.engines_booted:
        return
    session.release_current()
    terminalreporter.section("specgate")
    for line in session.summary_lines():
        terminalreporter.write_line(line)
    if session.update_baselines:
        terminalreporter.write_line(_update_baselines(session, config.stash[_WATCH_KEY].failures))


def _update_baselines(session, correctness_failures: list[str]) -> str:
    if correctness_failures:
        return (
            f"--update-baselines: refusing to write baselines: {len(correctness_failures)} correctness test(s) failed "
            f"in this run ({', '.join(correctness_failures[:3])}); a build that changes outputs must not become the "
            "new reference. Fix them and rerun."
        )
    if not session.measured:
        return "--update-baselines: nothing was measured in this run; no baseline written."
    try:
        return session.write_baselines()
    except SpecgateError as exc:
        return f"--update-baselines: not written: {exc}"
