"""pytest wiring: options, the `gate` fixtures, method parametrization and ordering, the summary.

Everything it calls is plain Python (session.py and below). Gate tests ask for `method` (the
speculative methods) or `engine_method` (those plus the baseline); this plugin parametrizes them
from the profile and orders the items so each method's tests run together, baseline first, which is
what lets one engine at a time serve them all with one boot per method.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path

import pytest

from specgate import scaleout
from specgate.errors import EngineBootError, NotMeasurable, SpecgateError
from specgate.profile import BASELINE

_SESSION_KEY = pytest.StashKey["object"]()
_WATCH_KEY = pytest.StashKey["CorrectnessWatch"]()
_OUTCOMES_KEY = pytest.StashKey["OutcomeRecorder"]()
_WORKERS_KEY = pytest.StashKey[list]()
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
        "--specgate-endpoint",
        metavar="METHOD=URL",
        action="append",
        default=[],
        help="measure an already running OpenAI-compatible vLLM server as METHOD instead of booting engines "
        "(repeatable; METHOD 'baseline' = a server without speculation, needed for speedup and equivalence). "
        "Memory and lifecycle are skipped: they are not visible from outside the server.",
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
    config.stash[_OUTCOMES_KEY] = recorder = OutcomeRecorder()
    config.pluginmanager.register(recorder, "specgate-outcomes")
    config.stash[_WORKERS_KEY] = []
    if getattr(config.option, "numprocesses", None) and not scaleout.worker_id() and not config.getoption("--specgate-out"):
        # One results directory for the whole run: the workers inherit it through the environment.
        os.environ.setdefault(scaleout.RUN_OUT_ENV, str(_default_out(project_root(config))))
    # Options given explicitly are checked now, where a UsageError prints as one clean paragraph;
    # otherwise the profile is parsed only once a gate test is collected.
    explicit = (
        config.getoption("--specgate-profile") != "auto"
        or config.getoption("--specgate-methods")
        or os.environ.get(GPU_PROFILE_ENV)
        or config.getoption("--specgate-endpoint")
    )
    if explicit:
        gate_session(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    """pytest-benchmark keeps the speedup trials' timings; unless told otherwise, its JSON goes into
    the results directory, where `pytest-benchmark compare` can read two runs side by side."""
    bench = getattr(session.config, "_benchmarksession", None)
    gs = session.config.stash.get(_SESSION_KEY, None)
    if bench is not None and not bench.json and not bench.disabled and gs is not None:
        gs.out_dir.mkdir(parents=True, exist_ok=True)
        bench.json = str(gs.out_dir / "benchmark.json")


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
            endpoints = None
            if config.getoption("--specgate-endpoint"):
                from specgate.endpoint import parse_endpoints

                endpoints = parse_endpoints(config.getoption("--specgate-endpoint"))
                served = [name for name in endpoints if name != BASELINE]
                methods = profile.select(served) if served else []
            else:
                methods = profile.select(config.getoption("--specgate-methods"))
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        out = config.getoption("--specgate-out") or os.environ.get(scaleout.RUN_OUT_ENV) or _default_out(root)
        try:
            scaleout.pin_worker(profile)  # before anything in this process touches CUDA
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        session = GateSession(
            profile,
            methods,
            root,
            Path(out),
            update_baselines=config.getoption("--update-baselines"),
            strict=config.getoption("--specgate-strict"),
            endpoints=endpoints,
        )
        if scaleout.worker_id():
            session.log_dir = session.out_dir / "engines" / scaleout.worker_id()
        config.stash[_SESSION_KEY] = session
    return session


def _ours(metafunc: pytest.Metafunc, argname: str) -> bool:
    """A gate argument this plugin fills in, unless the test parametrizes it itself."""
    if argname not in metafunc.fixturenames:
        return False
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if argname in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return False
    return True


def _default_out(root: Path) -> Path:
    return root / "results" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argname, with_baseline in (("method", False), ("engine_method", True)):
        if _ours(metafunc, argname):
            session = gate_session(metafunc.config)
            names = [m.name for m in session.methods]
            if with_baseline:
                names = [BASELINE, *names]
            metafunc.parametrize(argname, names, ids=names)
    if _ours(metafunc, "concurrency"):
        levels = gate_session(metafunc.config).profile.concurrency
        metafunc.parametrize("concurrency", levels, ids=[f"C={c}" for c in levels])
    if _ours(metafunc, "category"):
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
    recorder = config.stash[_OUTCOMES_KEY]
    gates, levels = set(), set()
    for item in items:
        described = _gate_item(item)
        if described:
            recorder.items[item.nodeid] = described
            gates.add(described[1])
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "concurrency" in params:
                levels.add(params["concurrency"])
    session.selected_gates = gates
    session.selected_levels = [c for c in session.profile.concurrency if c in levels]
    order = {name: i for i, name in enumerate(session.method_order)}

    def key(indexed):
        index, item = indexed
        params = getattr(getattr(item, "callspec", None), "params", {})
        name = params.get("method", params.get("engine_method"))
        if name is None and hasattr(getattr(item, "module", None), "SPECGATE_STAGE"):
            name = BASELINE  # a gate test without a method parameter is about the baseline engine
        if name is None:
            return (0, 0, 0, index)  # non-gate tests keep their place, first
        if name == BASELINE and getattr(item.module, "SPECGATE_GATE", "") == "lifecycle" and session.baseline_released_last():
            return (2, 0, 0, index)  # the baseline engine serves every method's paired trials first
        return (1, order.get(name, len(order)), _stage(item), index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Under xdist, schedule a method's gate tests as one unit (whatever --dist says): splitting them
    over workers would boot the method's engine on each. (xdist's own `loadgroup` renames node ids,
    which pytest 9 no longer lets it do, so the scope is read from the test id instead.)"""
    try:
        methods = gate_session(config).method_order
    except pytest.UsageError:
        return None  # no profile to group by: xdist's default scheduling
    return scaleout.method_scheduler(config, log, methods)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """Controller: keep what each worker measured (see pytest_sessionfinish)."""
    payload = getattr(node, "workeroutput", {}).get("specgate")
    if payload:
        node.config.stash[_WORKERS_KEY].append(json.loads(payload))


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Worker: shut the engine down, write this worker's baselines (file lock), and hand the
    controller its summary, outcomes and measurements table for the combined report."""
    config = session.config
    if not hasattr(config, "workeroutput"):
        return
    gs = config.stash.get(_SESSION_KEY, None)
    if gs is None or not (gs.engines_booted or gs.endpoints):
        return
    from specgate.results import measurement_table

    gs.release_all()
    outcomes = list(config.stash[_OUTCOMES_KEY].outcomes.values())
    payload = {
        "worker": scaleout.worker_id(),
        "lines": gs.summary_lines(),
        "outcomes": [o.__dict__ for o in outcomes],
        "table": measurement_table(gs, outcomes).to_json(orient="records"),
        "measured": gs.measured,
        "started": gs.started_wall,
    }
    if gs.update_baselines:
        payload["update"] = _update_baselines(gs, config.stash[_WATCH_KEY].failures)
    config.workeroutput["specgate"] = json.dumps(payload)


def _gate_item(item: pytest.Item) -> tuple[str, str, str] | None:
    """(method, gate, key) of a gate test, as the results table names them."""
    gate = getattr(getattr(item, "module", None), "SPECGATE_GATE", None)
    if gate is None:
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    method = params.get("method", params.get("engine_method", BASELINE))
    if "category" in params:
        key = params["category"]
    elif "concurrency" in params:
        key = f"C={params['concurrency']}"
    elif gate == "memory":
        key = "engine" if method == BASELINE else "overhead"
    else:
        key = {"equivalence": "greedy"}.get(gate, gate)
    return method, gate, key


class OutcomeRecorder:
    """Each gate test's outcome and message, for the results table and run.json."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, str, str]] = {}
        self.outcomes: dict[str, object] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from specgate.results import Outcome

        described = self.items.get(report.nodeid)
        if described is None:
            return
        if report.skipped:
            outcome = "skipped"
            longrepr = report.longrepr
            message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            message = message.removeprefix("Skipped: ")
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
            message = _failure_text(report.longreprtext)
        elif report.when == "call":
            outcome, message = "passed", ""
        else:
            return
        if report.nodeid in self.outcomes and outcome == "passed":
            return
        self.outcomes[report.nodeid] = Outcome(report.nodeid, *described, outcome, message)


