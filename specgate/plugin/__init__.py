"""The pytest plugin (entry point `specgate.plugin`): the marker, ordering and fixtures (this module),
the `--specgate-*` options (options), what a run records of each test (recorders), what an xdist worker
hands the controller (xdist_handover) and how a run spreads over GPUs (scaleout). The hook
specification a conftest.py implements is specgate.hooks, the fake engine specgate.testing (public
modules beside this package).

Neighbours: below are run/ (the session this wiring drives), engines/, checks/, store/ and profile/;
above are release/ and cli/ only. Nothing below imports pytest wiring.

pytest wiring only: the `specgate` marker, parametrization, ordering, fixtures, the summary; the
options and the plan built from them are options.py's, what is recorded as the run goes recorders.py's,
an xdist run's hand-over xdist_handover.py's (what each worker gives the controller).

A gate test declares what it judges with `@pytest.mark.specgate(gate=..., stage=...)` (validated at
collection) and asks for `method` (the speculative methods) or `engine_method` (those plus the
baseline), and `category` / `concurrency` where it has one; this plugin parametrizes them from the
profile and orders the items so each method's tests run together, baseline first, by stage: one
engine at a time serves them all with one boot per method. The `judge` fixture boots the test's
engine during setup and returns `judge(method, param) -> Judgement`. Everything else is plain
Python: session.py and below.

When it acts. Installed, the plugin is loaded by every pytest run of the environment (a GPU runner's venv
also runs the team's own tests). It acts on a gate run only, decided before collection from what the
command line says (xdist's controller picks its scheduler and starts its workers before any test is
collected; each worker decides the same from the same options), by options.selects_gate:
  - with `-m EXPR`: a gate run when EXPR, by pytest's own expression rules, keeps a gate test (markers
    `gpu` and `specgate`, the correctness gates `correctness` too) and leaves out a test with no marker:
    `-m gpu`, `-m "gpu and not slow"`, `-m correctness` are gate runs; `-m "not gpu"`,
    `-m "not (gpu or slow)"` and `-m "not slow"` are not, whatever specgate option is also given;
  - without `-m`: a gate run when a specgate option is given (any --specgate-* or --update-baselines, other
    than its default); $SPECGATE_GPU_PROFILE alone is a runner's environment, not a request;
  - `-k` does not decide: it selects by names, unknown before collection (in a gate run it narrows the
    gate's tests).
Any other run goes as if specgate were not installed: xdist schedules as its --dist says, no SPECGATE_*
(or VLLM_*) variable is set, no temporary or results directory made, no signal handler installed,
pytest-benchmark's options and pytest's log handlers untouched, and a test's own fixture named `method`,
`category`, `concurrency` or `temperature` is its own (only tests marked `specgate` are parametrized
here). Gate tests such a run collects anyway (`pytest tests/gate`, no -m) still get their session and
run, as plain tests otherwise. The ini option `specgate_xdist_scheduler = true` gives every `-n` run of
a project specgate's scheduler (this project's own suite: its `xdist_group`s, its slowest tests first).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specgate.checks import Verdict
from specgate.engines import logstream
from specgate.errors import EngineBootError, EngineDied, NotMeasurable, SpecgateError
from specgate.gates import CONCURRENCY, GATES, LIFECYCLE, Gate, gate_named
from specgate.plugin import options, scaleout, xdist_handover
from specgate.plugin.recorders import CAUSE, MESSAGE, CorrectnessWatch, OutcomeRecorder, RunLife
from specgate.profile import BASELINE
from specgate.store.run_record import DIED, NO_BOOT

_PLAN_KEY = pytest.StashKey["object"]()
_SESSION_KEY = pytest.StashKey["object"]()
_OUT_KEY = pytest.StashKey[Path]()
_WATCH_KEY = pytest.StashKey["CorrectnessWatch"]()
_OUTCOMES_KEY = pytest.StashKey["OutcomeRecorder"]()
_WORKERS_KEY = pytest.StashKey[list]()
_RUN_KEY = pytest.StashKey["RunLife"]()
_GROUPS_KEY = pytest.StashKey[str]()  # the controller's directory of the workers' xdist groups
_SCHEDULE_KEY = pytest.StashKey[bool]()  # whether specgate's xdist scheduler serves this run
MARKERS = (
    "gpu: boots an inference engine (real vLLM); the gate itself",
    "correctness: a failure here blocks --update-baselines (given to the tests of every gate that guards "
    f"correctness: {', '.join(g for g in GATES if g.correctness)})",
    f"specgate(gate, stage=None): a gate test; gate is one of {', '.join(GATES)}; a method's tests run by stage, "
    f"lowest first (default: the gate's, {', '.join(f'{g} {g.stage}' for g in sorted(GATES, key=lambda g: g.stage))})",
)


def pytest_addhooks(pluginmanager) -> None:
    from specgate import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


@pytest.hookimpl(tryfirst=True)  # before pytest-benchmark reads its --benchmark-json
def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:  # here too (not only in pyproject.toml) for runs where pytest found no ini file
        config.addinivalue_line("markers", line)
    config.stash[_SESSION_KEY] = config.stash[_PLAN_KEY] = None
    config.stash[_WATCH_KEY] = watch = CorrectnessWatch()
    config.pluginmanager.register(watch, "specgate-correctness-watch")
    config.stash[_OUTCOMES_KEY] = recorder = OutcomeRecorder()
    config.pluginmanager.register(recorder, "specgate-outcomes")
    config.stash[_WORKERS_KEY] = []
    config.stash[_RUN_KEY] = life = RunLife()
    gate = options.selects_gate(config)  # the same answer in xdist's controller and in each of its workers
    config.stash[_SCHEDULE_KEY] = gate or config.getini(options.XDIST_INI)
    if gate:
        life.start(config, options.project_root(config))
        config.pluginmanager.register(life, "specgate-run-life")
    out = (
        config.getoption("--specgate-out")
        or os.environ.get(scaleout.RUN_OUT_ENV)
        or options.default_out(options.project_root(config))
    )
    config.stash[_OUT_KEY] = Path(out)
    if getattr(config.option, "numprocesses", None) and not scaleout.worker_id(config):
        if gate:
            os.environ.setdefault(scaleout.RUN_OUT_ENV, str(out))  # one results directory: workers inherit it
        if config.stash[_SCHEDULE_KEY]:
            import tempfile

            config.stash[_GROUPS_KEY] = os.environ[scaleout.GROUPS_ENV] = tempfile.mkdtemp(prefix="specgate-groups-")
    if gate and hasattr(config.option, "benchmark_json") and not config.option.benchmark_json:
        # pytest-benchmark keeps the speedup trials' timings next to the results, where
        # `pytest-benchmark compare` can read two runs side by side.
        Path(out).mkdir(parents=True, exist_ok=True)
        config.option.benchmark_json = Path(out) / "benchmark.json"
    # Options given explicitly are checked now, where a UsageError prints as one clean paragraph;
    # otherwise the profile is parsed only once a gate test is collected.
    explicit = (
        config.getoption("--specgate-profile") != "auto"
        or config.getoption("--specgate-methods")
        or os.environ.get(options.GPU_PROFILE_ENV)
        or config.getoption("--specgate-endpoint")
    )
    if gate and explicit:
        run_plan(config)


def run_plan(config: pytest.Config):
    """The run's plan (profile, methods, flags), built once on first use, so runs without gate tests
    never parse a profile."""
    if config.stash[_PLAN_KEY] is None:
        config.stash[_PLAN_KEY] = options.plan(config, config.stash[_OUT_KEY])
    return config.stash[_PLAN_KEY]


# -- collection -------------------------------------------------------------------------------------
def _ours(metafunc: pytest.Metafunc, argname: str) -> bool:
    """A gate argument this plugin fills in: in a test marked `specgate`, unless the test parametrizes it itself
    (another test's own fixture of that name is its own)."""
    if argname not in metafunc.fixturenames or metafunc.definition.get_closest_marker("specgate") is None:
        return False
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if argname in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return False
    return True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argname, with_baseline in (("method", False), ("engine_method", True)):
        if _ours(metafunc, argname):
            names = run_plan(metafunc.config).method_order[(0 if with_baseline else 1) :]
            metafunc.parametrize(argname, names, ids=names)
    if _ours(metafunc, "concurrency"):
        levels = run_plan(metafunc.config).profile.concurrency
        metafunc.parametrize("concurrency", levels, ids=[f"C={c}" for c in levels])
    if _ours(metafunc, "category"):
        try:
            categories = run_plan(metafunc.config).inputs.categories()
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("category", categories, ids=categories)
    if _ours(metafunc, "temperature") and len(temperatures := run_plan(metafunc.config).profile.temperatures) > 1:
        metafunc.parametrize("temperature", temperatures, ids=[f"T{t:g}" for t in temperatures])


def gate_of(item: pytest.Item) -> tuple[Gate, int] | None:
    """(gate, stage) of a test marked `specgate`, validated: the registry's entry (specgate.gates) and the
    marker's stage, else the gate's; None for other tests."""
    mark = item.get_closest_marker("specgate")
    if mark is None:
        return None
    kwargs = dict(mark.kwargs)
    name, stage = kwargs.pop("gate", mark.args[0] if mark.args else None), kwargs.pop("stage", None)
    gate = gate_named(name) if isinstance(name, str) else None
    if gate is None or not (stage is None or isinstance(stage, int)) or isinstance(stage, bool) or kwargs:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.specgate takes gate=<one of {', '.join(GATES)}> and an integer stage=; "
            f"got gate={name!r}, stage={stage!r}{f', and unknown {sorted(kwargs)}' if kwargs else ''}."
        )
    return gate, gate.stage if stage is None else stage


