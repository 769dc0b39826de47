"""The measurement store: everything measured in a run, once per method, cached.

Several gate tests of one method share one engine and one generation pass: the greedy pass (one
batch per prompt category) gives both the equivalence outputs and, from counter deltas, each
category's acceptance; the closed-loop trials give the speedup and, from the tokens each request
streamed and the counters they moved, each level's outputs and acceptance (the load gate); the
baseline engine's warm-up before its first trial is the load's reference pass (every prompt the
trials send, once, with top-k logprobs); the memory reading is taken once.
Before any method's engine boots, `prepare_reference` makes sure the baseline engine's side of every
comparison the selected gates will make is measured (an xdist worker that did not get the
baseline's own tests measures it here, on its own devices).
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field

from specgate.backend import BatchResult
from specgate.errors import EngineDied, SpecgateError
from specgate.figures import distribution, stats
from specgate.figures.acceptance import AcceptanceResult
from specgate.figures.equivalence import GreedyOutput
from specgate.figures.load import LoadRun, trial_prompts
from specgate.gates import EQUIVALENCE, LOAD, MEMORY, SPEEDUP
from specgate.profile import BASELINE


@dataclass
class LoadTrials:
    """One engine's closed-loop trials at one concurrency (trial i of every engine sends the same
    requests), the spec-decode counters they moved, and the worker's step timings if measured."""

    concurrency: int
    runs: list = field(default_factory=list)  # specgate.figures.load.LoadRun
    counters: object = None  # SpecCounters over all trials
    step_times: dict | None = None
    interrupted: LoadRun | None = None  # what a trial the engine did not finish streamed until it stopped

    @property
    def throughputs(self) -> list[float]:
        return [r.throughput for r in self.runs]

    def per_call(self, name: str) -> float | None:
        """Seconds per call of a timed worker function ('forward', 'propose'), if it was called."""
        t = self.step_times or {}
        return t[f"{name}_s"] / t[f"{name}_calls"] if t.get(f"{name}_calls") else None


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
    paired: bool = False  # the baseline trials were taken between this method's (interleaved)
    alpha: float | None = None
    cost_ratio: float | None = None  # c: one drafting step / one plain target step
    verify_cost: float | None = None  # one verification forward / one plain target step
    # One drafting call / one verification forward of the same engine in the same timed trial: what
    # the drafter costs per step, free of the drift between engine sessions (both sides drift together).
    draft_cost: float | None = None
    expected: float | None = None  # Leviathan et al.
    not_measured: str = ""  # why the model check's step costs could not be taken, when they could not
    merged_chunks: int = 0  # streamed chunks of more than k + 1 tokens: several engine steps merged
    latency: dict = field(default_factory=dict)
    baseline_latency: dict = field(default_factory=dict)  # the baseline engine's paired trials

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
        if self.merged_chunks:  # ITL and TPOT from the stream are then not per engine step
            rec["merged_stream_chunks"] = self.merged_chunks
        if self.expected is not None:
            rec.update(
                alpha=r6(self.alpha),
                cost_ratio=r6(self.cost_ratio),
                verify_cost=r6(self.verify_cost),
                draft_cost=r6(self.draft_cost),
                expected_speedup=r6(self.expected),
                measured_over_expected=r6(self.estimate.value / self.expected),
            )
        for name in ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "itl_p95_ms", "itl_p99_ms", "e2e_p50_ms"):
            if name in self.latency and math.isfinite(self.latency[name]):
                rec[name] = round(self.latency[name], 3)
        for name in ("ttft_p50_ms", "ttft_p95_ms", "itl_p95_ms"):  # the same tails without speculation
            if name in self.baseline_latency and math.isfinite(self.baseline_latency[name]):
                rec[f"baseline_{name}"] = round(self.baseline_latency[name], 3)
        return rec


def _repeat(fn, times: int) -> None:
    for _ in range(times):
        fn()