def _failure_text(text: str, limit: int = 4000) -> str:
    """The assertion's own message ('E   ' lines of a traceback), or the whole text (pytrace=False)."""
    lines = [line[4:] for line in text.splitlines() if line.startswith("E   ")]
    return ("\n".join(lines) if lines else text.strip())[:limit]


@pytest.fixture(scope="session")
def gate(request: pytest.FixtureRequest):
    """The run session (profile, prompts, engines); see specgate.session.GateSession."""
    session = gate_session(request.config)
    yield session
    session.release_all()


def _call(gate, fn, *args):
    """Run a session call; a boot failure becomes a skip (expected) or a one-paragraph failure."""
    try:
        return fn(*args)
    except NotMeasurable as exc:
        pytest.skip(str(exc))
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
    if name == BASELINE and gate.reference_ready:
        return None  # measured already, before a method's engine booted (xdist worker); no second boot
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
    workers = config.stash.get(_WORKERS_KEY, [])
    if workers:
        _summarize_workers(terminalreporter, config, workers)
        return
    session = config.stash.get(_SESSION_KEY, None)
    if session is None or not (session.engines_booted or session.endpoints):
        return
    session.release_all()
    terminalreporter.section("specgate")
    lines = session.summary_lines()
    for line in lines:
        terminalreporter.write_line(line)
    if session.update_baselines:
        terminalreporter.write_line(_update_baselines(session, config.stash[_WATCH_KEY].failures))
    _write_results(terminalreporter, session, list(config.stash[_OUTCOMES_KEY].outcomes.values()), lines)


