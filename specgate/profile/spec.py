"""What a profile holds, each key declared once: on the dataclass field that holds it, with its TOML
type, bound, default, whether it changes what a run measures, and what it means (specgate.profile.schema).

    Profile         the run: target, prompts, method matrix, engines, and its tables (tables.py:
                    Tolerance, Equivalence, Speedup, Scenarios with Preemption, PrefixSoak, Structured)
    Method          one row of the method matrix (a [methods.NAME] table)

A key added here is read, type-checked, bounded, defaulted and classified for the baseline history by
parse.py without another line elsewhere; rules between keys (max_tokens below max_model_len, a
canary naming another method) live in parse.py, references to models, files and vLLM in resolve.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specgate.errors import ProfileError
from specgate.models import revision_problem
from specgate.profile.prompt_sources import PromptSource, parse_sources
from specgate.profile.schema import Checker, did_you_mean, held_as_float, non_negative, one_of, positive, rule, setting
from specgate.profile.tables import Equivalence, KnownIssue, Scenarios, Speedup, Tolerance
from specgate.settings import NAMES, Spelling

# Methods that draft from the prompt/history and load no drafter weights.
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
BASELINE = "baseline"
DTYPES = frozenset({"auto", "float32", "float16", "bfloat16"})
HARDWARE = frozenset({"cpu", "cuda"})
MODEL_RUNNERS = ("auto", "v1", "v2")  # [engine] model_runner: vLLM's choice, or VLLM_USE_V2_MODEL_RUNNER = 0 / 1
# Verification that may accept a draft the target would have rejected (vLLM 0.33: an entropy gate
# overrules rejections), so outputs are not the target's greedy ones: such a method must declare
# `lossy = { max_diverged_share = X }` and is judged on it.
LOSSY_REJECTION = {"fly"}
FLOOR_KEYS = {"acceptance_rate": float, "mean_acceptance_length": float}
# Deadlines when a profile sets none. GPU: a first load of an 8B model with graph capture fits in
# 1200 s; the longest honest wait without a token or a log line (a long prefill at high concurrency,
# NCCL set-up) in 300 s. CPU: cpu-tiny boots in 15-40 s on 2 cores.
DEFAULT_DEADLINES = {"cuda": (1200.0, 300.0), "cpu": (300.0, 120.0)}


def _method_tolerance(check, key: str, value: dict, _) -> dict[str, float]:
    """A method's own tolerances over the profile's: any of [tolerance]'s keys, each >= 0, held as floats."""
    from specgate.profile.schema import allowed

    check.table(value, {k: float for k in allowed(Tolerance)}, key + ".")
    for name, v in value.items():
        check.bounded(f"{key}.{name}", float(v), non_negative)
    return {k: float(v) for k, v in value.items()}


def _floors(check, key: str, value: dict, _) -> dict[str, float]:
    check.table(value, FLOOR_KEYS, key + ".")
    for name, v in value.items():
        check.positive(f"{key}.{name}", v, allow_zero=True)
    return {f: float(v) for f, v in value.items()}


