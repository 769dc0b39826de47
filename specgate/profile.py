"""Profile TOML -> typed `Profile` / `Method` objects.

A profile is data: the target model, the prompt sets, the method matrix and the tolerances. Parsing
imports nothing heavy, so `--collect-only` and unit tests stay fast. Every key is checked: an
unknown key, an unknown method, a model path that does not exist or a value out of range raises a
`ProfileError` naming the file and the key.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate.errors import ProfileError
from specgate.models import HUB_ID

# Methods that draft from the prompt/history and load no drafter weights.
MODEL_FREE_METHODS = frozenset({"ngram", "ngram_gpu", "suffix"})
BASELINE = "baseline"
DTYPES = frozenset({"auto", "float32", "float16", "bfloat16"})
HARDWARE = frozenset({"cpu", "cuda"})

# SPEED-Bench (nvidia/SPEED-Bench): the layout vLLM's `vllm bench serve --dataset-name speed_bench`
# reads, a directory of <split>.jsonl files, one row per prompt with `category` and `messages`.
SPEED_BENCH_ENV = "SPECGATE_SPEED_BENCH_DIR"
SPEED_BENCH_SPLITS = ("qualitative", "throughput_1k", "throughput_2k", "throughput_8k", "throughput_16k", "throughput_32k")
SPEED_BENCH_PREPARE = (
    "Prepare it as vLLM's speed_bench dataset expects (the recipe vLLM's SpeedBench class names): `pip install "
    "datasets tiktoken`, then `curl -LsSf https://raw.githubusercontent.com/NVIDIA-NeMo/Skills/refs/heads/main/"
    "nemo_skills/dataset/speed-bench/prepare.py | python3 - --config all --output_dir DIR`; it fetches "
    "nvidia/SPEED-Bench (NVIDIA Evaluation Dataset License) and the public datasets its prompts are built from, "
    "some of which ask you to accept their terms on the hub first (see the dataset card)"
)
# What happens to a prompt longer than max_model_len - max_tokens (after the chat template).
TOO_LONG = ("error", "skip", "truncate")


@dataclass(frozen=True)
class Tolerance:
    """How far a measurement may fall from its stored baseline before the gate fails."""

    acceptance_rtol: float = 0.05
    position_rtol: float = 0.10
    speedup_rtol: float = 0.15
    memory_rtol: float = 0.10
    memory_slack_mib: float = 64.0  # weights and device memory
    process_slack_mib: float = 256.0  # peak process memory (allocator noise run to run)
    # Speedup ratios are only comparable on a machine as fast as the one that stored them: when the
    # baseline engine's throughput this run is off its stored value by more than this (relative, either
    # way), the speedup gate judges coarsely instead (below). 0 = never (dedicated GPUs).
    machine_rtol: float = 0.0
    # Speedups stored on another machine (or on this one under other load) are judged against
    # stored x (1 - coarse_speedup_rtol). On cpu-tiny the ratios moved by -22 % to +9 % between two
    # machines of one CPU name; with speedup_rtol's 15 % on top: 1 - 0.78 x 0.85 = 0.34.
    coarse_speedup_rtol: float = 0.35
    # The geometric mean of a method's speedups over the concurrency levels fails when the geometric
    # mean of the levels' upper bounds falls this far below the stored value. A starting point for
    # GPU runners; cpu-tiny sets its measured level tolerance (0.15): there the geomean moved 7 %
    # between two runs of unchanged code (ngram 1.127 -> 1.050).
    geomean_rtol: float = 0.10
    # > 0: TTFT p95 with speculation, relative to the baseline engine's in the same trials, may grow
    # this far over its stored value before the gate fails (0 = shown, not gated: tails are noisy).
    ttft_p95_rtol: float = 0.0
    # The step-cost check beside the speedup (0 = shown, not gated), from the worker's timers in one
    # timed trial per level: a drafting call may cost this much more of a verification step than
    # stored (draft_cost, absolute: 0.05 = 5 % of a step), and a verification step this much more,
    # relative, than stored against a plain step of the baseline engine (verify_cost). Judged against
    # this machine's own baselines (or, for a canary, its parent measured in the same run).
    draft_cost_tol: float = 0.0
    verify_cost_rtol: float = 0.0
    # > 0: portable figures (acceptance, drafter weights, KV tokens lost) must also stay within this of
    # the best value the baseline file's git history stored for the same inputs (checks/drift.py).
    drift_rtol: float = 0.0


@dataclass(frozen=True)
class Equivalence:
    """Greedy-equivalence rule: `exact`, or `tie-aware` within `logprob_margin` nats, forgiving near-ties
    in at most `max_forgiven_share` of a comparison's prompts (a verifier bug whose many divergences
    each look small still fails)."""

    mode: str = "exact"
    top_logprobs: int = 5
    logprob_margin: float = 0.0
    max_forgiven_share: float = 0.0


@dataclass(frozen=True)
class Speedup:
    """How the speedup gate loads each engine: `trials` closed-loop runs per concurrency level, each
    of `requests_per_slot` x C requests (at least `min_requests`); the first wave of C requests is
    warm-up. More trials narrow the confidence interval, which tightens the gate."""

    trials: int = 5
    requests_per_slot: int = 3
    min_requests: int = 6
    temperature: float = 0.0
    # One extra trial per level with timers in the worker around the target's forward pass and the
    # drafter, for the cost ratio c of the analytic speedup (off: no model check).
    measure_step_costs: bool = True
    # Alternate each method trial with a trial of the baseline engine, kept alive next to the
    # method's: both sides of every ratio then see the same machine state. Needs memory for two
    # engines (fine on CPU; not with two large models on one GPU, where one-at-a-time holds).
    interleave_baseline: bool = False
    max_tokens: int = 0  # output tokens per load request; 0 = the profile's max_tokens
    # Sequential trials: while a cell's interval straddles its floor, add `step_trials` paired trials,
    # up to `max_trials` (0 = never: `trials` only). Cells the evidence already decides cost nothing more.
    max_trials: int = 0
    step_trials: int = 2
    # The load's own prompts (e.g. a SPEED-Bench throughput split); empty = the profile's prompts.
    prompts: tuple[PromptSource, ...] = ()

    def num_requests(self, concurrency: int) -> int:
        return max(self.min_requests, self.requests_per_slot * concurrency, 2 * concurrency + 1)


@dataclass(frozen=True)
class Preemption:
    """The preemption scenario: each method's engine booted again with a KV cache holding `kv_share` of
    what the profile's prompts need when all are sent at once (prompt + max_tokens each), so requests
    are preempted and resumed mid-speculation."""

    kv_share: float = 0.3


@dataclass(frozen=True)
class PrefixSoak:
    """The prefix-cache soak: `rounds` replays of `per_category` prompts of each category (0 = all)
    on one engine with prefix caching on, `max_tokens` each (0 = the profile's); the last rounds'
    acceptance may fall `acceptance_rtol` below the first round's."""

    rounds: int = 4
    per_category: int = 4
    max_tokens: int = 0
    acceptance_rtol: float = 0.02


@dataclass(frozen=True)
class Structured:
    """The structured-output scenario: the prompts of `prompts` decoded under the JSON schema in
    `schema` with vLLM's structured outputs, `max_tokens` each (0 = the profile's)."""

    prompts: Path
    schema: Path
    max_tokens: int = 0


@dataclass(frozen=True)
class Scenarios:
    """Where vLLM's own spec-decode bug reports come from, each off (None) unless the profile enables it."""

    preemption: Preemption | None = None
    prefix_soak: PrefixSoak | None = None
    structured: Structured | None = None

    @property
    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n in SCENARIOS if getattr(self, n) is not None)