def _summarize_workers(terminalreporter, config: pytest.Config, workers: list[dict]) -> None:
    """Controller of an xdist run: every worker's summary and baseline update, one combined report."""
    from specgate.results import Outcome, write_combined

    terminalreporter.section("specgate")
    for w in sorted(workers, key=lambda w: w["worker"]):
        terminalreporter.write_line(f"[{w['worker']}]")
        for line in w["lines"]:
            terminalreporter.write_line(line)
        if "update" in w:
            terminalreporter.write_line(w["update"])
    try:
        session = gate_session(config)
        outcomes = [Outcome(**o) for w in workers for o in w["outcomes"]]
        lines = [f"[{w['worker']}] {line}" for w in workers for line in w["lines"]]
        paths = write_combined(session, workers, outcomes, lines)
    except Exception as exc:  # the verdicts stand; a report that cannot be written must not hide them
        terminalreporter.write_line(f"specgate: combined results not written: {type(exc).__name__}: {exc}")
        return
    terminalreporter.write_line(f"results: {paths['summary']}, {paths['html']}, {paths['csv']}")


def _write_results(terminalreporter, session, outcomes, lines) -> None:
    from specgate.results import write_run

    try:
        paths = write_run(session, outcomes, session.started_wall, lines)
    except Exception as exc:  # the verdicts stand; a report that cannot be written must not hide them
        terminalreporter.write_line(f"specgate: results not written to {session.out_dir}: {type(exc).__name__}: {exc}")
        return
    terminalreporter.write_line(f"results: {paths['summary']}, {paths['html']}, {paths['csv']}")


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