def _regex(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"is not a valid regular expression ({exc})."
    return None


@dataclass(frozen=True)
class Method:
    """One row of the method matrix: a name and the `speculative_config` handed to vLLM.

    Public (specgate.hooks.Method, what a boot hook receives; kept from release to release): name, kind,
    speculative_config, num_speculative_tokens, draft_model, engine_kwargs. The other fields are the gate's
    own and may change in any commit."""

    name: str
    speculative_config: dict[str, Any] | None = setting(
        kind=dict,
        parse=lambda check, key, value, _: dict(value),
        doc="handed to vLLM as is (method, model, num_speculative_tokens)",
    )
    engine_kwargs: dict[str, Any] = setting(kind=dict, key="engine.kwargs", factory=dict, doc="this engine's arguments")
    # If the engine fails to boot with an error matching this regex, the method's tests are
    # skipped with the engine's own message instead of erroring (e.g. a method the CPU engine
    # does not implement). Any other boot failure is still an error.
    expected_boot_error: str | None = setting(
        None, str, bound=_regex, measures=False, doc="a boot error matching this regex is a skip, quoting vLLM"
    )
    note: str = setting("", str, measures=False, doc="said next to the method")
    # Absolute sanity floors, e.g. {"acceptance_rate": 0.98} for a drafter identical to the target.
    floors: dict[str, float] = setting(
        kind=dict,
        factory=dict,
        parse=_floors,
        measures=False,
        doc="absolute floors: acceptance_rate, mean_acceptance_length",
    )
    # A deliberately worse configuration, per gate: {"acceptance": "draft_self"} means this method's
    # acceptance must FAIL draft_self's baseline checks, which shows in every run that the gate can
    # fail. Gates not named here check the method against its own baselines as usual.
    canary_of: dict[str, str] = setting(
        kind=dict,
        factory=dict,
        parse=lambda check, key, value, _: dict(value),
        measures=False,
        doc="gate -> the method it must fail against",
    )
    # A lossy method's declared tolerance, e.g. {"max_diverged_share": 0.2}: equivalence is judged on it.
    lossy: dict[str, float] = setting(
        kind=dict, factory=dict, measures=False, doc="max_diverged_share: required for lossy verification"
    )
    # Calibration only: each drafting call also sleeps this share of the engine's mean step time (a
    # proposer made ~that much slower), to measure how small a loss the speedup gate detects.
    slow_steps: float = setting(
        0.0,
        float,
        bound=rule(lambda v: 0 <= v < 1, "is a share of a step in [0, 1)"),
        doc="calibration: each drafting call also sleeps this share of a step",
    )
    # The suite's own tests only: a regression written into vLLM's worker at boot (specgate.engines.plants), to
    # show that a check fails on it.
    plant: str = setting("", str, doc="the suite's own tests: a regression written into the worker")
    # This method's own tolerances over the profile's [tolerance] (e.g. a model drafter's draft_cost_tol).
    tolerance: dict[str, float] = setting(
        kind=dict,
        factory=dict,
        parse=_method_tolerance,
        measures=False,
        doc="this method's own tolerances over [tolerance]",
    )
    # A draft-length sweep's variant ("eagle3@k3" of "eagle3"): the report compares them by k.
    sweep_of: str = ""

    @property
    def kind(self) -> str:
        return BASELINE if self.speculative_config is None else self.speculative_config["method"]

    @property
    def num_speculative_tokens(self) -> int:
        return 0 if self.speculative_config is None else int(self.speculative_config.get("num_speculative_tokens", 0))

    @property
    def draft_model(self) -> str | None:
        return None if self.speculative_config is None else self.speculative_config.get("model")

    def expected_refusal(self, text: str) -> str | None:
        """vLLM's own sentence in `text` (a boot error, a whole engine or server log) that matches
        `expected_boot_error`, quoted whole: from the sentence's start to its end (vLLM may append long
        listings on the same line); None when no line matches. Lines are matched in full, however long."""
        if not self.expected_boot_error:
            return None
        for line in text.splitlines():
            if match := re.search(self.expected_boot_error, line):
                start = line.rfind(". ", 0, match.start())
                end = line.find(". ", match.end())
                return line[start + 2 if start >= 0 else 0 : end + 1 if end >= 0 else len(line)].strip()[:400]
        return None


def _concurrency(check, key: str, value: list, _) -> tuple[int, ...]:
    if not value or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in value):
        raise check.fail(key, f"must be a non-empty list of positive integers, got {value!r}.")
    if len(set(value)) != len(value):
        raise check.fail(key, f"lists a level twice: {value!r}.")
    return tuple(value)


def _temperatures(check, key: str, value: list, _) -> tuple[float, ...]:
    if (
        not value
        or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in value)
        or len(set(value)) != len(value)
    ):
        raise check.fail(key, f"must be a list of distinct temperatures >= 0, got {value!r}.")
    return tuple(float(t) for t in value)


def _cpu_flags(check, key: str, value: list, _) -> tuple[str, ...]:
    if not all(isinstance(f, str) and re.fullmatch(r"[a-z0-9_]+", f) for f in value):
        raise check.fail(key, f"lists /proc/cpuinfo flags (e.g. 'avx512_bf16'), got {value!r}.")
    return tuple(value)


def _known_issues(check: Checker, key: str, value: dict, _) -> dict[str, KnownIssue]:
    """[known_issues.ID] tables, each read as KnownIssue declares it (lists of strings where lists are asked)."""
    if not isinstance(value, dict):
        raise check.fail(key, "must be a table of [known_issues.ID] tables.")
    out = {}
    for name, table in value.items():
        where = f"{key}.{name}"
        if not isinstance(table, dict):
            raise check.fail(where, "must be a table (check, cases, methods, releases, note).")
        values = check.read(KnownIssue, table, where + ".")
        for field in ("cases", "methods", "releases"):
            items = values[field]
            if not items or not all(isinstance(x, str) and x for x in items):
                raise check.fail(f"{where}.{field}", f"must be a non-empty list of names, got {items!r}.")
            values[field] = tuple(items)
        out[name] = KnownIssue(**values)
    return out


