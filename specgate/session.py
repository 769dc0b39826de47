"""The run session: one object per pytest run that owns the profile, the prompts and the engines.

It keeps at most one engine alive: asking for another method's engine shuts the current one down
first (and records whether its memory came back). Results are cached per method so several gate
tests of one method share one engine and one generation pass. No pytest in here; plugin.py adapts it.
"""

from __future__ import annotations

import functools
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from specgate import baselines, stats
from specgate.acceptance import AcceptanceResult, acceptance_checks
from specgate.engine import BatchResult, Engine, ShutdownReport, boot_engine
from specgate.equivalence import Divergence, GreedyOutput, compare
from specgate.load import trial_prompts
from specgate.errors import EngineBootError, NotMeasurable, SpecgateError
from specgate.profile import BASELINE, Method, Profile
from specgate.prompts import Prompt, TokenizedPrompt, load_prompts, tokenize
from specgate.zoo import resolve as resolve_model


@dataclass
class MethodRecord:
    """What happened to one method's engine in this run (for the summary)."""

    method: str
    boots: int = 0
    boot_s: list[float] = field(default_factory=list)
    shutdown: ShutdownReport | None = None
    boot_error: EngineBootError | None = None
    skipped_reason: str | None = None
    compared: int = 0
    identical: int = 0
    numerical: int = 0
    diverged: int = 0


@dataclass(frozen=True)
class GateOutcome:
    """A gate test's verdict: failure messages, or the reason it has nothing to compare against."""

    failures: list[str] = field(default_factory=list)
    skip: str | None = None


def _repeat(fn, times: int) -> None:
    for _ in range(times):
        fn()


@dataclass
class SpeedupResult:
    """speedup(method, C) with the analytic model's view of it."""

    method: str
    concurrency: int
    estimate: stats.Estimate  # median of per-trial throughput ratios, bootstrap interval
    throughput: float  # median tok/s of the method's trials
    baseline_throughput: float
    k: int
    mean_acceptance_length: float | None
    alpha: float | None = None
    cost_ratio: float | None = None  # c: one drafting step / one plain target step
    verify_cost: float | None = None  # one verification forward / one plain target step
    expected: float | None = None  # Leviathan et al.
    latency: dict = field(default_factory=dict)

    def model_check(self) -> str:
        return (
            f"measured/expected {self.estimate.value / self.expected:.2f} (expected {self.expected:.2f} from "
            f"alpha {self.alpha:.3f}, k {self.k}, c {self.cost_ratio:.3f}; a verification step costs "
            f"{self.verify_cost or float('nan'):.2f} plain steps)"
        )

    def record(self) -> dict:
        r6 = lambda x: None if x is None else round(float(x), 6)  # noqa: E731
        rec = {
            "speedup": r6(self.estimate.value),
            "ci_low": r6(self.estimate.low),
            "ci_high": r6(self.estimate.high),
            "trials": self.estimate.n,
            "throughput_tok_s": round(self.throughput, 3),
            "baseline_throughput_tok_s": round(self.baseline_throughput, 3),
            "mean_acceptance_length": r6(self.mean_acceptance_length),
        }
        if self.expected is not None:
            rec.update(
                alpha=r6(self.alpha),
                cost_ratio=r6(self.cost_ratio),
                verify_cost=r6(self.verify_cost),
                expected_speedup=r6(self.expected),
                measured_over_expected=r6(self.estimate.value / self.expected),
            )
        for name in ("ttft_p50_ms", "tpot_p50_ms", "itl_p99_ms", "e2e_p50_ms"):
            if name in self.latency:
                rec[name] = round(self.latency[name], 3)
        return rec


@dataclass
class LoadTrials:
    """One engine's closed-loop trials at one concurrency (trial i of every engine sends the same
    requests), the spec-decode counters they moved, and the worker's step timings if measured."""

    concurrency: int
    runs: list = field(default_factory=list)  # specgate.load.LoadRun
    counters: object = None  # SpecCounters over all trials
    step_times: dict | None = None

    @property
    def throughputs(self) -> list[float]:
        return [r.throughput for r in self.runs]

    def per_call(self, name: str) -> float | None:
        """Seconds per call of a timed worker function ('forward', 'propose'), if it was called."""
        t = self.step_times or {}
        return t[f"{name}_s"] / t[f"{name}_calls"] if t.get(f"{name}_calls") else None