@dataclass(frozen=True)
class PromptSource:
    """One entry of `prompts = [...]` (or `[speedup] prompts`), resolved to the file that is read.

    kind "file": our schema (id, category, messages or text); "chat": rows with `messages` and `category`
    (a team's own traffic; other keys ignored, ids derived); "speed_bench": a prepared SPEED-Bench split
    (a chat file whose multi-turn rows are sent as their first turn, as vLLM's speed_bench loader does).
    A SPEED-Bench entry whose directory is not configured on this machine resolves to its `fallback`
    file, with `note` saying so, so the same profile collects everywhere."""

    kind: str
    path: Path
    per_category: int | None = None  # prompts drawn from each category (seeded, stable); None = all
    too_long: str = "error"  # a prompt past max_model_len - max_tokens: error | skip (and refill) | truncate
    split: str = ""  # the SPEED-Bench split
    name: str = ""  # as the profile wrote it, for summaries
    note: str = ""  # why this is a fallback file

    @property
    def label(self) -> str:
        return self.name or str(self.path)


@dataclass(frozen=True)
class Method:
    """One row of the method matrix: a name and the `speculative_config` handed to vLLM."""

    name: str
    speculative_config: dict[str, Any] | None  # None for the baseline engine
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # If the engine fails to boot with an error matching this regex, the method's tests are
    # skipped with the engine's own message instead of erroring (e.g. a method the CPU engine
    # does not implement). Any other boot failure is still an error.
    expected_boot_error: str | None = None
    note: str = ""
    # Absolute sanity floors, e.g. {"acceptance_rate": 0.98} for a drafter identical to the target.
    floors: dict[str, float] = field(default_factory=dict)
    # A deliberately worse configuration, per gate: {"acceptance": "draft_self"} means this method's
    # acceptance must FAIL draft_self's baseline checks, which shows in every run that the gate can
    # fail. Gates not named here check the method against its own baselines as usual.
    canary_of: dict[str, str] = field(default_factory=dict)
    # A lossy method's declared tolerance, e.g. {"max_diverged_share": 0.2}: equivalence is judged on it.
    lossy: dict[str, float] = field(default_factory=dict)
    # Calibration only: each drafting call also sleeps this share of the engine's mean step time (a
    # proposer made ~that much slower), to measure how small a loss the speedup gate detects.
    slow_steps: float = 0.0
    # The suite's own tests only: a regression written into vLLM's worker at boot (specgate.plants), to
    # show that a check fails on it.
    plant: str = ""
    # This method's own tolerances over the profile's [tolerance] (e.g. a model drafter's draft_cost_tol).
    tolerance: dict[str, float] = field(default_factory=dict)
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


