"""pytest wiring only: options, the `specgate` marker, parametrization, ordering, fixtures, the summary.

A gate test declares what it judges with `@pytest.mark.specgate(gate=..., stage=...)` (validated at
collection) and asks for `method` (the speculative methods) or `engine_method` (those plus the
baseline), and `category` / `concurrency` where it has one; this plugin parametrizes them from the
profile and orders the items so each method's tests run together, baseline first, by stage: one
engine at a time serves them all with one boot per method. The `judge` fixture boots the test's
engine during setup and returns `judge(method, param) -> Judgement`. Everything else is plain
Python: session.py and below.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from pathlib import Path

import pytest

from specgate import scaleout
from specgate.checks import GATES, key_of
from specgate.errors import EngineBootError, NotMeasurable, SpecgateError
from specgate.profile import BASELINE, SCENARIOS

_PLAN_KEY = pytest.StashKey["object"]()
_SESSION_KEY = pytest.StashKey["object"]()
_OUT_KEY = pytest.StashKey[Path]()
_WATCH_KEY = pytest.StashKey["CorrectnessWatch"]()
_OUTCOMES_KEY = pytest.StashKey["OutcomeRecorder"]()
_WORKERS_KEY = pytest.StashKey[list]()
_RUN_KEY = pytest.StashKey["RunLife"]()
GPU_PROFILE_ENV = "SPECGATE_GPU_PROFILE"
DEFAULT_STAGE = 50
MARKERS = (
    "gpu: boots an inference engine (real vLLM); the gate itself",
    "correctness: a failure here blocks --update-baselines",
    f"specgate(gate, stage={DEFAULT_STAGE}): a gate test; gate is one of {', '.join(GATES)}; lower stages of a "
    "method run first",
)


def pytest_addhooks(pluginmanager) -> None:
    from specgate import hooks

    pluginmanager.add_hookspecs(hooks)


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
        "--specgate-dtype",
        metavar="DTYPE",
        default=None,
        choices=("float32", "bfloat16", "float16"),
        help="run every engine in this dtype instead of the profile's (default: the profile's). float32 also makes "
        "equivalence exact: the equivalence pass for targets that fit (`-k equivalence`), without bf16 near-ties.",
    )
    group.addoption(
        "--specgate-kill-stale",
        action="store_true",
        default=False,
        help="stop engine and server processes an earlier run of this checkout left behind (found from its state "
        "file in results/.running/) before this run starts. Default: off (they are only reported).",
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
    if _selects_gate(config):
        life.start(config)
        config.pluginmanager.register(life, "specgate-run-life")
    out = config.getoption("--specgate-out") or os.environ.get(scaleout.RUN_OUT_ENV) or _default_out(project_root(config))
    config.stash[_OUT_KEY] = Path(out)
    if getattr(config.option, "numprocesses", None) and not scaleout.worker_id(config):
        os.environ.setdefault(scaleout.RUN_OUT_ENV, str(out))  # one results directory: workers inherit it
    if _selects_gate(config) and hasattr(config.option, "benchmark_json") and not config.option.benchmark_json:
        # pytest-benchmark keeps the speedup trials' timings next to the results, where
        # `pytest-benchmark compare` can read two runs side by side.
        Path(out).mkdir(parents=True, exist_ok=True)
        config.option.benchmark_json = Path(out) / "benchmark.json"
    # Options given explicitly are checked now, where a UsageError prints as one clean paragraph;
    # otherwise the profile is parsed only once a gate test is collected.
    explicit = (
        config.getoption("--specgate-profile") != "auto"
        or config.getoption("--specgate-methods")
        or os.environ.get(GPU_PROFILE_ENV)
        or config.getoption("--specgate-endpoint")
    )
    if explicit:
        run_plan(config)


def _selects_gate(config: pytest.Config) -> bool:
    """`-m gpu` (or an expression that asks for gpu, not for its absence)."""
    return bool(re.search(r"(?<!not )\bgpu\b", config.getoption("markexpr", "") or ""))


def _cuda_available() -> bool:
    if _torch_is_cpu_only_build():
        return False  # without importing torch (seconds): every `pytest` run with the profile `auto` asks
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _torch_is_cpu_only_build(version_py: Path | None = None) -> bool:
    """True when the installed torch is a CPU-only build (its `torch/version.py` names no CUDA, HIP or
    XPU toolkit), read without importing torch; False when that cannot be told."""
    import ast
    import importlib.util

    try:
        if version_py is None:
            spec = importlib.util.find_spec("torch")
            if spec is None or not spec.submodule_search_locations:
                return False
            version_py = Path(spec.submodule_search_locations[0]) / "version.py"
        tree = ast.parse(version_py.read_text())
    except (OSError, SyntaxError, ValueError, ImportError):
        return False
    built_for = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip", "xpu") and node.value is not None:
            built_for[target.id] = ast.literal_eval(node.value) if isinstance(node.value, ast.Constant) else "?"
    return {"cuda", "hip"} <= set(built_for) and not any(built_for.values())


def _torch_build() -> str:
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return f"torch {torch.__version__}, built for CUDA {torch.version.cuda}" if torch.version.cuda else f"torch {torch.__version__}, a CPU-only build"


def _profile_name(config: pytest.Config) -> str:
    name = config.getoption("--specgate-profile")
    if name != "auto":
        return name
    gpu_profile = os.environ.get(GPU_PROFILE_ENV)
    if not _cuda_available():
        if gpu_profile:
            # a GPU runner whose driver or torch build lost CUDA must not pass on the toy CPU profile
            raise pytest.UsageError(
                f"${GPU_PROFILE_ENV}={gpu_profile} asks for a GPU profile, but torch sees no CUDA device here "
                f"({_torch_build()}); fix the runner's NVIDIA driver or install the CUDA build of vLLM "
                f"(README, 'With a GPU'), or unset ${GPU_PROFILE_ENV} to run the CPU profile cpu-tiny."
            )
        return "cpu-tiny"
    if not gpu_profile:
        raise pytest.UsageError(
            f"--specgate-profile auto: CUDA is present, so a GPU profile is expected; set ${GPU_PROFILE_ENV} or pass "
            "--specgate-profile NAME (see fixtures/profiles/)."
        )
    return gpu_profile


def run_plan(config: pytest.Config):
    """The run's plan (profile, methods, flags), built once on first use, so runs without gate tests
    never parse a profile."""
    plan = config.stash[_PLAN_KEY]
    if plan is None:
        from specgate.profile import find_profile, load_profile
        from specgate.session import RunPlan

        root = project_root(config)
        try:
            profile = load_profile(find_profile(_profile_name(config), root), root)
            if dtype := config.getoption("--specgate-dtype"):
                profile = profile.with_dtype(dtype)
            profile = _calibrated(profile, root)
            endpoints = None
            if config.getoption("--specgate-endpoint"):
                from specgate.endpoint import parse_endpoints

                endpoints = parse_endpoints(config.getoption("--specgate-endpoint"))
                served = [name for name in endpoints if name != BASELINE]
                methods = profile.select(served) if served else []
            else:
                methods = profile.select(config.getoption("--specgate-methods"))
            scaleout.pin_worker(profile, config=config)  # before anything in this process touches CUDA
        except SpecgateError as exc:
            raise pytest.UsageError(str(exc)) from None
        out = config.stash[_OUT_KEY]
        log_dir = out / "engines" / scaleout.worker_id(config) if scaleout.worker_id(config) else None
        plan = RunPlan(
            profile, methods, root, out, update_baselines=config.getoption("--update-baselines"),
            strict=config.getoption("--specgate-strict"), endpoints=endpoints, log_dir=log_dir,
        )
        config.stash[_PLAN_KEY] = plan
    return plan


def _calibrated(profile, root: Path):
    """The profile with this machine's calibrated tolerances over its own, where `specgate calibrate`
    wrote some (baselines/<profile>/<hardware>.tolerance.toml)."""
    from specgate import tolerances
    from specgate.baselines import baseline_path, detect_device, hardware_key

    hardware = hardware_key(*detect_device(profile.hardware))
    return tolerances.apply(profile, tolerances.path_for(baseline_path(root, profile.baselines_name, hardware)))


def _default_out(root: Path) -> Path:
    return root / "results" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")


# -- collection -------------------------------------------------------------------------------------
def _ours(metafunc: pytest.Metafunc, argname: str) -> bool:
    """A gate argument this plugin fills in, unless the test parametrizes it itself."""
    if argname not in metafunc.fixturenames:
        return False
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
        if argname in ([n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)):
            return False
    return True


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argname, with_baseline in (("method", False), ("engine_method", True)):
        if _ours(metafunc, argname):
            names = run_plan(metafunc.config).method_order[(0 if with_baseline else 1):]
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


def gate_of(item: pytest.Item) -> tuple[str, int] | None:
    """(gate, stage) of a test marked `specgate`, validated; None for other tests."""
    mark = item.get_closest_marker("specgate")
    if mark is None:
        return None
    kwargs = dict(mark.kwargs)
    gate, stage = kwargs.pop("gate", mark.args[0] if mark.args else None), kwargs.pop("stage", DEFAULT_STAGE)
    if gate not in GATES or not isinstance(stage, int) or isinstance(stage, bool) or kwargs:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.specgate takes gate=<one of {', '.join(GATES)}> and an integer stage=; "
            f"got gate={gate!r}, stage={stage!r}{f', and unknown {sorted(kwargs)}' if kwargs else ''}."
        )
    return gate, stage


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
    gates = {item: gate_of(item) for item in items}
    if not any(gates.values()):
        return
    plan = run_plan(config)
    if off := [item for item, gate in gates.items() if gate and not _runs_here(plan, gate[0], method_of(item))]:
        config.hook.pytest_deselected(items=off)
        items[:] = [item for item in items if item not in off]
        gates = {item: gates[item] for item in items}
    recorder = config.stash[_OUTCOMES_KEY]
    levels = set()
    for item, gate in gates.items():
        if gate:
            method = method_of(item)
            recorder.items[item.nodeid] = (method, gate[0], key_of(gate[0], method, _param_of(item)))
            if gate[0] == "speedup":
                levels.add(_param_of(item))
    from specgate.session import GateSession, Selection

    selection = Selection(frozenset(g[0] for g in gates.values() if g), tuple(c for c in plan.profile.concurrency if c in levels))
    session = config.stash[_SESSION_KEY] = GateSession(plan, selection, boot=_booter(config))
    order = {name: i for i, name in enumerate(plan.method_order)}

    def key(indexed):
        index, item = indexed
        if not gates[item]:
            return (0, 0, 0, index)  # other tests keep their place, first
        gate, stage = gates[item]
        name = method_of(item)
        if name == BASELINE and gate == "lifecycle" and session.baseline_released_last:
            return (2, 0, 0, index)  # the baseline engine serves every method's paired trials first
        return (1, order.get(name, len(order)), stage, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def _runs_here(plan, gate: str, method: str) -> bool:
    """Whether the run has this gate test. A canary (a deliberately worse configuration) runs the gates it
    is a canary for, its absolute floors' acceptance, and equivalence and lifecycle as every engine does:
    its other gates would judge a configuration nobody serves. A scenario runs where the profile has its
    `[scenarios.<gate>]` table, for the methods (the baseline engine only as the structured scenario's
    reference)."""
    spec = plan.profile.methods.get(method)
    if gate in SCENARIOS:
        if gate not in plan.profile.scenarios.enabled:
            return False
        return gate == "structured" if method == BASELINE else not spec.canary_of
    if spec is None or not spec.canary_of:
        return True
    return gate in ("equivalence", "lifecycle", *spec.canary_of) or (gate == "acceptance" and bool(spec.floors))


def _booter(config: pytest.Config):
    """vLLM's engine, unless a conftest answers pytest_specgate_boot_engine (specgate.testing does)."""

    def boot(profile, method, root, log_path):
        engine = config.hook.pytest_specgate_boot_engine(profile=profile, method=method, root=root, log_path=log_path)
        if engine is None:
            from specgate.engine import boot_engine

            engine = boot_engine(profile, method, root, log_path)
        return engine

    return boot


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """Under xdist, schedule a method's gate tests as one unit (whatever --dist says): splitting them
    over workers would boot the method's engine on each. (xdist's own `loadgroup` renames node ids,
    which pytest 9 no longer lets it do, so the scope is read from the test id instead.)"""
    try:
        methods = run_plan(config).method_order
    except pytest.UsageError:
        return None  # no profile to group by: xdist's default scheduling
    return scaleout.method_scheduler(config, log, methods)


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
    """The run session (specgate.session.GateSession), built at collection for the collected tests."""
    session = request.config.stash[_SESSION_KEY]
    if session is None:
        pytest.fail("no specgate session: this fixture serves tests marked @pytest.mark.specgate", pytrace=False)
    yield session
    session.release_all()