def pytest_itemcollected(item: pytest.Item) -> None:
    """A gate test asks for its gate's axis only (the registry's `Gate.axis`: its result keys are made from
    it), and a test of a gate that guards correctness (`Gate.correctness`) is a `correctness` test: marked
    before -m selects (`-m correctness`) and before a failure of it is watched for."""
    if not (gate := gate_of(item)):
        return
    if problem := gate[0].axis_problem(getattr(item, "fixturenames", ())):
        raise pytest.UsageError(f"{item.nodeid}: {problem}")
    if gate[0].correctness and not item.get_closest_marker("correctness"):
        item.add_marker(pytest.mark.correctness)


def method_of(item: pytest.Item) -> str:
    """The method a gate test judges: its `method` / `engine_method` parameter, else the baseline."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("method", params.get("engine_method", BASELINE))


def _param_of(item: pytest.Item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "category" in params:
        return params["category"], params.get("temperature", 0.0)
    return params.get("concurrency")


@pytest.hookimpl(trylast=True)  # after -m / -k deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Build the session for what was collected, then group gate items by method (baseline first),
    then by stage, keeping file order otherwise."""
    worker, groups = scaleout.worker_id(config), os.environ.get(scaleout.GROUPS_ENV)
    if worker and groups and config.stash[_SCHEDULE_KEY]:  # (not a directory an outer run's workers passed down)
        scaleout.record_groups(items, groups, worker)  # for the controller's scheduler (method_scheduler)
    gates = {item: gate_of(item) for item in items}
    if not any(gates.values()):
        return
    plan = run_plan(config)
    if off := [item for item, gate in gates.items() if gate and not plan.runs_here(gate[0], method_of(item))]:
        config.hook.pytest_deselected(items=off)
        items[:] = [item for item in items if item not in off]
        gates = {item: gates[item] for item in items}
    recorder = config.stash[_OUTCOMES_KEY]
    levels = set()
    for item, gate in gates.items():
        if gate:
            method = method_of(item)
            recorder.items[item.nodeid] = (method, gate[0], gate[0].key(_param_of(item), baseline=method == BASELINE))
            if gate[0].axis == CONCURRENCY and _param_of(item) is not None:
                levels.add(_param_of(item))
    from specgate.run.session import GateSession, Selection

    selection = Selection(
        frozenset(g[0] for g in gates.values() if g), tuple(c for c in plan.profile.concurrency if c in levels)
    )
    session = config.stash[_SESSION_KEY] = GateSession(plan, selection, boot=_booter(config))
    logstream.keep_out_of_reports(config.pluginmanager.get_plugin("logging-plugin"))
    order = {name: i for i, name in enumerate(plan.method_order)}

    def key(indexed):
        index, item = indexed
        if not gates[item]:
            return (0, 0, 0, index)  # other tests keep their place, first
        gate, stage = gates[item]
        name = method_of(item)
        if name == BASELINE and gate == LIFECYCLE and session.baseline_released_last:
            return (2, 0, 0, index)  # the baseline engine serves every method's paired trials first
        return (1, order.get(name, len(order)), stage, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def _booter(config: pytest.Config):
    """vLLM's engine, unless a conftest answers pytest_specgate_boot_engine (specgate.testing does)."""

    def boot(profile, method, root, log_path):
        engine = config.hook.pytest_specgate_boot_engine(profile=profile, method=method, root=root, log_path=log_path)
        if engine is None:
            from specgate.engines.engine import boot_engine

            engine = boot_engine(profile, method, root, log_path)
        return engine

    return boot


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Under xdist, in a gate run (or where the ini option specgate_xdist_scheduler asks), schedule a method's
    gate tests as one unit (whatever --dist says): splitting them over workers would boot the method's engine on
    each; and the tests of one `xdist_group` as one. (xdist's own `loadgroup` renames node ids, which pytest 9
    no longer lets it do, so the method is read from the test id and the group from what the workers
    recorded.) Any other run: None, and xdist schedules as its --dist says."""
    if not config.stash.get(_SCHEDULE_KEY, False):
        return None
    try:
        methods = run_plan(config).method_order
    except pytest.UsageError:
        methods = []  # no profile: no gate tests to keep together, only the groups
    return scaleout.method_scheduler(config, log, methods, config.stash.get(_GROUPS_KEY, None))


# -- fixtures ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def specgate_plan(request: pytest.FixtureRequest):
    """The run's plan: profile, methods, root, results directory, prompt inputs."""
    return run_plan(request.config)


@pytest.fixture
def temperature() -> float:
    """The sampling temperature of an acceptance test: greedy, unless the profile lists several
    ([acceptance] temperatures), which parametrize it."""
    return 0.0


@pytest.fixture(scope="session")
def gate(request: pytest.FixtureRequest):
    """The run session (specgate.run.session.GateSession), built at collection for the collected tests."""
    session = request.config.stash[_SESSION_KEY]
    if session is None:
        pytest.fail("no specgate session: this fixture serves tests marked @pytest.mark.specgate", pytrace=False)
    yield session
    session.release_all()


def _guard(gate, node: pytest.Item, fn, *args, **kwargs):
    """Run a session call; what cannot be measured is a skip, a boot failure a skip (expected by the
    profile) or a one-paragraph failure, any other SpecgateError a failure without a traceback. The
    skip or failure is raised outside the except block, so pytest says it once (no "During handling
    of the above exception"). An engine that died or did not boot is noted on the test (the run
    record's Outcome.cause): its failure is no verdict of its check."""
    cause = ""
    try:
        return fn(*args, **kwargs)
    except NotMeasurable as exc:
        skip = failure = str(exc) or type(exc).__name__
    except EngineBootError as exc:
        skip, cause = gate.host.expected_boot_failure(exc.method, exc), NO_BOOT
        failure = str(exc) if exc.repeat else f"{exc}\n--- engine log tail ---\n{exc.log_tail}"
    except EngineDied as exc:
        skip, failure, cause = None, str(exc), DIED
    except SpecgateError as exc:
        skip, failure = None, str(exc)
    if cause:
        node.user_properties.append((CAUSE, cause))
    if skip:
        pytest.skip(skip)
    node.user_properties.append((MESSAGE, failure))
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def judge(gate, request: pytest.FixtureRequest):
    """`judge(method, param=None, **options) -> Judgement` for this test's gate. The test's engine
    boots during setup, so a boot failure shows as an error of this method's tests and nowhere else;
    a judgement with nothing to compare against skips here, saying why."""
    gate_name, _ = gate_of(request.node)
    _guard(gate, request.node, gate.boot, method_of(request.node), gate_name)

    def judge_(method: str, param=None, **options):
        judgement = _guard(gate, request.node, gate.judge, gate_name, method, param, **options)
        if judgement.verdict is Verdict.SKIP:
            pytest.skip(judgement.message)
        if not judgement.passed:  # what the run record keeps when the test's `assert j.passed` fails
            request.node.user_properties.append((MESSAGE, judgement.message))
        return judgement

    return judge_


# -- the end: summary, baselines, results -----------------------------------------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """Controller: keep what each worker measured (see pytest_sessionfinish)."""
    payload = getattr(node, "workeroutput", {}).get("specgate")
    if payload:
        node.config.stash[_WORKERS_KEY].append(json.loads(payload))


def _ran(session, config: pytest.Config) -> bool:
    """Whether the run has something to report: an engine booted, an endpoint driven, an interrupt, or a
    gate test that ran and was skipped before any engine could boot (a profile this CPU cannot run, a
    method this vLLM does not offer): the summary then says why."""
    if session is None:
        return False
    judged = bool(config.stash[_OUTCOMES_KEY].outcomes)
    return bool(session.host.engines_booted or session.plan.endpoints or session.interrupted or judged)


def pytest_unconfigure(config: pytest.Config) -> None:
    if groups := config.stash.get(_GROUPS_KEY, None):
        import shutil

        shutil.rmtree(groups, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Worker: shut the engine down, write this worker's baselines (file lock), and hand the
    controller its summary, outcomes and measurements table for the combined report."""
    config = session.config
    if not hasattr(config, "workeroutput"):
        return
    gs = config.stash.get(_SESSION_KEY, None)
    if not _ran(gs, config):
        return
    gs.release_all()
    outcomes = list(config.stash[_OUTCOMES_KEY].outcomes.values())
    config.workeroutput["specgate"] = xdist_handover.payload(
        gs, outcomes, config.stash[_WATCH_KEY].failures, scaleout.worker_id(config)
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    from specgate.run import results

    handed = config.stash.get(_WORKERS_KEY, [])
    if handed:  # the controller of an xdist run
        terminalreporter.section("specgate")
        for line in xdist_handover.summary(handed):
            terminalreporter.write_line(line)
        from specgate.run.session import GateSession

        _report_written(
            terminalreporter,
            config.stash[_OUT_KEY],
            lambda: xdist_handover.write_combined(GateSession(run_plan(config)), handed),
        )
        return
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        session.interrupted = config.stash[_RUN_KEY].interrupted
    if not _ran(session, config):
        return
    session.release_all()
    terminalreporter.section("specgate")
    outcomes = list(config.stash[_OUTCOMES_KEY].outcomes.values())
    try:
        lines = results.summary_lines(session, outcomes)
    except Exception as exc:  # the verdicts stand; a summary that cannot be built must not crash pytest
        lines = [f"specgate: the summary could not be built ({type(exc).__name__}: {exc}); the results files follow"]
    for line in lines:
        terminalreporter.write_line(line)
    if session.plan.update_baselines:
        terminalreporter.write_line(session.write_baselines(config.stash[_WATCH_KEY].failures))
    _report_written(
        terminalreporter,
        session.plan.out_dir,
        lambda: results.write_run(session, outcomes, session.started_wall, lines),
    )


def _report_written(terminalreporter, out: Path, write) -> None:
    try:
        paths = write()
    except Exception as exc:  # the verdicts stand; a report that cannot be written must not hide them
        terminalreporter.write_line(f"specgate: results not written to {out}: {type(exc).__name__}: {exc}")
        return
    terminalreporter.write_line(f"results: {paths['summary']}, {paths['html']}, {paths['csv']}")