@dataclass(frozen=True)
class Profile:
    """A validated profile. Paths are absolute; model references are resolved later by `models`."""

    name: str
    path: Path
    target: str
    dtype: str
    max_model_len: int
    prompts: tuple[Path, ...]
    max_tokens: int
    concurrency: tuple[int, ...]
    methods: dict[str, Method]  # in file order; the baseline is not included
    tolerance: Tolerance
    equivalence: Equivalence
    engine_kwargs: dict[str, Any]
    engine_env: dict[str, str]
    speedup: Speedup = field(default_factory=Speedup)
    hardware: str = "cpu"
    seed: int = 0
    description: str = ""
    prompt_sources: tuple[PromptSource, ...] = ()  # what `prompts` came from; `prompts` are their files
    # Acceptance is measured at each of these sampling temperatures ([acceptance] temperatures; 0 = greedy).
    temperatures: tuple[float, ...] = (0.0,)
    usd_per_hour: float | None = None  # [cost] usd_per_hour: the runner's price, for cost per million tokens
    drift: str = "fail"  # past drift_rtol: "fail" or "warn"
    drift_since: str = ""  # YYYY-MM-DD: baseline updates committed before it are not held against a run
    # The suite's own deadlines ([engine] boot_timeout_s, stall_timeout_s; see specgate/watchdog.py): a
    # boot that takes longer, or any wait on an engine or server without a token or a log line for
    # that long, stops its processes and fails the method (the others still run).
    boot_timeout_s: float = 1200.0
    stall_timeout_s: float = 300.0
    scenarios: Scenarios = field(default_factory=Scenarios)
    # [engine] cpu_flags: the engines need a CPU with at least one of these /proc/cpuinfo flags (native
    # bf16: avx512_bf16 or amx_bf16); without one every gate test skips, saying which is missing.
    cpu_flags: tuple[str, ...] = ()
    # Where its baselines live (baselines/<this>/): the profile's name, or "<name>@<dtype>" when a run
    # overrides its dtype (--specgate-dtype), so a bf16 figure never judges a float32 run, nor the reverse.
    baselines_name: str = ""
    tolerance_file: str = ""  # this machine's calibrated tolerances applied over [tolerance] (specgate.tolerances)

    def __post_init__(self) -> None:
        if not self.baselines_name:
            object.__setattr__(self, "baselines_name", self.name)

    @property
    def sources(self) -> tuple[PromptSource, ...]:
        """The acceptance and equivalence prompts' sources (plain files for a hand-built Profile)."""
        return self.prompt_sources or tuple(PromptSource("file", p) for p in self.prompts)

    @property
    def baseline(self) -> Method:
        return Method(BASELINE, None)

    def with_dtype(self, dtype: str) -> Profile:
        """This profile computing in `dtype`; in float32 greedy equivalence is exact (no bf16 near-ties)."""
        from dataclasses import replace

        equivalence = replace(self.equivalence, mode="exact") if dtype == "float32" else self.equivalence
        declared = self.baselines_name.split("@")[0] == self.baselines_name
        if dtype == self.dtype and declared:
            return self
        return replace(self, dtype=dtype, equivalence=equivalence, baselines_name=f"{self.name}@{dtype}")

    def select(self, names: list[str] | None) -> list[Method]:
        """The methods to run, in profile order; unknown names raise with the available ones."""
        if not names:
            return list(self.methods.values())
        for n in names:
            if n not in self.methods:
                raise ProfileError(
                    f"--specgate-methods: profile {self.name!r} ({self.path}) has no method {n!r}"
                    f"{_did_you_mean(n, self.methods)}; available: {', '.join(self.methods)}."
                )
        return [m for m in self.methods.values() if m.name in names]


_TOP_KEYS = {
    "name": str,
    "description": str,
    "target": str,
    "dtype": str,
    "max_model_len": int,
    "prompts": list,
    "max_tokens": int,
    "concurrency": list,
    "seed": int,
    "hardware": str,
    "engine": dict,
    "methods": dict,
    "tolerance": dict,
    "equivalence": dict,
    "speedup": dict,
    "acceptance": dict,
    "cost": dict,
    "drift": str,
    "drift_since": str,
    "scenarios": dict,
}
SCENARIOS = ("preemption", "prefix_soak", "structured")
_REQUIRED = ("name", "target", "prompts", "methods")
_METHOD_KEYS = {
    "speculative_config": dict,
    "engine": dict,
    "expected_boot_error": str,
    "note": str,
    "floors": dict,
    "canary_of": dict,
    "lossy": dict,
    "slow_steps": float,
    "plant": str,
    "tolerance": dict,
}
CANARY_GATES = ("acceptance", "speedup", "memory")
# Verification that may accept a draft the target would have rejected (vLLM 0.33: an entropy gate
# overrules rejections), so outputs are not the target's greedy ones: such a method must declare
# `lossy = { max_diverged_share = X }` and is judged on it.
LOSSY_REJECTION = {"fly"}
FLOOR_KEYS = {"acceptance_rate": float, "mean_acceptance_length": float}
_ENGINE_KEYS = {"kwargs": dict, "env": dict, "boot_timeout_s": float, "stall_timeout_s": float, "cpu_flags": list}
# Deadlines when a profile sets none. GPU: a first load of an 8B model with graph capture fits in
# 1200 s; the longest honest wait without a token or a log line (a long prefill at high concurrency,
# NCCL set-up) in 300 s. CPU: cpu-tiny boots in 15-40 s on 2 cores.
DEFAULT_DEADLINES = {"cuda": (1200.0, 300.0), "cpu": (300.0, 120.0)}
_MODEL_KEYS = ("model", "tokenizer")  # speculative_config keys that name a model