def _guard(gate, fn, *args, **kwargs):
    """Run a session call; what cannot be measured is a skip, a boot failure a skip (expected by the
    profile) or a one-paragraph failure, any other SpecgateError a failure without a traceback. The
    skip or failure is raised outside the except block, so pytest says it once (no "During handling
    of the above exception")."""
    try:
        return fn(*args, **kwargs)
    except NotMeasurable as exc:
        skip = failure = str(exc) or type(exc).__name__
    except EngineBootError as exc:
        skip = gate.host.expected_boot_failure(exc.method, exc)
        failure = str(exc) if exc.repeat else f"{exc}\n--- engine log tail ---\n{exc.log_tail}"
    except SpecgateError as exc:
        skip, failure = None, str(exc)
    if skip:
        pytest.skip(skip)
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def judge(gate, request: pytest.FixtureRequest):
    """`judge(method, param=None, **options) -> Judgement` for this test's gate. The test's engine
    boots during setup, so a boot failure shows as an error of this method's tests and nowhere else;
    a judgement with nothing to compare against skips here, saying why."""
    gate_name, _ = gate_of(request.node)
    _guard(gate, gate.boot, method_of(request.node), gate_name)

    def judge_(method: str, param=None, **options):
        judgement = _guard(gate, gate.judge, gate_name, method, param, **options)
        if judgement.verdict.value == "skip":
            pytest.skip(judgement.message)
        return judgement

    return judge_