class MeasurementStore:
    def __init__(self, profile, host, inputs, gates: frozenset[str], levels: tuple[int, ...]):
        self.profile, self.host, self.inputs = profile, host, inputs
        self.load_inputs = inputs.speedup_inputs()  # the speedup load's prompts ([speedup] prompts, else these)
        self.gates, self.levels = gates, levels
        self.reference_ready = False
        self._runs: dict[str, dict[str, BatchResult]] = {}  # method -> category -> batch
        self._run_errors: dict[str, Exception] = {}
        self._memory: dict = {}  # method -> MemoryReading
        self._load: dict[str, dict[int, LoadTrials]] = {}  # method -> concurrency -> trials
        self._paired: dict[tuple[str, int], LoadTrials] = {}  # (method, C) -> interleaved baseline trials
        self._warmed: set[str] = set()
        self._reference: dict[str, GreedyOutput] | None = None  # the baseline engine's load reference pass
        self._warmups: dict[str, LoadRun] = {}  # a method engine's warm-up at the top level (untimed)
        self._pending: dict[tuple[str, int], LoadTrials] = {}  # a level whose trials have not all finished
        self.before_methods: list = []  # more of the baseline engine's side, measured in prepare_reference

    def engine(self, name: str):
        """The live engine for `name`; the baseline's side of every comparison is measured first."""
        if name != BASELINE:
            self.prepare_reference()
        self.inputs.tokenized()  # fail on bad prompts before paying for a boot
        if SPEEDUP in self.gates or LOAD in self.gates:
            self.load_inputs.tokenized()
        return self.host.engine(name)

    def measuring(self, fn, *args, **kwargs):
        """Run a measurement; an engine that dies on the way is recorded with the host (for the scenarios'
        measurements too: specgate.run.scenarios)."""
        try:
            return fn(*args, **kwargs)
        except EngineDied as exc:
            self.host.died(exc)
            raise

    def prepare_reference(self) -> None:
        if self.reference_ready or self.host.endpoints is not None:
            return
        if EQUIVALENCE in self.gates:
            self.category_runs(BASELINE)
        if SPEEDUP in self.gates or LOAD in self.gates:
            for level in self.levels:
                self.load_trials(BASELINE, level)
        if MEMORY in self.gates:
            self.memory_reading(BASELINE)
        for measure in self.before_methods:
            with contextlib.suppress(SpecgateError):  # kept by the scenario: its own test reports it
                measure()
        self.reference_ready = True

    # -- the greedy pass --------------------------------------------------------------------------
    def category_runs(self, name: str, temperature: float = 0.0) -> dict[str, BatchResult]:
        """One batch per prompt category: greedy (the baseline also keeps top-k logprobs), or sampled
        at `temperature` with a fixed seed per request. The greedy pass gives the equivalence outputs
        and, from counter deltas, each category's acceptance; a sampled pass only acceptance."""
        cache_key = name if not temperature else f"{name}@T{temperature:g}"
        if cache_key in self._run_errors:  # do not rerun an engine whose generation already failed
            error = self._run_errors[cache_key]
            raise error.again() if isinstance(error, EngineDied) else error
        if cache_key not in self._runs:
            engine = self.engine(name)
            top = self.profile.equivalence.top_logprobs if name == BASELINE and not temperature else 0
            sampling = {"temperature": temperature, "seed": self.profile.seed} if temperature else {}
            runs = {}
            try:
                for category in self.inputs.categories():
                    batch = [p for p in self.inputs.tokenized() if p.category == category]
                    runs[category] = self.measuring(engine.run_batch, batch, self.profile.max_tokens, top, **sampling)
            except Exception as exc:
                self._run_errors[cache_key] = exc
                raise
            self._runs[cache_key] = runs
        return self._runs[cache_key]

    def greedy_outputs(self, name: str) -> dict[str, GreedyOutput]:
        return {pid: out for run in self.category_runs(name).values() for pid, out in run.outputs.items()}

    def acceptance(self, name: str, category: str, temperature: float = 0.0) -> AcceptanceResult:
        run = self.category_runs(name, temperature)[category]
        k = self.profile.methods[name].num_speculative_tokens if name != BASELINE else 0
        # each request's figures on the greedy pass (at T > 0 they are one sample's: not kept)
        outputs = {pid: out.token_ids for pid, out in run.outputs.items()} if not temperature else None
        window = distribution.window_size(self.profile.max_tokens)
        emitted = (sum(len(out.token_ids) for out in run.outputs.values()), len(run.outputs))  # how often it drafted
        return AcceptanceResult.from_batch(
            run.counters, run.tokens_per_step, k, run.step_histograms, outputs, run.step_series, window, emitted
        )

    # -- load ----------------------------------------------------------------------------------
    def load_trials(self, name: str, concurrency: int, repeat=None) -> LoadTrials:
        """`trials` closed-loop runs of this engine at this concurrency (cached). `repeat(fn, n)` runs
        the trial function n times (pytest-benchmark's timer, when the test has one). With an
        interleaved baseline, each method trial is preceded by a baseline trial of the same requests."""
        cached = self._load.setdefault(name, {})
        if concurrency in cached:
            return cached[concurrency]
        cfg = self.profile.speedup
        engine = self.engine(name)
        if name not in self._warmed:  # first requests after boot pay for lazy initialisation (JIT, caches)
            self._warm(name, engine)
        result = self._pending.setdefault((name, concurrency), LoadTrials(concurrency))
        self._trials(name, result, cfg.trials, repeat)
        if cfg.measure_step_costs:
            batch = self._batch(concurrency)
            result.step_times = self.measuring(
                engine.timed_steps, lambda: engine.closed_loop(batch, concurrency, self._max_tokens, cfg.temperature)
            )
        cached[concurrency] = result
        self._pending.pop((name, concurrency), None)
        return result

    def _warm(self, name: str, engine) -> None:
        """The engine's first requests, untimed. The baseline engine's (greedy load) are the load's reference
        pass: every prompt the trials send at any level, once, all at once, with the top-k logprobs the
        tie-aware rule reads; another engine's, a closed loop at the top level."""
        cfg = self.profile.speedup
        if name == BASELINE and not cfg.temperature:
            top = self.profile.equivalence.top_logprobs
            batch = self.measuring(engine.run_batch, self.load_prompts(), self._max_tokens, top)
            self._reference = dict(batch.outputs)
        else:
            top = max(self.profile.concurrency)
            try:
                run, _ = self.measuring(engine.closed_loop, self._warm_batch(), top, self._max_tokens, cfg.temperature)
                self._warmups[name] = run
            except EngineDied:  # kept, its requests possibly cut short
                self._warmups[name] = LoadRun(top, list(engine.last_traces), 0.0, 0.0, interrupted=True)
                raise
        self._warmed.add(name)

    def load_prompts(self) -> list:
        """Every prompt the trials send at some level of the profile, and a method engine's warm-up, once each."""
        seen: dict[str, object] = {}
        for batch in (*(self._batch(level) for level in self.profile.concurrency), self._warm_batch()):
            for p in batch:
                seen.setdefault(p.id, p)
        return list(seen.values())

    def _warm_batch(self) -> list:
        top = max(self.profile.concurrency)
        return trial_prompts(self.load_inputs.tokenized(), top, 2 * top, self.profile.seed + 1)

    def load_reference(self) -> dict[str, GreedyOutput] | None:
        """The baseline engine's output for every prompt of the load (its warm-up), None where the load samples
        (T > 0: nothing to compare) or the baseline engine's trials were not run here."""
        return self._reference

    def load_runs(self, name: str, concurrency: int) -> list[LoadRun]:
        """Every timed trial `name`'s engine ran at this level, with the tokens each request streamed."""
        return list(self.load_trials(name, concurrency).runs)

    def warmup_run(self, name: str) -> LoadRun | None:
        """A method engine's warm-up (a closed loop at the top level, untimed), as far as it went."""
        return self._warmups.get(name)

    def interrupted_runs(self, name: str, concurrency: int) -> list[LoadRun]:
        """What this level's trials streamed before the engine stopped: the finished trials, then the one it did
        not finish (marked interrupted: its requests possibly cut short)."""
        pending = self._pending.get((name, concurrency))
        if pending is None:
            return []
        return [*pending.runs, *([pending.interrupted] if pending.interrupted is not None else [])]

    def more_trials(self, name: str, concurrency: int, n: int) -> None:
        """`n` more paired trials for a cell whose decision is still open (sequential trials)."""
        self._trials(name, self.load_trials(name, concurrency), n)

    @property
    def _max_tokens(self) -> int:
        return self.profile.speedup.max_tokens or self.profile.max_tokens

    def _batch(self, concurrency: int) -> list:
        cfg = self.profile.speedup
        return trial_prompts(
            self.load_inputs.tokenized(), concurrency, cfg.num_requests(concurrency), self.profile.seed
        )

    def _trials(self, name: str, result: LoadTrials, n: int, repeat=None) -> None:
        cfg, concurrency = self.profile.speedup, result.concurrency
        engine, batch = self.engine(name), self._batch(concurrency)
        reference = self.host.reference if name != BASELINE else None
        paired = self._paired.setdefault((name, concurrency), LoadTrials(concurrency)) if reference else None
        counters = [result.counters] if result.counters is not None else []

        def one_trial():
            if reference is not None:
                paired.runs.append(reference.closed_loop(batch, concurrency, self._max_tokens, cfg.temperature)[0])
            run, moved = engine.closed_loop(batch, concurrency, self._max_tokens, cfg.temperature)
            result.runs.append(run)
            counters.append(moved)
            return run

        try:
            self.measuring(repeat or _repeat, one_trial, n)
        except EngineDied:
            done = {id(t) for run in result.runs for t in run.requests}  # (the paired engine's stop leaves none)
            cut = [t for t in engine.last_traces if id(t) not in done]
            result.interrupted = LoadRun(concurrency, cut, 0.0, 0.0, interrupted=True) if cut else None
            raise
        result.counters = functools.reduce(lambda a, b: a + b, counters)

    def baseline_alone(self, concurrency: int) -> float:
        """Median throughput of the baseline engine's own trials at this level."""
        return stats.median(self.load_trials(BASELINE, concurrency).throughputs)

    def speedup(self, name: str, concurrency: int, repeat=None) -> SpeedupResult:
        base = self.load_trials(BASELINE, concurrency)
        spec = self.load_trials(name, concurrency, repeat)
        paired = self._paired.get((name, concurrency))
        if paired is not None:
            # interleaved: the ratio uses the baseline trials taken between this method's trials;
            # the baseline's own trials still give the step timings for the model check
            base = LoadTrials(concurrency, paired.runs, base.counters, base.step_times)
        estimate = stats.ratio_estimate(spec.throughputs, base.throughputs, seed=self.profile.seed)
        k = self.profile.methods[name].num_speculative_tokens
        length = spec.counters.mean_acceptance_length
        result = SpeedupResult(
            name,
            concurrency,
            estimate,
            stats.median(spec.throughputs),
            stats.median(base.throughputs),
            k,
            length,
            paired=paired is not None,
        )
        base_step, draft_call, verify_step = (
            base.per_call("forward"),
            spec.per_call("propose"),
            spec.per_call("forward"),
        )
        if length is not None and base_step and draft_call is not None:
            result.cost_ratio = draft_call / k / base_step
            result.verify_cost = verify_step / base_step if verify_step else None
            result.draft_cost = draft_call / verify_step if verify_step else None
            result.alpha = stats.alpha_from_acceptance_length(min(length, k + 1.0), k)
            result.expected = stats.expected_speedup(result.alpha, k, result.cost_ratio)
        elif self.profile.speedup.measure_step_costs:
            result.not_measured = (
                "this method drafted nothing under load"
                if length is None
                else "the model runner offers no step timers (vllm_compat.step_timers)"
                if base.step_times is None or spec.step_times is None
                else "no drafting call was timed"
            )
        result.merged_chunks = sum(n > k + 1 for run in spec.runs for r in run.requests for _, n in r.arrivals)
        result.latency = spec.runs[-1].latency_summary() if spec.runs else {}
        result.baseline_latency = base.runs[-1].latency_summary() if base.runs else {}
        return result

    # -- memory --------------------------------------------------------------------------------
    def memory_reading(self, name: str):
        """This engine's memory, read once while it is alive (the baseline engine's is the reference)."""
        if name not in self._memory:
            self._memory[name] = self.measuring(self.engine(name).memory_reading)
        return self._memory[name]

    def memory_overhead(self, name: str, root):
        from specgate.figures import memory

        base = self._memory.get(BASELINE)
        if base is None:
            raise SpecgateError(
                f"no memory reading of the baseline engine in this run, so method '{name}' has nothing to be "
                "compared with (did the baseline engine fail to boot?)"
            )
        method, reading = self.profile.methods[name], self.memory_reading(name)
        # what the engine took from the target is not the drafter's on either side
        analytic, kv_per_token = memory.drafter_footprint(self.profile, method, root, shared=reading.drafter_shared)
        kv_target = memory.target_kv_bytes_per_token(self.profile, root)
        return memory.overhead(reading, base, analytic, kv_per_token, kv_target)