def _did_you_mean(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Checker:
    """Raises ProfileError messages that name the file and the dotted key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, problem: str) -> ProfileError:
        where = f"key '{key}'" if key else "the file"
        return ProfileError(f"profile {self.path}: {where} {problem}")

    def table(self, data: dict, allowed: dict[str, type], prefix: str) -> None:
        for key, value in data.items():
            dotted = f"{prefix}{key}"
            if key not in allowed:
                raise self.fail(
                    dotted,
                    f"is not a known key{_did_you_mean(key, allowed)}; allowed here: {', '.join(sorted(allowed))}.",
                )
            want = allowed[key]
            ok = isinstance(value, want) and not (want is int and isinstance(value, bool))
            if want is float:
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not ok:
                raise self.fail(dotted, f"must be a {want.__name__}, got {type(value).__name__} {value!r}.")

    def positive(self, key: str, value: int | float, allow_zero: bool = False) -> None:
        if value < 0 or (value == 0 and not allow_zero):
            raise self.fail(key, f"must be {'>= 0' if allow_zero else '> 0'}, got {value!r}.")


def load_profile(path: Path | str, root: Path | str) -> Profile:
    """Parse and validate one profile file. Relative paths are resolved against `root`."""
    path = Path(path)
    root = Path(root)
    check = _Checker(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"profile {path}: file not found.") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"profile {path}: not valid TOML ({exc}); fix the syntax and rerun.") from None

    check.table(data, _TOP_KEYS, "")
    for key in _REQUIRED:
        if key not in data:
            raise check.fail(key, "is required but missing.")

    dtype = data.get("dtype", "auto")
    if dtype not in DTYPES:
        raise check.fail("dtype", f"must be one of {sorted(DTYPES)}, got {dtype!r}.")
    hardware = data.get("hardware", "cuda")
    if hardware not in HARDWARE:
        raise check.fail("hardware", f"must be one of {sorted(HARDWARE)}, got {hardware!r}.")
    max_model_len = data.get("max_model_len", 2048)
    max_tokens = data.get("max_tokens", 128)
    check.positive("max_model_len", max_model_len)
    check.positive("max_tokens", max_tokens)
    if max_tokens >= max_model_len:
        raise check.fail("max_tokens", f"({max_tokens}) must be smaller than max_model_len ({max_model_len}).")

    concurrency = data.get("concurrency", [1])
    if not concurrency or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in concurrency):
        raise check.fail("concurrency", f"must be a non-empty list of positive integers, got {concurrency!r}.")
    if len(set(concurrency)) != len(concurrency):
        raise check.fail("concurrency", f"lists a level twice: {concurrency!r}.")

    sources = _prompt_sources(check, "prompts", data["prompts"], root)

    target = _check_model_ref(check, "target", data["target"], root)
    engine = data.get("engine", {})
    check.table(engine, _ENGINE_KEYS, "engine.")
    env = {str(k): str(v) for k, v in engine.get("env", {}).items()}
    boot_default, stall_default = DEFAULT_DEADLINES[hardware]
    cpu_flags = engine.get("cpu_flags", [])
    if not all(isinstance(f, str) and re.fullmatch(r"[a-z0-9_]+", f) for f in cpu_flags):
        raise check.fail("engine.cpu_flags", f"lists /proc/cpuinfo flags (e.g. 'avx512_bf16'), got {cpu_flags!r}.")
    deadlines = {"boot_timeout_s": float(engine.get("boot_timeout_s", boot_default)),
                 "stall_timeout_s": float(engine.get("stall_timeout_s", stall_default))}
    for key, value in deadlines.items():
        check.positive(f"engine.{key}", value)

    methods: dict[str, Method] = {}
    if not data["methods"]:
        raise check.fail("methods", "must define at least one method.")
    for name, spec in data["methods"].items():
        prefix = f"methods.{name}."
        if name == BASELINE:
            raise check.fail(f"methods.{name}", "is reserved: the baseline (no speculation) engine is always run.")
        if not isinstance(spec, dict):
            raise check.fail(f"methods.{name}", "must be a table.")
        check.table(spec, _METHOD_KEYS, prefix)
        sc = dict(spec.get("speculative_config") or {})
        if not sc:
            raise check.fail(prefix + "speculative_config", "is required.")
        kind = sc.get("method")
        if not isinstance(kind, str) or not kind:
            raise check.fail(prefix + "speculative_config.method", f"must name a speculative method, got {kind!r}.")
        _check_method(check, prefix + "speculative_config.method", kind)
        k = sc.get("num_speculative_tokens")
        ks = k if isinstance(k, list) else [k]  # a list: a draft-length sweep, one engine per value
        if not ks or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in ks) or len(set(ks)) != len(ks):
            raise check.fail(prefix + "speculative_config.num_speculative_tokens",
                             f"must be an integer >= 1 or a list of distinct ones (a sweep), got {k!r}.")
        if kind not in MODEL_FREE_METHODS and "model" not in sc and not kind.endswith("mtp"):
            raise check.fail(prefix + "speculative_config.model", f"is required for method {kind!r}.")
        for key in _MODEL_KEYS:
            if key in sc:
                sc[key] = _check_model_ref(check, prefix + "speculative_config." + key, sc[key], root)
        pattern = spec.get("expected_boot_error")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise check.fail(prefix + "expected_boot_error", f"is not a valid regular expression ({exc}).") from None
        method_engine = spec.get("engine", {})
        check.table(method_engine, {"kwargs": dict}, prefix + "engine.")
        method_engine = {"kwargs": dict(method_engine.get("kwargs", {}))}
        for key in _MODEL_KEYS:
            if key in method_engine["kwargs"]:
                ref = method_engine["kwargs"][key]
                method_engine["kwargs"][key] = _check_model_ref(check, prefix + "engine.kwargs." + key, ref, root)
        method_tolerance = {k: float(v) for k, v in spec.get("tolerance", {}).items()}
        check.table(method_tolerance, {f: float for f in Tolerance.__dataclass_fields__}, prefix + "tolerance.")
        for key, value in method_tolerance.items():
            check.positive(prefix + "tolerance." + key, value, allow_zero=True)
        plant = spec.get("plant", "")
        if plant:
            from specgate.plants import PLANTS

            if plant not in PLANTS:
                raise check.fail(prefix + "plant", f"is not a known plant{_did_you_mean(plant, PLANTS)}; known: {', '.join(PLANTS)}.")
        if not 0 <= spec.get("slow_steps", 0.0) < 1:
            raise check.fail(prefix + "slow_steps", f"is a share of a step in [0, 1), got {spec['slow_steps']!r}.")
        floors = spec.get("floors", {})
        check.table(floors, FLOOR_KEYS, prefix + "floors.")
        for key, value in floors.items():
            check.positive(prefix + "floors." + key, value, allow_zero=True)
        for one_k in ks:
            swept = len(ks) > 1 or isinstance(k, list)
            variant = f"{name}@k{one_k}" if swept else name
            methods[variant] = Method(
                name=variant,
                speculative_config={**sc, "num_speculative_tokens": one_k},
                engine_kwargs=dict(method_engine.get("kwargs", {})),
                expected_boot_error=pattern,
                note=spec.get("note", ""),
                floors={f: float(v) for f, v in floors.items()},
                canary_of=dict(spec.get("canary_of", {})),
                lossy=_lossy(check, prefix, sc, spec.get("lossy")),
                slow_steps=float(spec.get("slow_steps", 0.0)),
                plant=plant,
                tolerance=method_tolerance,
                sweep_of=name if swept else "",
            )
    for name, m in methods.items():
        check.table(m.canary_of, {g: str for g in CANARY_GATES}, f"methods.{name}.canary_of.")
        for gate, ref in m.canary_of.items():
            if ref not in methods or ref == name or gate in methods[ref].canary_of:
                raise check.fail(
                    f"methods.{name}.canary_of.{gate}",
                    f"must name another method of this profile that is not itself a {gate} canary"
                    f"{_did_you_mean(ref, methods)}; got {ref!r}.",
                )

    tol_data = data.get("tolerance", {})
    check.table(tol_data, {f: float for f in Tolerance.__dataclass_fields__}, "tolerance.")
    for key, value in tol_data.items():
        check.positive(f"tolerance.{key}", value, allow_zero=True)
        if key.endswith("rtol") and value >= 1:
            raise check.fail(f"tolerance.{key}", f"is a relative tolerance and must be < 1, got {value!r}.")
    tolerance = Tolerance(**{k: float(v) for k, v in tol_data.items()})

    eq_data = data.get("equivalence", {})
    check.table(eq_data, {"mode": str, "top_logprobs": int, "logprob_margin": float, "max_forgiven_share": float},
                "equivalence.")
    equivalence = Equivalence(**eq_data)
    if equivalence.mode not in ("exact", "tie-aware"):
        raise check.fail("equivalence.mode", f"must be 'exact' or 'tie-aware', got {equivalence.mode!r}.")
    check.positive("equivalence.top_logprobs", equivalence.top_logprobs)
    check.positive("equivalence.logprob_margin", equivalence.logprob_margin, allow_zero=True)
    if not 0 <= equivalence.max_forgiven_share <= 1:
        raise check.fail("equivalence.max_forgiven_share", f"is a share of the prompts in [0, 1], got {equivalence.max_forgiven_share!r}.")
    if equivalence.mode == "tie-aware" and "max_forgiven_share" not in eq_data:
        raise check.fail("equivalence.max_forgiven_share", "is required with mode = 'tie-aware': the share of a run's prompts "
                         "whose divergence the rule may forgive as a near-tie, set from A/A runs (docs/gpu-runners.md, "
                         "'bf16 equivalence'); without it a verifier bug whose divergences each look small would pass.")

    sp_data = dict(data.get("speedup", {}))
    sp_types = {"trials": int, "requests_per_slot": int, "min_requests": int, "temperature": float, "measure_step_costs": bool,
                "interleave_baseline": bool, "max_tokens": int, "max_trials": int, "step_trials": int, "prompts": list}
    check.table(sp_data, sp_types, "speedup.")
    if "prompts" in sp_data:
        sp_data["prompts"] = _prompt_sources(check, "speedup.prompts", sp_data["prompts"], root)
    speedup = Speedup(**sp_data)
    check.positive("speedup.max_tokens", speedup.max_tokens, allow_zero=True)
    if speedup.max_tokens >= max_model_len:
        raise check.fail("speedup.max_tokens", f"({speedup.max_tokens}) must be smaller than max_model_len ({max_model_len}).")
    if speedup.trials < 2:
        raise check.fail("speedup.trials", f"must be >= 2 (a confidence interval needs repeats), got {speedup.trials!r}.")
    if speedup.max_trials and speedup.max_trials < speedup.trials:
        raise check.fail("speedup.max_trials", f"({speedup.max_trials}) must be 0 (off) or >= trials ({speedup.trials}).")
    check.positive("speedup.step_trials", speedup.step_trials)
    check.positive("speedup.requests_per_slot", speedup.requests_per_slot)
    check.positive("speedup.min_requests", speedup.min_requests)
    check.positive("speedup.temperature", speedup.temperature, allow_zero=True)

    acceptance = data.get("acceptance", {})
    check.table(acceptance, {"temperatures": list}, "acceptance.")
    temperatures = acceptance.get("temperatures", [0.0])
    if not temperatures or not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in temperatures) \
            or len(set(temperatures)) != len(temperatures):
        raise check.fail("acceptance.temperatures", f"must be a list of distinct temperatures >= 0, got {temperatures!r}.")
    cost = data.get("cost", {})
    check.table(cost, {"usd_per_hour": float}, "cost.")
    if "usd_per_hour" in cost:
        check.positive("cost.usd_per_hour", cost["usd_per_hour"])

    drift = data.get("drift", "fail")
    if drift not in ("fail", "warn"):
        raise check.fail("drift", f"must be 'fail' or 'warn' (what a figure past tolerance.drift_rtol does), got {drift!r}.")
    drift_since = data.get("drift_since", "")
    if drift_since and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", drift_since):
        raise check.fail("drift_since", f"must be a date YYYY-MM-DD (updates committed before it are forgotten), got {drift_since!r}.")

    scenarios = _scenarios(check, data.get("scenarios", {}), root)

    return Profile(
        name=data["name"],
        path=path.resolve(),
        target=target,
        dtype=dtype,
        max_model_len=max_model_len,
        prompts=tuple(src.path for src in sources),
        max_tokens=max_tokens,
        concurrency=tuple(concurrency),
        methods=methods,
        tolerance=tolerance,
        equivalence=equivalence,
        engine_kwargs=dict(engine.get("kwargs", {})),
        engine_env=env,
        cpu_flags=tuple(cpu_flags),
        speedup=speedup,
        hardware=hardware,
        seed=data.get("seed", 0),
        description=data.get("description", ""),
        prompt_sources=sources,
        temperatures=tuple(float(t) for t in temperatures),
        usd_per_hour=float(cost["usd_per_hour"]) if "usd_per_hour" in cost else None,
        drift=drift,
        drift_since=drift_since,
        scenarios=scenarios,
        **deadlines,
    )


def _scenarios(check: _Checker, data: dict, root: Path) -> Scenarios:
    """`[scenarios.preemption]`, `[scenarios.prefix_soak]`, `[scenarios.structured]`: each table present
    enables its scenario for every method of the profile."""
    check.table(data, {name: dict for name in SCENARIOS}, "scenarios.")
    found: dict[str, Any] = {}
    if (spec := data.get("preemption")) is not None:
        check.table(spec, {"kv_share": float}, "scenarios.preemption.")
        found["preemption"] = Preemption(**{k: float(v) for k, v in spec.items()})
        if not 0 < found["preemption"].kv_share < 1:
            raise check.fail("scenarios.preemption.kv_share", "is the share of the load's KV cache the scenario engine "
                             f"gets, in (0, 1); got {found['preemption'].kv_share!r}.")
    if (spec := data.get("prefix_soak")) is not None:
        check.table(spec, {"rounds": int, "per_category": int, "max_tokens": int, "acceptance_rtol": float},
                    "scenarios.prefix_soak.")
        soak = found["prefix_soak"] = PrefixSoak(**spec)
        if soak.rounds < 2:
            raise check.fail("scenarios.prefix_soak.rounds", f"must be >= 2 (a replay needs a first round), got {soak.rounds!r}.")
        check.positive("scenarios.prefix_soak.per_category", soak.per_category, allow_zero=True)
        check.positive("scenarios.prefix_soak.max_tokens", soak.max_tokens, allow_zero=True)
        if not 0 <= soak.acceptance_rtol < 1:
            raise check.fail("scenarios.prefix_soak.acceptance_rtol", f"must be in [0, 1), got {soak.acceptance_rtol!r}.")
    if (spec := data.get("structured")) is not None:
        check.table(spec, {"prompts": str, "schema": str, "max_tokens": int}, "scenarios.structured.")
        for key in ("prompts", "schema"):
            if key not in spec:
                raise check.fail(f"scenarios.structured.{key}", "is required.")
        schema = _prompt_file(check, "scenarios.structured.schema", spec["schema"], root)
        try:
            json.loads(schema.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise check.fail("scenarios.structured.schema", f"names {schema}, which is not a JSON schema file ({exc}).") from None
        found["structured"] = Structured(_prompt_file(check, "scenarios.structured.prompts", spec["prompts"], root), schema,
                                         int(spec.get("max_tokens", 0)))
        check.positive("scenarios.structured.max_tokens", found["structured"].max_tokens, allow_zero=True)
    return Scenarios(**found)


_SOURCE_KINDS = ("file", "chat", "speed_bench")
_SOURCE_KEYS = {"file": str, "chat": str, "speed_bench": str, "dir": str, "fallback": str, "per_category": object,
                "too_long": str}
_SOURCE_EXAMPLE = '{ speed_bench = "qualitative", per_category = 10 }'


def _prompt_sources(check: _Checker, key: str, entries: list, root: Path) -> tuple[PromptSource, ...]:
    """`prompts = [...]` entries: a path (our schema, as ever) or a table naming a file, a chat JSONL or a
    SPEED-Bench split, with per_category and too_long."""
    if not entries:
        raise check.fail(key, "must list at least one prompt file.")
    out = []
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if isinstance(entry, str):
            out.append(PromptSource("file", _prompt_file(check, where, entry, root), name=entry))
            continue
        if not isinstance(entry, dict):
            raise check.fail(where, f"must be a path string or a table like {_SOURCE_EXAMPLE}, got {entry!r}.")
        check.table(entry, _SOURCE_KEYS, where + ".")
        kinds = [k for k in _SOURCE_KINDS if k in entry]
        if len(kinds) != 1:
            raise check.fail(where, "must name exactly one of file = PATH (our schema, with ids), chat = PATH (rows with "
                             f"messages and category) or speed_bench = SPLIT; got {', '.join(kinds) or 'none'}.")
        kind = kinds[0]
        per_category = _per_category(check, where + ".per_category", entry.get("per_category", "all"))
        too_long = entry.get("too_long", "skip" if kind == "speed_bench" else "error")
        if too_long not in TOO_LONG:
            raise check.fail(where + ".too_long", f"must be one of {', '.join(map(repr, TOO_LONG))}"
                             f"{_did_you_mean(too_long, TOO_LONG)}, got {too_long!r}.")
        for extra in ("dir", "fallback"):
            if extra in entry and kind != "speed_bench":
                raise check.fail(f"{where}.{extra}", "only applies to a speed_bench entry.")
        if kind != "speed_bench":
            path = _prompt_file(check, f"{where}.{kind}", entry[kind], root)
            out.append(PromptSource(kind, path, per_category, too_long, name=entry[kind]))
        else:
            out.append(_speed_bench(check, where, entry, root, per_category, too_long))
    return tuple(out)


def _prompt_file(check: _Checker, key: str, p: str, root: Path) -> Path:
    resolved = (root / Path(p).expanduser()).resolve()
    if not resolved.is_file():
        raise check.fail(key, f"names {p!r}, but {resolved} does not exist.")
    return resolved


def _per_category(check: _Checker, key: str, value: Any) -> int | None:
    if value == "all":
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise check.fail(key, f'must be a whole number >= 1 or "all", got {value!r}.')
    return value


def _speed_bench(check: _Checker, where: str, entry: dict, root: Path, per_category, too_long) -> PromptSource:
    """The split's file in the configured directory (the entry's `dir`, else $SPECGATE_SPEED_BENCH_DIR). With
    no directory configured, the entry's `fallback` file stands in, saying so; a configured directory that
    does not hold the split is an error (someone meant to use it)."""
    split = entry["speed_bench"]
    if split not in SPEED_BENCH_SPLITS and not re.fullmatch(r"throughput_\d+k", split):
        raise check.fail(where + ".speed_bench", f"names split {split!r}{_did_you_mean(split, SPEED_BENCH_SPLITS)}; "
                         f"SPEED-Bench has: {', '.join(SPEED_BENCH_SPLITS)}.")
    fallback = entry.get("fallback")
    fallback_path = _prompt_file(check, where + ".fallback", fallback, root) if fallback is not None else None
    configured = entry.get("dir") or os.environ.get(SPEED_BENCH_ENV, "")
    origin = f"{where}.dir = {entry['dir']!r}" if entry.get("dir") else f"${SPEED_BENCH_ENV} = {configured!r}"
    if not configured:
        if fallback_path is None:
            raise check.fail(where, f"names SPEED-Bench split {split!r}, but no SPEED-Bench directory is configured: set "
                             f"${SPEED_BENCH_ENV} (or dir = \"...\" in this entry) to a directory holding {split}.jsonl. "
                             f"{SPEED_BENCH_PREPARE}. Or add fallback = \"fixtures/prompts/general.jsonl\" to gate on that "
                             "file where the data is absent.")
        note = (f"SPEED-Bench {split} is not on this machine (set ${SPEED_BENCH_ENV} to its directory), "
                f"so {fallback} stands in")
        return PromptSource("file", fallback_path, name=fallback, note=note)
    directory = Path(configured).expanduser()
    directory = directory if directory.is_absolute() else root / directory
    if not directory.is_dir():
        raise check.fail(where, f"names SPEED-Bench split {split!r} in {origin}, but {directory} is not a directory. "
                         f"{SPEED_BENCH_PREPARE.replace('DIR', str(directory))}.")
    path = directory / f"{split}.jsonl"
    if not path.is_file():
        raise check.fail(where, f"names SPEED-Bench split {split!r}, but {directory} (from {origin}) has no {split}.jsonl. "
                         + SPEED_BENCH_PREPARE.replace("--config all", f"--config {split}").replace("DIR", str(directory)) + ".")
    return PromptSource("speed_bench", path.resolve(), per_category, too_long, split=split,
                        name=f"SPEED-Bench {split} ({path})")


def _lossy(check: _Checker, prefix: str, sc: dict, lossy: dict | None) -> dict[str, float]:
    """A lossy verification must be declared with the share of prompts that may diverge."""
    method = sc.get("rejection_sample_method")
    if lossy is None:
        if method in LOSSY_REJECTION:
            raise check.fail(
                prefix + "speculative_config.rejection_sample_method",
                f"is {method!r}, a lossy verification (it may accept drafts the target would reject), so this "
                "method cannot be held to greedy equivalence: declare `lossy = { max_diverged_share = 0.2 }` (the "
                "share of prompts whose greedy output may differ) and it is judged on that instead.",
            )
        return {}
    check.table(lossy, {"max_diverged_share": float}, prefix + "lossy.")
    share = lossy.get("max_diverged_share")
    if share is None or not 0 <= share <= 1:
        raise check.fail(prefix + "lossy.max_diverged_share", f"must be a share in [0, 1], got {share!r}.")
    return {"max_diverged_share": float(share)}


def _check_method(check: _Checker, key: str, kind: str) -> None:
    """A method the installed vLLM does not offer but one it does resembles is a typo: an error.
    Otherwise it may be a method this release dropped or a later one adds; the run skips it then,
    naming the release and the methods it offers (host.EngineHost)."""
    from specgate.vllm_compat import release, speculative_methods

    offered = speculative_methods()
    if offered and kind not in offered and (hint := _did_you_mean(kind, offered)):
        raise check.fail(key, f"is {kind!r}, which {release()} does not offer{hint}; it offers: {', '.join(offered)}.")


def _check_model_ref(check: _Checker, key: str, ref: Any, root: Path) -> str:
    """Accept `zoo:NAME`, an existing local path, or a hub id `org/name`; return the normalised ref."""
    if not isinstance(ref, str) or not ref:
        raise check.fail(key, f"must be a model reference string, got {ref!r}.")
    if ref.startswith("zoo:"):
        from specgate.models import ZOO_MODELS  # light: no torch import

        name = ref[4:]
        if name not in ZOO_MODELS:
            raise check.fail(
                key, f"names embedded model {name!r}{_did_you_mean(name, ZOO_MODELS)}; the zoo has: {', '.join(ZOO_MODELS)}."
            )
        return ref
    local = Path(ref).expanduser()
    if not local.is_absolute():
        local = root / local
    looks_local = ref.startswith(("/", ".", "~")) or local.exists() or not HUB_ID.match(ref)
    if looks_local:
        if not local.exists():
            raise check.fail(
                key,
                f"names model path {ref!r}, but {local} does not exist; give an existing directory, "
                "a hub id like 'org/name', or 'zoo:NAME' for an embedded model.",
            )
        return str(local.resolve())
    return ref  # hub id: resolved by vLLM on the user's runner


def profile_dir(root: Path) -> Path:
    return Path(root) / "fixtures" / "profiles"


def find_profile(name_or_path: str, root: Path) -> Path:
    """`cpu-tiny` -> fixtures/profiles/cpu-tiny.toml; a path is taken as is."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or "/" in name_or_path:
        if not candidate.is_absolute():
            candidate = Path(root) / candidate
        if not candidate.is_file():
            raise ProfileError(f"--specgate-profile: profile file {candidate} does not exist.")
        return candidate
    available = sorted(p.stem for p in profile_dir(root).glob("*.toml"))
    path = profile_dir(root) / f"{name_or_path}.toml"
    if not path.is_file():
        raise ProfileError(
            f"--specgate-profile: no profile named {name_or_path!r} in {profile_dir(root)}"
            f"{_did_you_mean(name_or_path, available)}; available: {', '.join(available) or 'none'}."
        )
    return path