# -- outcomes and reporting -------------------------------------------------------------------------
class RunLife:
    """How the run begins and ends: Ctrl-C and SIGTERM stop it cleanly (specgate.interrupts), engine
    processes an earlier run left behind are reported or stopped, and an interrupted run says where."""

    def __init__(self) -> None:
        self.restore_signals = lambda: None
        self.header: list[str] = []
        self.current = ""  # the test running now
        self.interrupted = ""

    def start(self, config: pytest.Config) -> None:
        from specgate import interrupts, logstream, reaper

        self.restore_signals = interrupts.install()
        os.environ.update(logstream.ENV)  # before vLLM configures its logging: see specgate.logstream
        if hasattr(config, "workerinput"):
            return  # an xdist worker: the controller looks after earlier runs
        kill = config.getoption("--specgate-kill-stale")
        for run in reaper.stale_runs(project_root(config)):
            if kill:
                left = reaper.stop_stale(run)
                self.header.append(f"specgate: stopped {len(run.processes) - len(left)} process(es) left by an earlier run "
                                   f"(pid {run.owner}){f'; these would not die: {left}' if left else ''}")
            else:
                pids = " ".join(str(p["pid"]) for p in run.processes)
                self.header.append(f"specgate: WARNING: {run.describe()}. Stop them with --specgate-kill-stale (or kill "
                                   f"{pids}); the state file is {run.path}")

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in self.header:  # written even with -q, where pytest prints no header
            if terminal is not None:
                terminal.write_line(line, yellow=True, bold=True)

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current = nodeid

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        from specgate import interrupts

        where = self.current or "collection"
        self.interrupted = f"interrupted at {where} ({interrupts.signal_name(excinfo.value)})"

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        self.restore_signals()


