"""The command line of a gate run: the --specgate-* options, and the run's plan built from them (the
profile chosen, `auto` included, with its dtype and this machine's calibrated tolerances; the methods
or endpoints; the flags). Bad values stop the run with one paragraph naming the option."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import pytest

from specgate import machine
from specgate.errors import SpecgateError
from specgate.gates import GATES
from specgate.plugin import scaleout
from specgate.profile import BASELINE
from specgate.settings import Spelling

GPU_PROFILE_ENV = "SPECGATE_GPU_PROFILE"


# How a pytest user spells each of a gate run's settings (specgate.settings): the plugin hands it to the
# layers below, whose messages name settings, and release/ builds its pytest command lines from it.
SPELLING = Spelling(
    {
        "profile": "--specgate-profile",
        "methods": "--specgate-methods",
        "update_baselines": "--update-baselines",
        "strict": "--specgate-strict",
        "endpoints": "--specgate-endpoint",
        "dtype": "--specgate-dtype",
        "kill_stale": "--specgate-kill-stale",
        "out": "--specgate-out",
    },
    gate_run="pytest -m gpu",
)
OPTIONS = tuple(SPELLING.flags.values())


def add(parser: pytest.Parser) -> None:
    """The --specgate-* options (OPTIONS), in one group; a bad value is a UsageError naming the option. And the
    ini option that gives every `-n` run specgate's xdist scheduler, not only gate runs."""
    parser.addini(
        XDIST_INI,
        type="bool",
        default=False,
        help="specgate: every -n run uses specgate's xdist scheduler (the tests of one xdist_group on one worker, "
        "which xdist's own loadgroup cannot keep together under pytest 9; scopes handed out in collection order), "
        "not only gate runs. Default: false.",
    )
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
        type=comma_list,
        help="run only these methods of the profile (default: all); the baseline always runs.",
    )
    group.addoption(
        "--update-baselines",
        action="store_true",
        default=False,
        help="write this run's measurements into this machine's baselines/<profile>/<hardware>.<machine>.json (merged "
        "with what it did not measure) and print what moved; refused when a correctness test failed. Default: off.",
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


def comma_list(value: str) -> list[str]:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if value.strip() and not names:
        raise pytest.UsageError("--specgate-methods takes a comma-separated list of method names, e.g. ngram,eagle3")
    return names


def project_root(config: pytest.Config) -> Path:
    """The checkout that holds fixtures/profiles. pytest's rootdir is not always it: a path given as an
    option value outside the checkout (a profile in /tmp) moves rootdir to a common ancestor."""
    candidates = [Path(config.inipath).parent] if config.inipath else []
    candidates += [Path(config.rootpath), Path.cwd(), Path(__file__).resolve().parents[2]]
    for path in candidates:
        if (path / "fixtures" / "profiles").is_dir():
            return path
    return candidates[0]


# The markers a gate test carries (tests/gate/: every one `gpu`; a correctness gate's `correctness` too, which the
# plugin gives it from the registry)
_MARKED = frozenset({"gpu", "specgate"})
GATE_MARKS = tuple(dict.fromkeys(_MARKED | {"correctness"} if g.correctness else _MARKED for g in GATES))
XDIST_INI = "specgate_xdist_scheduler"


def selects_gate(config: pytest.Config) -> bool:
    """Whether this is a gate run, from what pytest knows before collection (the rule: the plugin's
    docstring). With `-m`: whether the expression picks gate tests out (marks_select_gate). Without: whether a
    specgate option is given (other than its default). `-k` does not decide: it selects by names, which are
    unknown before collection."""
    expression = config.getoption("markexpr", "") or ""
    if expression.strip():
        return marks_select_gate(expression)
    return any(config.getoption(name) not in (None, False, [], "auto") for name in OPTIONS)


def marks_select_gate(expression: str) -> bool:
    """Whether a `-m` expression, by pytest's own rules, keeps a gate test and leaves out a test that carries
    no marker (`gpu`, `gpu and not slow`, `correctness`: yes; `not gpu`, `not (gpu or slow)`, `not slow`: no,
    the last two keep every unmarked test). An expression pytest cannot parse: no (pytest itself reports it)."""
    if not expression.strip():
        return False
    from _pytest.mark.expression import Expression  # pytest's -m grammar (not exported under a public name)

    try:
        compiled = Expression.compile(expression)
    except SyntaxError:
        return False
    keeps_gate = any(compiled.evaluate(_carries(marks)) for marks in GATE_MARKS)
    return keeps_gate and not compiled.evaluate(_carries(frozenset()))


def _carries(marks: frozenset):
    def carries(name: str, /, **_) -> bool:  # (a marker's arguments, `-m "specgate(gate='x')"`: taken as carried)
        return name in marks

    return carries


def profile_name(config: pytest.Config) -> str:
    name = config.getoption("--specgate-profile")
    if name != "auto":
        return name
    gpu_profile = os.environ.get(GPU_PROFILE_ENV)
    if not machine.cuda_available():
        if gpu_profile:
            # a GPU runner whose driver or torch build lost CUDA must not pass on the toy CPU profile
            raise pytest.UsageError(
                f"${GPU_PROFILE_ENV}={gpu_profile} asks for a GPU profile, but torch sees no CUDA device here "
                f"({machine.torch_build()}); fix the runner's NVIDIA driver or install the CUDA build of vLLM "
                f"(README, 'With a GPU'), or unset ${GPU_PROFILE_ENV} to run the CPU profile cpu-tiny."
            )
        return "cpu-tiny"
    if not gpu_profile:
        raise pytest.UsageError(
            f"--specgate-profile auto: CUDA is present, so a GPU profile is expected; set ${GPU_PROFILE_ENV} or pass "
            "--specgate-profile NAME (see fixtures/profiles/)."
        )
    return gpu_profile


def plan(config: pytest.Config, out: Path):
    """The run's plan from the options: the profile (its dtype overridden, this machine's calibrated
    tolerances applied), the methods or endpoints, the flags; a problem with any is a UsageError."""
    from specgate.profile import find_profile, load_profile
    from specgate.run.session import RunPlan
    from specgate.store.revisions import refusal

    root = project_root(config)
    try:
        profile = load_profile(find_profile(profile_name(config), root, SPELLING), root)
        if dtype := config.getoption("--specgate-dtype"):
            profile = profile.with_dtype(dtype)
        profile = calibrated(profile, root)
        endpoints = None
        if config.getoption("--specgate-endpoint"):
            from specgate.engines.endpoint import parse_endpoints

            endpoints = parse_endpoints(config.getoption("--specgate-endpoint"), SPELLING)
            served = [name for name in endpoints if name != BASELINE]  # the methods named by the endpoints given
            methods = profile.select(served, SPELLING.but(methods=SPELLING("endpoints"))) if served else []
        else:
            methods = profile.select(config.getoption("--specgate-methods"), SPELLING)
            # remote code, and under --specgate-strict any hub model, not pinned to a commit: refused before a boot
            if refused := refusal(profile, methods, config.getoption("--specgate-strict"), SPELLING):
                raise refused
        scaleout.pin_worker(profile, config=config)  # before anything in this process touches CUDA
    except SpecgateError as exc:
        raise pytest.UsageError(str(exc)) from None
    log_dir = out / "engines" / scaleout.worker_id(config) if scaleout.worker_id(config) else None
    return RunPlan(
        profile,
        methods,
        root,
        out,
        update_baselines=config.getoption("--update-baselines"),
        strict=config.getoption("--specgate-strict"),
        endpoints=endpoints,
        log_dir=log_dir,
        say=SPELLING,
    )


def calibrated(profile, root: Path):
    """The profile with this machine's calibrated tolerances over its own, where `specgate calibrate`
    wrote some (baselines/<profile>/<hardware>.<machine id>.tolerance.toml), else those of its hardware name
    written before identities were recorded (<hardware>.tolerance.toml: settings, like the profile's own)."""
    from specgate.store import tolerances
    from specgate.store.baselines import baseline_path

    hardware = machine.hardware_key(*machine.detect_device(profile.hardware))
    identity = machine.this_identity(profile.hardware)
    own = tolerances.path_for(baseline_path(root, profile.baselines_name, hardware, identity))
    named = tolerances.path_for(baseline_path(root, profile.baselines_name, hardware))
    return tolerances.apply(profile, own if own.is_file() else named)


def default_out(root: Path) -> Path:
    return root / "results" / _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