@dataclass(frozen=True)
class EquivalenceFinding:
    prompt: TokenizedPrompt
    divergence: Divergence


class GateSession:
    def __init__(
        self,
        profile: Profile,
        methods: list[Method],
        root: Path,
        out_dir: Path,
        update_baselines: bool = False,
        strict: bool = False,
        endpoints: dict[str, str] | None = None,
    ):
        self.profile = profile
        self.update_baselines = update_baselines
        self.strict = strict
        self._baseline_file: baselines.BaselineFile | None = None
        self.measured: dict[str, dict[str, dict[str, dict]]] = {}  # method -> kind -> key -> values
        self.correctness_failures: list[str] = []
        self.methods = methods
        self.root = Path(root)
        self.out_dir = Path(out_dir)
        self.records: dict[str, MethodRecord] = {m: MethodRecord(m) for m in [BASELINE, *(m.name for m in methods)]}
        self._by_name = {BASELINE: profile.baseline, **{m.name: m for m in methods}}
        self._engine: Engine | None = None
        self._loaded: list[Prompt] | None = None
        self._prompts: list[TokenizedPrompt] | None = None
        self._tokenizer = None
        self._runs: dict[str, dict[str, BatchResult]] = {}  # method -> category -> batch
        self._run_errors: dict[str, Exception] = {}
        self._memory: dict = {}  # method -> MemoryReading
        self._load: dict[str, dict[int, LoadTrials]] = {}  # method -> concurrency -> trials
        self._paired: dict[tuple[str, int], LoadTrials] = {}  # (method, C) -> interleaved baseline trials
        self._reference: Engine | None = None  # the baseline engine kept alive for interleaving
        self._warmed: set[str] = set()
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.log_dir = self.out_dir / "engines"
        # What the collected gate tests will ask of the baseline engine (set by the plugin).
        self.selected_gates: set[str] = {"equivalence", "acceptance", "speedup", "memory"}
        self.selected_levels: list[int] = list(profile.concurrency)
        self.reference_ready = False
        # Endpoint mode (--specgate-endpoint): servers someone else runs instead of booted engines.
        self.endpoints = endpoints
        self._clients: dict = {}

    # -- inputs ---------------------------------------------------------------------------------
    @property
    def method_order(self) -> list[str]:
        return list(self.records)

    def method_config(self, name: str) -> Method:
        return self._by_name[name]

    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.profile.target, self.root))
        return self._tokenizer

    def loaded_prompts(self) -> list[Prompt]:
        if self._loaded is None:
            self._loaded = load_prompts(self.profile.prompts)
        return self._loaded

    def categories(self) -> list[str]:
        """Prompt categories in file order (cheap: no tokenizer)."""
        return list(dict.fromkeys(p.category for p in self.loaded_prompts()))

    def prompts(self) -> list[TokenizedPrompt]:
        """Every prompt, validated and tokenized once with the target's tokenizer."""
        if self._prompts is None:
            budget = self.profile.max_model_len - self.profile.max_tokens
            self._prompts = tokenize(self.loaded_prompts(), self.tokenizer(), budget)
        return self._prompts

    def decode(self, token_id: int) -> str:
        return self.tokenizer().decode([token_id])

    # -- engines --------------------------------------------------------------------------------
    def engine(self, name: str) -> Engine:
        """The live engine for `name`, booting it (after shutting down any other) if needed."""
        if self.endpoints is not None:
            return self._endpoint(name)
        record = self.records[name]
        if record.boot_error is not None:
            raise record.boot_error
        if self._engine is not None and self._engine.method.name == name and self._engine.alive:
            return self._engine
        if name == BASELINE and self._reference is not None:
            return self._reference
        if name != BASELINE:
            self.prepare_reference()
        if self._interleaving and self._engine is not None and self._engine.method.name == BASELINE:
            self._reference, self._engine = self._engine, None  # stays up for paired speedup trials
        self.release_current()
        self.prompts()  # fail on bad prompts before paying for a boot
        log_path = self.log_dir / f"{name}.log"
        record.boots += 1
        try:
            self._engine = boot_engine(self.profile, self._by_name[name], self.root, log_path)
        except EngineBootError as exc:
            record.boot_error = exc
            raise
        record.boot_s.append(self._engine.boot_s)
        return self._engine

    def prepare_reference(self) -> None:
        """Measure everything the selected gates compare against from the baseline engine, before any
        method's engine boots. Usually the baseline's own tests ran first and this finds it all
        cached; an xdist worker that did not get the baseline's tests measures it here, on its own
        devices, so every comparison stays within one worker's hardware."""
        if self.reference_ready or self.endpoints is not None:
            return
        if "equivalence" in self.selected_gates:
            self._category_runs(BASELINE)
        if "speedup" in self.selected_gates:
            for level in self.selected_levels:
                self.load_trials(BASELINE, level)
        if "memory" in self.selected_gates:
            self.memory_reading(BASELINE)
        self.reference_ready = True

    def _endpoint(self, name: str):
        from specgate.endpoint import Endpoint

        if name not in self.endpoints:
            raise NotMeasurable(
                f"endpoint mode: no server for '{name}' (give --specgate-endpoint {name}=URL to measure it"
                + (", e.g. a `vllm serve` of the target without --speculative-config" if name == BASELINE else "")
                + ")"
            )
        if name not in self._clients:
            client = Endpoint(name, self.endpoints[name])
            client.served_model()  # fails here, clearly, when the server is not there
            self._clients[name] = client
            self.records[name].boots += 1
        return self._clients[name]

    def not_measurable_here(self, what: str) -> str | None:
        """Why this run cannot measure `what` at all (a skip reason), or None."""
        if self.endpoints is not None and what in ("memory", "lifecycle"):
            return f"endpoint mode: the {what} of a server specgate did not start is not visible to it"
        return None

    def release_current(self) -> ShutdownReport | None:
        for client in self._clients.values():
            client.close()
        if self._engine is None:
            return None
        engine, self._engine = self._engine, None
        report = engine.shutdown()
        self.records[engine.method.name].shutdown = report
        return report

    def release_all(self) -> None:
        """End of the run: every engine down, the kept baseline engine included."""
        self.release_current()
        self.release(BASELINE)

    def release(self, name: str) -> ShutdownReport | None:
        """Shut down `name`'s engine if it is the live one; return its shutdown report."""
        if self._engine is not None and self._engine.method.name == name:
            return self.release_current()
        if self._reference is not None and name == BASELINE:
            engine, self._reference = self._reference, None
            self.records[BASELINE].shutdown = engine.shutdown()
        return self.records[name].shutdown

    @property
    def _interleaving(self) -> bool:
        return self.profile.speedup.interleave_baseline and "speedup" in self.selected_gates and self.endpoints is None

    def baseline_released_last(self) -> bool:
        """With interleaved speedup trials the baseline engine lives until every method has run, so
        its lifecycle test belongs at the very end."""
        return self._interleaving

    def expected_boot_failure(self, name: str, error: EngineBootError) -> str | None:
        """The skip reason when the profile says this method may not boot here and it did not: the
        engine's own line that matches the profile's `expected_boot_error`."""
        pattern = self._by_name[name].expected_boot_error
        if not pattern:
            return None
        for line in f"{error.detail}\n{error.log_tail}\n{error}".splitlines():
            match = re.search(pattern, line)
            if match:
                # Quote up to the end of the sentence that matched (vLLM may append long listings).
                end = line.find(". ", match.end())
                quote = line[: end + 1 if end >= 0 else len(line)].strip()[:400]
                reason = f"method '{name}' cannot run on this engine; vLLM said: {quote}"
                self.records[name].skipped_reason = reason
                return reason
        return None

    # -- measurements ---------------------------------------------------------------------------
    def _category_runs(self, name: str) -> dict[str, BatchResult]:
        """One greedy batch per prompt category (the baseline also keeps top-k logprobs). The same
        pass gives the equivalence outputs and, from counter deltas, each category's acceptance."""
        if name in self._run_errors:
            raise self._run_errors[name]  # do not reboot an engine whose generation already failed
        if name not in self._runs:
            engine = self.engine(name)
            top = self.profile.equivalence.top_logprobs if name == BASELINE else 0
            runs = {}
            try:
                for category in self.categories():
                    batch = [p for p in self.prompts() if p.category == category]
                    runs[category] = engine.run_batch(batch, self.profile.max_tokens, top)
            except Exception as exc:
                self._run_errors[name] = exc
                raise
            self._runs[name] = runs
        return self._runs[name]

    def greedy_outputs(self, name: str) -> dict[str, GreedyOutput]:
        return {pid: out for run in self._category_runs(name).values() for pid, out in run.outputs.items()}

    def acceptance(self, name: str, category: str) -> AcceptanceResult:
        run = self._category_runs(name)[category]
        return AcceptanceResult.from_batch(run.counters, run.tokens_per_step, self._by_name[name].num_speculative_tokens)

    # -- baselines ------------------------------------------------------------------------------
    @functools.cached_property
    def hardware(self) -> str:
        return baselines.hardware_key(*baselines.detect_device(self.profile.hardware))

    def baseline_file(self) -> baselines.BaselineFile:
        """The stored baselines for this profile and hardware (BaselineError when the file is bad)."""
        if self._baseline_file is None:
            path = baselines.baseline_path(self.root, self.profile.name, self.hardware)
            self._baseline_file = baselines.load(path, self.profile.name, self.hardware)
        return self._baseline_file

    def record(self, method: str, kind: str, key: str, values: dict) -> None:
        self.measured.setdefault(method, {}).setdefault(kind, {})[key] = values

    def _missing(self, method: str, kind: str, key: str) -> GateOutcome:
        path = baselines.baseline_path(self.root, self.profile.name, self.hardware)
        msg = (
            f"no stored {kind} baseline for method '{method}', {key} in {path}; create it with "
            f"`pytest -m gpu --specgate-profile {self.profile.name} --update-baselines` and commit the file"
        )
        return self._skip_unless_strict(msg)

    def _skip_unless_strict(self, why: str) -> GateOutcome:
        """Nothing to judge against: a skip that says why, or a failure under --specgate-strict."""
        return GateOutcome(failures=[why + " (--specgate-strict)"]) if self.strict else GateOutcome(skip=why)

    def check_acceptance(self, name: str, category: str) -> GateOutcome:
        """Acceptance of (method, category) against its stored baseline and the profile's floors."""
        method = self._by_name[name]
        result = self.acceptance(name, category)
        self.record(name, "acceptance", category, result.record())
        stored_file = self.baseline_file()
        ref = method.canary_of.get("acceptance", name)
        stored = stored_file.entry(ref, "acceptance", category)
        tol = self.profile.tolerance
        source = stored_file.source(ref)

        def failed(checks) -> list[str]:
            return [f"method '{name}', category '{category}': {msg}" for c in checks if (msg := c.fails())]

        against_baseline = failed(acceptance_checks(result, stored, tol.acceptance_rtol, tol.position_rtol, {}, source))
        against_floors = failed(acceptance_checks(result, None, 0.0, 0.0, method.floors))
        if ref != name:
            return self._canary(name, ref, "acceptance", category, stored, against_baseline)
        return self._verdict(name, "acceptance", category, stored, against_floors, against_baseline)

    def _verdict(self, name: str, kind: str, key: str, stored, always: list[str], against_baseline: list[str]) -> GateOutcome:
        """`always` (absolute floors, consistency) holds in every run; `against_baseline` is what an
        --update-baselines run replaces (its old -> new table shows them) and a missing baseline skips."""
        if self.update_baselines:
            return GateOutcome(failures=always)
        if always or against_baseline:
            return GateOutcome(failures=always + against_baseline)
        if stored is None:
            return self._missing(name, kind, key)
        return GateOutcome()

    def _canary(self, name: str, ref: str, kind: str, key: str, stored, failures: list[str]) -> GateOutcome:
        """A deliberately worse configuration passes only when the gate FAILS it against `ref`."""
        if stored is None:
            return self._missing(ref, kind, key)
        if not failures:
            return GateOutcome(
                failures=[
                    f"method '{name}' is a deliberately worse configuration of '{ref}', yet its {kind} ({key}) "
                    f"passed the checks against '{ref}''s baseline: the {kind} gate cannot fail here"
                ]
            )
        return GateOutcome()  # the gate caught it, as it must

    # -- speedup --------------------------------------------------------------------------------
    def load_trials(self, name: str, concurrency: int, repeat=None) -> LoadTrials:
        """`trials` closed-loop runs of this engine at this concurrency (cached). `repeat(fn, n)` runs
        the trial function n times (pytest-benchmark's timer, when the test has one)."""
        cached = self._load.setdefault(name, {})
        if concurrency in cached:
            return cached[concurrency]
        cfg = self.profile.speedup
        engine = self.engine(name)
        prompts = self.prompts()
        max_tokens = cfg.max_tokens or self.profile.max_tokens

        batch = trial_prompts(prompts, concurrency, cfg.num_requests(concurrency), self.profile.seed)

        def trial(index: int):
            return engine.closed_loop(batch, concurrency, max_tokens, cfg.temperature)

        if name not in self._warmed:  # first requests after boot pay for lazy initialisation (JIT, caches)
            top = max(self.profile.concurrency)
            warm = trial_prompts(prompts, top, 2 * top, self.profile.seed + 1)
            engine.closed_loop(warm, top, max_tokens, cfg.temperature)
            self._warmed.add(name)
        result = LoadTrials(concurrency)
        counters = []
        reference = self._reference if name != BASELINE else None
        paired = self._paired.setdefault((name, concurrency), LoadTrials(concurrency)) if reference else None

        def one_trial():
            if reference is not None:  # the baseline's trial right before the method's, same requests
                paired.runs.append(reference.closed_loop(batch, concurrency, max_tokens, cfg.temperature)[0])
            run, moved = trial(len(result.runs))
            result.runs.append(run)
            counters.append(moved)
            return run

        (repeat or _repeat)(one_trial, cfg.trials)
        result.counters = functools.reduce(lambda a, b: a + b, counters)
        if cfg.measure_step_costs:
            result.step_times = engine.timed_steps(lambda: trial(cfg.trials))
        cached[concurrency] = result
        return result

    def speedup(self, name: str, concurrency: int, repeat=None) -> SpeedupResult:
        base = self.load_trials(BASELINE, concurrency)
        spec = self.load_trials(name, concurrency, repeat)
        paired = self._paired.get((name, concurrency))
        if paired is not None:
            # interleaved: the ratio uses the baseline trials taken between this method's trials;
            # the baseline's own trials still give the step timings for the model check
            base = LoadTrials(concurrency, paired.runs, base.counters, base.step_times)
        estimate = stats.ratio_estimate(spec.throughputs, base.throughputs, seed=self.profile.seed)
        k = self._by_name[name].num_speculative_tokens
        length = spec.counters.mean_acceptance_length
        result = SpeedupResult(name, concurrency, estimate, stats.median(spec.throughputs), stats.median(base.throughputs), k, length)
        base_step, draft_call, verify_step = base.per_call("forward"), spec.per_call("propose"), spec.per_call("forward")
        if length is not None and base_step and draft_call is not None:
            result.cost_ratio = draft_call / k / base_step
            result.verify_cost = verify_step / base_step if verify_step else None
            result.alpha = stats.alpha_from_acceptance_length(min(length, k + 1.0), k)
            result.expected = stats.expected_speedup(result.alpha, k, result.cost_ratio)
        result.latency = spec.runs[-1].latency_summary() if spec.runs else {}
        return result

    def check_speedup(self, name: str, concurrency: int, repeat=None) -> GateOutcome:
        """Speedup over the baseline engine at this concurrency; fails only when the confidence
        interval's upper bound lies below the floor (stored speedup x (1 - speedup_rtol))."""
        key = f"C={concurrency}"
        if name == BASELINE:
            trials = self.load_trials(name, concurrency, repeat)
            self.record(name, "speedup", key, {"throughput_tok_s": round(stats.median(trials.throughputs), 3), "trials": len(trials.runs)})
            return GateOutcome()
        result = self.speedup(name, concurrency, repeat)
        alone = stats.median(self.load_trials(BASELINE, concurrency).throughputs)  # the baseline's own trials
        disturbed = self._disturbed(result, alone)
        if disturbed:  # not recorded either: an update keeps the stored value
            return self._skip_unless_strict(f"method '{name}', " + disturbed)
        self.record(name, "speedup", key, result.record())
        method = self._by_name[name]
        ref = method.canary_of.get("speedup", name)
        stored_file = self.baseline_file()
        stored = stored_file.entry(ref, "speedup", key)
        mismatch = self._other_machine(concurrency, alone)
        if mismatch and not self.update_baselines:
            return self._skip_unless_strict(mismatch)
        failures = []
        if stored is not None and "speedup" in stored:
            floor = stored["speedup"] * (1 - self.profile.tolerance.speedup_rtol)
            if stats.fails_floor(result.estimate, floor):
                failures.append(
                    f"method '{name}', C={concurrency}: speedup {result.estimate.describe()} is below the floor {floor:.2f} "
                    f"(stored {stored['speedup']:.2f} for '{ref}' x (1 - speedup_rtol {self.profile.tolerance.speedup_rtol}), "
                    f"{stored_file.source(ref)}); throughput {result.throughput:.1f} vs baseline engine {result.baseline_throughput:.1f} tok/s"
                    + (f"; {result.model_check()}" if result.expected else "")
                )
        if ref != name:
            return self._canary(name, ref, "speedup", key, stored, failures)
        return self._verdict(name, "speedup", key, stored, [], failures)

    def _within_machine_rtol(self, ratio: float) -> bool:
        rtol = self.profile.tolerance.machine_rtol
        return not rtol or 1 - rtol <= ratio <= 1 / (1 - rtol)

    def _disturbed(self, result: SpeedupResult, alone: float) -> str | None:
        """Why this interleaved measurement says nothing, if it does not: the baseline engine's trials
        paired with the method's ran far off its own trials of this run, so the machine changed under
        the measurement (seen on cpu-tiny: 212 tok/s paired with ngram against 382 alone, which
        stored an ngram speedup 30 % above every later run's)."""
        if (result.method, result.concurrency) not in self._paired:
            return None
        ratio = result.baseline_throughput / alone
        if self._within_machine_rtol(ratio):
            return None
        return (
            f"C={result.concurrency}: the baseline engine's trials paired with this method ran at "
            f"{result.baseline_throughput:.1f} tok/s against {alone:.1f} on their own earlier in this run ({ratio:.2f}x, "
            f"outside machine_rtol {self.profile.tolerance.machine_rtol}): the machine changed under the measurement, so "
            f"the speedup {result.estimate.describe()} is neither judged nor stored. Rerun on a quiet machine"
        )

    def _other_machine(self, concurrency: int, now: float) -> str | None:
        """Why this run's speedup ratios cannot be held against the stored ones, if they cannot.

        A ratio of two throughputs still depends on the machine: on a CPU twice as fast, a fixed
        per-step overhead weighs twice as much against the forward pass (cpu-tiny's speedups moved by
        -22 % to +9 % on a machine whose baseline engine ran 2.2x faster under the same CPU name).
        The baseline engine's own throughput, stored next to the ratios, tells.
        """
        stored = self.baseline_file().entry(BASELINE, "speedup", f"C={concurrency}")
        if not stored or not stored.get("throughput_tok_s"):
            return None
        ratio = now / stored["throughput_tok_s"]
        if self._within_machine_rtol(ratio):
            return None
        rtol = self.profile.tolerance.machine_rtol
        return (
            f"C={concurrency}: the baseline engine runs at {now:.1f} tok/s here against {stored['throughput_tok_s']:.1f} stored "
            f"({ratio:.2f}x, outside machine_rtol {rtol}; {self.baseline_file().source(BASELINE)}), so this is not the "
            f"machine whose speedups are stored; speedup ratios are not compared across machines. Store this machine's with "
            f"`pytest -m gpu --specgate-profile {self.profile.name} --update-baselines`"
        )

    def memory_reading(self, name: str):
        """This engine's memory, read once while it is alive (the baseline engine's is the reference)."""
        if name not in self._memory:
            self._memory[name] = self.engine(name).memory_reading()
        return self._memory[name]

    def memory_overhead(self, name: str):
        from specgate import memory

        method = self._by_name[name]
        base = self._memory.get(BASELINE)
        if base is None:
            raise SpecgateError(
                f"no memory reading of the baseline engine in this run, so method '{name}' has nothing to be "
                "compared with (did the baseline engine fail to boot?)"
            )
        analytic, kv_per_token = memory.drafter_footprint(self.profile, method, self.root)
        kv_target = memory.target_kv_bytes_per_token(self.profile, self.root)
        return memory.overhead(self.memory_reading(name), base, analytic, kv_per_token, kv_target)

    def check_memory(self, name: str) -> GateOutcome:
        """Memory overhead against the stored ceiling; the baseline engine is read and stored as is."""
        from specgate import memory

        if reason := self.not_measurable_here("memory"):
            return GateOutcome(skip=reason)
        if name == BASELINE:
            reading = self.memory_reading(name)
            self.record(name, "memory", "engine", memory.engine_record(reading))
            return GateOutcome()
        method = self._by_name[name]
        rec = self.memory_overhead(name).record()
        self.record(name, "memory", "overhead", rec)
        tol = self.profile.tolerance
        problems = []
        if (msg := memory.consistency_problem(rec, tol.memory_rtol)) is not None:
            problems.append(f"method '{name}': {msg}")
        stored_file = self.baseline_file()
        ref = method.canary_of.get("memory", name)
        stored = stored_file.entry(ref, "memory", "overhead")
        checks = memory.memory_checks(rec, stored, tol.memory_rtol, tol.memory_slack_mib, tol.process_slack_mib, stored_file.source(ref))
        failures = [f"method '{name}', memory: {msg}" for c in checks if (msg := c.fails())]
        if ref != name:
            return self._canary(name, ref, "memory", "overhead", stored, failures)
        return self._verdict(name, "memory", "overhead", stored, problems, failures)

    def write_baselines(self) -> str:
        """Merge this run's measurements into the stored file, atomically and under a file lock: other
        pytest-xdist workers may be merging theirs at the same moment, so the file is re-read inside
        the lock and only what this process measured is replaced. Returns the old -> new table."""
        from filelock import FileLock

        self.baseline_file()  # a corrupt file fails here, before anything is written
        path = baselines.baseline_path(self.root, self.profile.name, self.hardware)
        path.parent.mkdir(parents=True, exist_ok=True)
        device, count = baselines.detect_device(self.profile.hardware)
        with FileLock(str(path) + ".lock", timeout=600):
            stored = baselines.load(path, self.profile.name, self.hardware)
            held_back, why = self._speedups_from_another_machine(stored)
            measured = {
                method: {kind: {key: v for key, v in entries.items() if not (kind == "speedup" and key in held_back)} for kind, entries in kinds.items()}
                for method, kinds in self.measured.items()
            }
            updated = baselines.merge(stored, measured, baselines.provenance(self.root, device, count))
            baselines.write_atomic(updated)
        # self._baseline_file stays the file this run was judged against (the report shows old vs new).
        text = baselines.format_diff(baselines.diff(stored, updated), f"baselines written to {stored.path}")
        return text + (f"\n{why}" if why else "")

    def _speedups_from_another_machine(self, stored: baselines.BaselineFile) -> tuple[set[str], str]:
        """The concurrency keys whose speedups this run must not write, and why. The baseline engine's
        stored throughput stamps every method's stored speedup with the machine it was measured on
        (_other_machine); rewriting it from another machine while other methods keep their ratios
        would leave those ratios judged as this machine's. Acceptance and memory do not depend on it."""
        run = {BASELINE, *(m.name for m in self.methods)}
        keys, here, there, others = [], [], [], set()
        for key, now in self.measured.get(BASELINE, {}).get("speedup", {}).items():
            before = stored.entry(BASELINE, "speedup", key)
            if not before or not before.get("throughput_tok_s") or not now.get("throughput_tok_s"):
                continue
            left = {m for m, kinds in stored.methods.items() if m not in run and key in kinds.get("speedup", {})}
            if left and not self._within_machine_rtol(now["throughput_tok_s"] / before["throughput_tok_s"]):
                keys.append(key)
                here.append(f"{now['throughput_tok_s']:.1f}")
                there.append(f"{before['throughput_tok_s']:.1f}")
                others |= left
        if not keys:
            return set(), ""
        return set(keys), (
            f"speedups at {', '.join(keys)} not written: the baseline engine ran at {' / '.join(here)} tok/s here against "
            f"{' / '.join(there)} stored (outside machine_rtol {self.profile.tolerance.machine_rtol}), and the stored "
            f"speedups of {', '.join(sorted(others))} were measured on that other machine; storing this run's would mix "
            f"two machines' ratios in {stored.path}. To move the speedup baselines to this machine, update every method "
            f"at once (`pytest -m gpu --specgate-profile {self.profile.name} --update-baselines` without --specgate-methods)."
        )

    def equivalence(self, name: str) -> list[EquivalenceFinding]:
        """Every prompt whose output differs from the baseline's, classified; records the counts."""
        reference = self.greedy_outputs(BASELINE)
        outputs = self.greedy_outputs(name)
        record = self.records[name]
        findings = []
        record.compared = record.identical = record.numerical = record.diverged = 0
        for prompt in self.prompts():
            record.compared += 1
            div = compare(reference[prompt.id], outputs[prompt.id].token_ids, self.profile.equivalence)
            if div is None:
                record.identical += 1
                continue
            if div.numerical:
                record.numerical += 1
            else:
                record.diverged += 1
            findings.append(EquivalenceFinding(prompt, div))
        return findings

    def describe(self, finding: EquivalenceFinding, name: str) -> str:
        rule = self.profile.equivalence
        return (
            f"method '{name}', prompt {finding.prompt.id} ({finding.prompt.category}) "
            + finding.divergence.describe(self.decode, rule.logprob_margin, rule.mode)
        )

    # -- summary --------------------------------------------------------------------------------
    @property
    def engines_booted(self) -> int:
        return sum(len(r.boot_s) for r in self.records.values())

    def summary_lines(self) -> list[str]:
        ran = [r for r in self.records.values() if r.boot_s and r.method != BASELINE]
        failed = [r for r in self.records.values() if r.boot_error]
        lines = [
            f"profile {self.profile.name} ({self.profile.path}); results in {self.out_dir}",
            f"engines booted: {self.engines_booted} (methods run: {len(ran)} + {len(self.records[BASELINE].boot_s)} baseline"
            f"{f'; {len(failed)} failed to boot' if failed else ''}); wall time {time.monotonic() - self.started:.0f} s",
        ]
        for r in self.records.values():
            if self.endpoints is not None:
                state = f"endpoint {self.endpoints[r.method]}" if r.method in self.endpoints else "no endpoint given"
            elif not r.boots:
                state = "not run"
            elif r.skipped_reason:
                state = f"skipped: {r.skipped_reason}"
            elif r.boot_error:
                state = f"boot failed: {r.boot_error.reason or r.boot_error}"
            else:
                boot = ", ".join(f"{s:.1f}" for s in r.boot_s)
                state = f"boot {boot} s"
                if r.shutdown:
                    sd = r.shutdown
                    state += (
                        f"; footprint {sd.footprint / 2**30:.2f} GiB; shutdown {sd.shutdown_s:.1f} s, "
                        f"not returned {sd.memory_not_returned / 2**30:.2f} GiB"
                    )
                if r.compared:
                    state += f"; greedy: {r.identical}/{r.compared} identical, {r.numerical} near-ties, {r.diverged} diverged"
            lines.append(f"  {r.method:<14} {state}")
            accepted = self.measured.get(r.method, {}).get("acceptance", {})
            if accepted:
                lengths = ", ".join(f"{c} {v.get('mean_acceptance_length', float('nan')):.2f}" for c, v in accepted.items())
                lines.append(f"  {'':<14} mean acceptance length: {lengths}")
            overhead = self.measured.get(r.method, {}).get("memory", {}).get("overhead")
            if overhead:
                lines.append(
                    f"  {'':<14} memory: drafter {overhead.get('static_mib_measured', float('nan')):.2f} MiB, "
                    f"KV tokens lost {overhead.get('kv_tokens_lost', 'n/a')}, processes {overhead['process_mib']:+.0f} MiB"
                )
            speed = self.measured.get(r.method, {}).get("speedup", {})
            if speed:
                parts = []
                for key, v in speed.items():
                    if "speedup" in v:
                        part = f"{key} {v['speedup']:.2f} [{v['ci_low']:.2f}, {v['ci_high']:.2f}]"
                        if v.get("measured_over_expected") is not None:
                            part += f" ({v['measured_over_expected']:.2f} of model)"
                    else:
                        part = f"{key} {v['throughput_tok_s']:.0f} tok/s"
                    parts.append(part)
                lines.append(f"  {'':<14} {'speedup' if r.method != BASELINE else 'throughput'}: {', '.join(parts)}")
        boots = Counter({r.method: r.boots for r in self.records.values() if r.boots > 1})
        if boots:
            lines.append(f"  warning: booted more than once: {dict(boots)} (tests reordered, or an engine was lost)")
        return lines