class CorrectnessWatch:
    """Collects failed `correctness` tests: --update-baselines refuses to write after any."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Failures of the test itself; an engine that did not boot (setup error) measured nothing.
        if report.failed and report.when == "call" and "correctness" in report.keywords:
            self.failures.append(report.nodeid)


class OutcomeRecorder:
    """Each gate test's outcome and message, for run.json and the report."""

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
    """The assertion's own message ('E   ' lines of a traceback, without pytest's `assert ...`
    explanation after it), or the whole text (pytrace=False)."""
    lines = [line[4:].strip() for line in text.splitlines() if line.startswith("E   ")]
    if lines and lines[0].startswith("AssertionError: "):
        lines[0] = lines[0].removeprefix("AssertionError: ")
        explained = next((i for i, line in enumerate(lines) if line.startswith("assert ")), len(lines))
        lines = lines[:explained]
    return ("\n".join(lines) if lines else text.strip())[:limit]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """Controller: keep what each worker measured (see pytest_sessionfinish)."""
    payload = getattr(node, "workeroutput", {}).get("specgate")
    if payload:
        node.config.stash[_WORKERS_KEY].append(json.loads(payload))


def _ran(session) -> bool:
    return session is not None and bool(session.host.engines_booted or session.plan.endpoints or session.interrupted)


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    """Worker: shut the engine down, write this worker's baselines (file lock), and hand the
    controller its summary, outcomes and measurements table for the combined report."""
    config = session.config
    if not hasattr(config, "workeroutput"):
        return
    gs = config.stash.get(_SESSION_KEY, None)
    if not _ran(gs):
        return
    from specgate.results import measurement_table

    gs.release_all()
    outcomes = list(config.stash[_OUTCOMES_KEY].outcomes.values())
    try:
        lines = gs.summary_lines(outcomes)
    except Exception as exc:  # as in pytest_terminal_summary: never a crash of the run
        lines = [f"specgate: the summary could not be built ({type(exc).__name__}: {exc})"]
    payload = {
        "worker": scaleout.worker_id(config),
        "lines": lines,
        "outcomes": [o.__dict__ for o in outcomes],
        "table": measurement_table(gs.judgements.values()).to_json(orient="records"),
        "measured": gs.measured,
        "started": gs.started_wall,
    }
    if gs.plan.update_baselines:
        payload["update"] = _update_baselines(gs, config.stash[_WATCH_KEY].failures)
    config.workeroutput["specgate"] = json.dumps(payload)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    workers = config.stash.get(_WORKERS_KEY, [])
    if workers:
        _summarize_workers(terminalreporter, config, workers)
        return
    session = config.stash.get(_SESSION_KEY, None)
    if session is not None:
        session.interrupted = config.stash[_RUN_KEY].interrupted
    if not _ran(session):
        return
    session.release_all()
    terminalreporter.section("specgate")
    outcomes = list(config.stash[_OUTCOMES_KEY].outcomes.values())
    try:
        lines = session.summary_lines(outcomes)
    except Exception as exc:  # the verdicts stand; a summary that cannot be built must not crash pytest
        lines = [f"specgate: the summary could not be built ({type(exc).__name__}: {exc}); the results files follow"]
    for line in lines:
        terminalreporter.write_line(line)
    if session.plan.update_baselines:
        terminalreporter.write_line(_update_baselines(session, config.stash[_WATCH_KEY].failures))
    from specgate.results import write_run

    _report_written(terminalreporter, session.plan.out_dir, lambda: write_run(session, outcomes, session.started_wall, lines))