@dataclass(frozen=True, kw_only=True)
class Profile:
    """A validated profile. Paths are absolute; model references are resolved later by `models`.

    Public (specgate.hooks.Profile, what a boot hook receives; kept from release to release): name, path,
    target, dtype, hardware, max_model_len, max_tokens, seed, engine_kwargs, engine_env, boot_timeout_s,
    stall_timeout_s, methods, baseline. The other fields are the gate's own and may change in any commit."""

    path: Path
    name: str = setting(kind=str, required=True, measures=False, doc="the profile's name: its baselines' directory")
    description: str = setting("", str, measures=False, doc="what the profile is for")
    target: str = setting(kind=str, required=True, doc="zoo:NAME, a local path or a hub id org/name")
    # Pins of the hub models the engines load (vLLM's revision, tokenizer_revision, code_revision; each
    # drafter's are its speculative_config's revision and code_revision): a commit, or a tag or branch
    # (which can move). `specgate download --profile NAME --pin` resolves them on a runner (revisions.py).
    target_revision: str | None = setting(None, str, bound=revision_problem, doc="the target's hub revision")
    tokenizer_revision: str | None = setting(
        None, str, bound=revision_problem, doc="the hub revision of [engine] kwargs.tokenizer"
    )
    code_revision: str | None = setting(
        None, str, bound=revision_problem, doc="the target's remote code revision (trust_remote_code)"
    )
    allow_unpinned_code: bool = setting(
        False, bool, measures=False, doc="a cuda run may load remote code not pinned to a commit"
    )
    dtype: str = setting("auto", str, bound=one_of(DTYPES), doc="every engine's dtype")
    hardware: str = setting("cuda", str, bound=one_of(HARDWARE), doc="cpu or cuda: devices, deadlines, baseline key")
    max_model_len: int = setting(2048, int, bound=positive, doc="every engine's max_model_len")
    max_tokens: int = setting(128, int, bound=positive, doc="output tokens per prompt (below max_model_len)")
    concurrency: tuple[int, ...] = setting((1,), list, parse=_concurrency, doc="the speedup gate's levels C")
    seed: int = setting(0, int, doc="every engine's seed, the prompts' draws, the bootstrap")
    prompt_sources: tuple[PromptSource, ...] = setting(
        kind=list,
        key="prompts",
        required=True,
        parse=lambda check, key, value, _: parse_sources(check, key, value),
        doc="prompt sets: paths or tables (file, chat, speed_bench; per_category, too_long)",
    )
    methods: dict[str, Method] = setting(kind=dict, required=True, doc="[methods.NAME] tables: the method matrix")
    tolerance: Tolerance = setting(kind=dict, table=Tolerance, factory=Tolerance, measures=False, doc="[tolerance]")
    equivalence: Equivalence = setting(kind=dict, table=Equivalence, factory=Equivalence, doc="[equivalence]")
    speedup: Speedup = setting(kind=dict, table=Speedup, factory=Speedup, measures=False, doc="[speedup]")
    engine_kwargs: dict[str, Any] = setting(
        kind=dict, key="engine.kwargs", factory=dict, doc="every engine's arguments"
    )
    engine_env: dict[str, str] = setting(
        kind=dict,
        key="engine.env",
        factory=dict,
        doc="every engine's environment",
        parse=lambda check, key, value, _: {str(k): str(v) for k, v in value.items()},
    )
    # The suite's own deadlines ([engine] boot_timeout_s, stall_timeout_s; see specgate/lifetime/watchdog.py): a
    # boot that takes longer, or any wait on an engine or server without a token or a log line for
    # that long, stops its processes and fails the method (the others still run). None: the
    # hardware's DEFAULT_DEADLINES.
    boot_timeout_s: float | None = setting(
        None,
        float,
        key="engine.boot_timeout_s",
        parse=held_as_float(positive),
        measures=False,
        doc="a boot longer than this fails the method",
    )
    stall_timeout_s: float | None = setting(
        None,
        float,
        key="engine.stall_timeout_s",
        parse=held_as_float(positive),
        measures=False,
        doc="a wait without a token or log line this long fails it",
    )
    # [engine] cpu_flags: the engines need a CPU with at least one of these /proc/cpuinfo flags (native
    # bf16: avx512_bf16 or amx_bf16); without one every gate test skips, saying which is missing.
    cpu_flags: tuple[str, ...] = setting(
        (),
        list,
        key="engine.cpu_flags",
        parse=_cpu_flags,
        measures=False,
        doc="the engines need a CPU with one of these flags",
    )
    # [engine] model_runner: the model runner every engine uses ("auto": vLLM's choice). "v2" on hardware "cpu"
    # without triton-cpu runs V2's kernels in Triton's interpreter (specgate.vllm_compat.interpreted): outputs and
    # acceptance are V2's own, speed is the interpreter's and is not judged.
    model_runner: str = setting(
        "auto",
        str,
        key="engine.model_runner",
        bound=one_of(MODEL_RUNNERS),
        doc="auto, v1 or v2: every engine's model runner (v2 on a CPU: in Triton's interpreter)",
    )
    # Acceptance is measured at each of these sampling temperatures ([acceptance] temperatures; 0 = greedy).
    temperatures: tuple[float, ...] = setting(
        (0.0,),
        list,
        key="acceptance.temperatures",
        parse=_temperatures,
        measures=False,
        doc="acceptance measured at each (0: greedy)",
    )
    usd_per_hour: float | None = setting(
        None,
        float,
        key="cost.usd_per_hour",
        bound=positive,
        measures=False,
        doc="the runner's price, for cost per million tokens",
    )
    drift: str = setting(
        "fail",
        str,
        measures=False,
        doc="past drift_rtol: fail or warn",
        bound=one_of(("fail", "warn"), "'fail' or 'warn' (what a figure past tolerance.drift_rtol does)"),
    )
    drift_since: str = setting(
        "",
        str,
        measures=False,
        doc="updates committed before this date are forgotten",
        bound=rule(
            lambda v: not v or re.fullmatch(r"\d{4}-\d{2}-\d{2}", v),
            "must be a date YYYY-MM-DD (updates committed before it are forgotten)",
        ),
    )
    scenarios: Scenarios = setting(kind=dict, table=Scenarios, factory=Scenarios, measures=False, doc="[scenarios.*]")
    # Bugs the gate finds in released vLLMs, recorded: a failure they explain is reported as known
    # (checks.known), one that no longer reproduces fails until the entry goes.
    known_issues: dict[str, KnownIssue] = setting(
        kind=dict, factory=dict, measures=False, parse=_known_issues, doc="[known_issues.ID] tables"
    )
    # Derived, never read from the file:
    prompts: tuple[Path, ...] = ()  # the files `prompt_sources` read (resolve.py)
    # Where its baselines live (baselines/<this>/): the profile's name, or "<name>@<dtype>" when a run
    # overrides its dtype (the run's dtype setting), so a bf16 figure never judges a float32 run, nor the reverse.
    baselines_name: str = ""
    tolerance_file: str = (
        ""  # this machine's calibrated tolerances applied over [tolerance] (specgate.store.tolerances)
    )

    def __post_init__(self) -> None:
        if not self.baselines_name:
            object.__setattr__(self, "baselines_name", self.name)
        boot, stall = DEFAULT_DEADLINES.get(self.hardware, DEFAULT_DEADLINES["cuda"])
        if self.boot_timeout_s is None:
            object.__setattr__(self, "boot_timeout_s", boot)
        if self.stall_timeout_s is None:
            object.__setattr__(self, "stall_timeout_s", stall)

    @property
    def sources(self) -> tuple[PromptSource, ...]:
        """The acceptance and equivalence prompts' sources (plain files for a hand-built Profile)."""
        return self.prompt_sources or tuple(PromptSource("file", p) for p in self.prompts)

    @property
    def baseline(self) -> Method:
        return Method(BASELINE, None)

    def with_dtype(self, dtype: str) -> Profile:
        """This profile computing in `dtype`; in float32 greedy equivalence is exact (no bf16 near-ties)."""
        equivalence = replace(self.equivalence, mode="exact") if dtype == "float32" else self.equivalence
        declared = self.baselines_name.split("@")[0] == self.baselines_name
        if dtype == self.dtype and declared:
            return self
        return replace(self, dtype=dtype, equivalence=equivalence, baselines_name=f"{self.name}@{dtype}")

    def select(self, names: list[str] | None, say: Spelling = NAMES) -> list[Method]:
        """The methods to run, in profile order; unknown names raise with the available ones, naming the
        setting as the caller's user spells it (`say`)."""
        if not names:
            return list(self.methods.values())
        for n in names:
            if n not in self.methods:
                raise ProfileError(
                    f"{say('methods')}: profile {self.name!r} ({self.path}) has no method {n!r}"
                    f"{did_you_mean(n, self.methods)}; available: {', '.join(self.methods)}."
                )
        return [m for m in self.methods.values() if m.name in names]