def _summarize_workers(terminalreporter, config: pytest.Config, workers: list[dict]) -> None:
    """Controller of an xdist run: every worker's summary and baseline update, one combined report."""
    from specgate.results import Outcome, write_combined
    from specgate.session import GateSession

    terminalreporter.section("specgate")
    for w in sorted(workers, key=lambda w: w["worker"]):
        terminalreporter.write_line(f"[{w['worker']}]")
        for line in w["lines"]:
            terminalreporter.write_line(line)
        if "update" in w:
            terminalreporter.write_line(w["update"])

    def write():
        session = GateSession(run_plan(config))  # for the profile and paths; boots nothing
        outcomes = [Outcome(**o) for w in workers for o in w["outcomes"]]
        lines = [f"[{w['worker']}] {line}" for w in workers for line in w["lines"]]
        return write_combined(session, workers, outcomes, lines)

    _report_written(terminalreporter, config.stash[_OUT_KEY], write)


def _report_written(terminalreporter, out: Path, write) -> None:
    try:
        paths = write()
    except Exception as exc:  # the verdicts stand; a report that cannot be written must not hide them
        terminalreporter.write_line(f"specgate: results not written to {out}: {type(exc).__name__}: {exc}")
        return
    terminalreporter.write_line(f"results: {paths['summary']}, {paths['html']}, {paths['csv']}")


def _update_baselines(session, correctness_failures: list[str]) -> str:
    if correctness_failures:
        return (
            f"--update-baselines: refusing to write baselines: {len(correctness_failures)} correctness test(s) failed "
            f"in this run ({', '.join(correctness_failures[:3])}); a build that changes outputs must not become the "
            "new reference. Fix them and rerun."
        )
    try:
        session.baselines.file()  # a corrupt file is said even when nothing was measured
        if not session.measured:
            return "--update-baselines: nothing was measured in this run; no baseline written."
        return session.write_baselines()
    except SpecgateError as exc:
        return f"--update-baselines: not written: {exc}"
