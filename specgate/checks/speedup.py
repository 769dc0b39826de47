"""Speedup per (method, concurrency) over the baseline engine measured in the same run.

The floor is the stored speedup x (1 - speedup_rtol); the gate fails only when the bootstrap
interval's upper bound lies below it, so noise alone does not fail a build. Two things the interval
cannot see: a machine that changed under the measurement (the baseline engine's paired trials far off
its own) is neither judged nor stored; ratios stored on another machine (another file, or this file
while the baseline engine runs outside machine_rtol of its stored speed) are judged coarsely, against
stored x (1 - coarse_speedup_rtol), and say so. The step cost (the worker's own timers: a drafting call
and a verification step of one engine) is held to this machine's own stored figure wherever it has one,
coarse or not; another machine's is shown, never a ceiling.
"""

from __future__ import annotations

from dataclasses import replace

from specgate.checks import ROUNDING, Basis, Context, Judgement, Row, Verdict
from specgate.figures import stats
from specgate.gates import SPEEDUP, Level
from specgate.profile import BASELINE

COARSE = "coarse judgement: "  # how the reason for a coarse judgement is introduced in a message
# the figures an unjudged speed row names in its message (the rest are in its rows)
SHOWN = ("speedup", "geomean_speedup", "throughput_tok_s", "draft_cost", "verify_cost")


class SpeedupCheck:
    gate = SPEEDUP

    def __init__(self, ctx: Context, store):
        self.ctx, self.store = ctx, store

    def judge(self, method: str, key: Level, repeat=None) -> Judgement:
        """A level's speedup (the baseline engine: its throughput), or the summary over the levels. `repeat(fn,
        n)` runs a level's trial function n times (pytest-benchmark's timer, when the gate test has one)."""
        if self.ctx.speed_unjudged is not None and (why := self.ctx.speed_unjudged(method)):
            return self._unjudged(method, key, why, repeat)
        if key.concurrency is None:
            return self._summary(method, key)
        concurrency = key.concurrency
        if method == BASELINE:
            trials = self.store.load_trials(method, concurrency, repeat)
            record = {"throughput_tok_s": round(stats.median(trials.throughputs), 3), "trials": len(trials.runs)}
            rows = self._rows(method, record, {}, concurrency, True) + self._runner(method, concurrency)
            return Judgement(self.gate, method, key, Verdict.PASS, rows=rows, record=record)
        result = self.store.speedup(method, concurrency, repeat)
        alone = self.store.baseline_alone(concurrency)
        j = Judgement(self.gate, method, key, Verdict.PASS)
        ref = self.ctx.reference(method, self.gate)
        found = self.ctx.lookup(method, self.gate, key)
        stored = found.values if found else None
        coarse = None
        if found and found.this_run:
            pass  # a canary against its parent measured in this run: same machine, same moment
        elif found and not found.own:
            coarse = f"the speedups were stored on another machine ({found.source})"
        elif found and (mismatch := self._other_machine(concurrency, alone)):
            coarse = mismatch
        j.basis = Basis.COARSE if coarse else Basis.OWN
        rtol_name, rtol = self.rtol(j.basis)
        cfg = self.ctx.profile.speedup
        if cfg.max_trials and stored is not None and "speedup" in stored and not self.ctx.update:
            floor = stored["speedup"] * (1 - rtol)
            stats.sequential(
                lambda: self.store.speedup(method, concurrency).estimate,
                lambda n: self.store.more_trials(method, concurrency, n),
                floor,
                cfg.max_trials,
                cfg.step_trials,
            )
            result = self.store.speedup(method, concurrency)
        if disturbed := self._disturbed(result, alone):  # not recorded either: an update keeps the stored value
            j.basis = Basis.DISTURBED
            return self.ctx.skip_unless_strict(j, f"method '{method}', " + disturbed)
        j.record = result.record()
        j.record.update(self._cost(result))
        # The step cost is a ratio of two timers in one engine at one moment: a slower or busier machine
        # moves both, so it is held to this machine's own figure also where the speedup is judged coarsely
        # for that reason (a new user's A/A runs here: the baseline engine at 0.58-0.63x its stored speed,
        # draft_cost within 0.003 of ngram's stored figure, 0.023 of eagle3's; docs/speedup-gate.md).
        # Never another machine's.
        own = bool(found) and (found.this_run or found.own)
        j.rows = self._rows(method, j.record, stored or {}, concurrency, False, rtol, step_cost=own)
        if result.not_measured:
            j.rows.append(
                Row("expected_speedup", None, unit=f"not measured: {result.not_measured}", concurrency=concurrency)
            )
        j.rows += self._runner(method, concurrency)
        failures = self._tail_latency(method, concurrency, j.record, stored) if not coarse else []
        failures += self._step_costs(method, concurrency, j.record, stored) if own else []
        if stored is not None and "speedup" in stored:
            floor = stored["speedup"] * (1 - rtol)
            if stats.fails_floor(result.estimate, floor):
                failures.append(
                    f"method '{method}', C={concurrency}: speedup {result.estimate.describe()} is below the "
                    f"{'coarse ' if coarse else ''}floor {floor:.2f} ({'measured' if found.this_run else 'stored'} "
                    f"{stored['speedup']:.2f} for '{ref}' x "
                    f"(1 - {rtol_name} {rtol}), {found.source}); throughput {result.throughput:.1f} vs baseline engine "
                    f"{result.baseline_throughput:.1f} tok/s"
                    + (f"; {result.model_check()}" if result.expected else "")
                    + (f"; {COARSE}{coarse}" if coarse else "")
                )
        j = self.ctx.decide(j, stored, [], failures)
        if coarse and j.verdict is Verdict.PASS and not self.ctx.update:
            j.messages.append(f"{COARSE}{coarse}; held to stored x (1 - coarse_speedup_rtol {rtol})")
        return j

    def _unjudged(self, method: str, key: Level, why: str, repeat=None) -> Judgement:
        """Speed that says nothing of vLLM's (its engines' kernels in Triton's interpreter): the trials still run
        (the load gate judges their outputs and acceptance) and their figures are shown, none held to a bound or
        stored: a skip that says why."""
        j = Judgement(self.gate, method, key, Verdict.SKIP)
        if key.concurrency is None:
            levels = list(self.ctx.profile.concurrency)
            summary = stats.geometric_mean_estimate([self.store.speedup(method, c).estimate for c in levels])
            record = {"geomean_speedup": round(summary.value, 6)}
        elif method == BASELINE:
            trials = self.store.load_trials(method, key.concurrency, repeat)
            record = {"throughput_tok_s": round(stats.median(trials.throughputs), 3)}
        else:
            record = self.store.speedup(method, key.concurrency, repeat).record()
        j.rows = [replace(r, headline=False) for r in self._rows(method, record, {}, key.concurrency, False)]
        j.rows += self._runner(method, key.concurrency)
        shown = ", ".join(f"{k} {v:g}" for k, v in record.items() if k in SHOWN and v is not None)
        j.messages = [f"method '{method}', {key}: speed not judged: {why}" + (f" (measured: {shown})" if shown else "")]
        return j

    def _cost(self, result) -> dict[str, float]:
        """Cost per million output tokens at the runner's hourly price ([cost] usd_per_hour), with and
        without speculation, and the saving: 1 - baseline throughput / method throughput."""
        price = self.ctx.profile.usd_per_hour
        if not price or not result.throughput or not result.baseline_throughput:
            return {}
        per_mtok = lambda tok_s: round(price / (tok_s * 3600) * 1e6, 6)  # noqa: E731
        return {
            "usd_per_mtok": per_mtok(result.throughput),
            "baseline_usd_per_mtok": per_mtok(result.baseline_throughput),
            "cost_saving": round(1 - result.baseline_throughput / result.throughput, 6),
        }

    def _tail_latency(self, method: str, concurrency: int, record: dict, stored: dict | None) -> list[str]:
        """With ttft_p95_rtol > 0: TTFT p95 with speculation over the baseline engine's in the same
        trials must not grow past its stored ratio x (1 + ttft_p95_rtol)."""
        rtol = self.ctx.profile.tolerance.ttft_p95_rtol
        keys = ("ttft_p95_ms", "baseline_ttft_p95_ms")
        if not rtol or not stored or not all(record.get(k) for k in keys) or not all(stored.get(k) for k in keys):
            return []
        now, before = record[keys[0]] / record[keys[1]], stored[keys[0]] / stored[keys[1]]
        if now <= before * (1 + rtol):
            return []
        return [
            f"method '{method}', C={concurrency}: TTFT p95 is {now:.2f}x the baseline engine's "
            f"({record[keys[0]]:.1f} vs {record[keys[1]]:.1f} ms), stored {before:.2f}x; ceiling "
            f"{before * (1 + rtol):.2f}x "
            f"(ttft_p95_rtol {rtol})"
        ]

    def step_cost_bounds(self, method: str, stored: dict | None) -> dict[str, float]:
        """Ceilings of the step-cost check: draft_cost (absolute) and verify_cost (relative), with the
        method's own tolerances where it has them."""
        tol, out = self.ctx.tolerance(method, self.gate), {}
        if stored and tol.draft_cost_tol and stored.get("draft_cost") is not None:
            out["draft_cost"] = stored["draft_cost"] + tol.draft_cost_tol
        if stored and tol.verify_cost_rtol and stored.get("verify_cost") is not None:
            out["verify_cost"] = stored["verify_cost"] * (1 + tol.verify_cost_rtol)
        return out

    def _step_costs(self, method: str, concurrency: int, record: dict, stored: dict | None) -> list[str]:
        """The worker's own step timers, beside the wall-clock speedup: a drafter that costs more of a
        step than stored fails here even where the speedup's interval cannot separate it from drift."""
        tol, out = self.ctx.tolerance(method, self.gate), []
        said = {
            "draft_cost": ("a drafting call costs", "of a verification step", f"draft_cost_tol {tol.draft_cost_tol}"),
            "verify_cost": (
                "a verification step costs",
                "plain steps of the baseline engine",
                f"verify_cost_rtol {tol.verify_cost_rtol}",
            ),
        }
        for metric, ceiling in self.step_cost_bounds(method, stored).items():
            value = record.get(metric)
            if value is None or value <= ceiling + ROUNDING:
                continue
            what, unit, setting = said[metric]
            out.append(
                f"method '{method}', C={concurrency}: step cost: {what} {value:.3f} {unit}, stored "
                f"{stored[metric]:.3f}; ceiling {ceiling:.3f} ({setting})"
            )
        return out

    def _summary(self, method: str, key: Level) -> Judgement:
        """Over the concurrency levels: the geometric mean of the speedups (gated with geomean_rtol on
        the geometric mean of the levels' upper bounds, as each level is gated on its own) and the
        crossover, the lowest level at which speculation is slower than the baseline engine (its
        interval below 1.0): a drop below the stored level fails when the interval there is also below
        1 - speedup_rtol."""
        levels = list(self.ctx.profile.concurrency)
        estimates = [self.store.speedup(method, c).estimate for c in levels]
        summary = stats.geometric_mean_estimate(estimates)
        crossover = stats.crossover(levels, estimates)
        record = {"geomean_speedup": round(summary.value, 6), "top_level": max(levels)}
        if crossover is not None:
            record["crossover_concurrency"] = crossover
        j = Judgement(self.gate, method, key, Verdict.PASS, record=record)
        found = self.ctx.lookup(method, self.gate, key)
        stored = found.values if found else None
        # stored on another machine, or this machine's baseline engine now runs outside machine_rtol of
        # its stored speed at some level: judged coarsely, as the levels are
        coarse = (
            bool(found)
            and not found.this_run
            and (not found.own or any(self._other_machine(c, self.store.baseline_alone(c)) for c in levels))
        )
        rtol_name, rtol = (
            ("coarse_speedup_rtol", self.ctx.profile.tolerance.coarse_speedup_rtol)
            if coarse
            else ("geomean_rtol", self.ctx.profile.tolerance.geomean_rtol)
        )
        j.basis = Basis.COARSE if coarse else Basis.OWN
        floor = stored["geomean_speedup"] * (1 - rtol) if stored and "geomean_speedup" in stored else None
        failures = []
        if floor is not None and stats.fails_floor(summary, floor - ROUNDING):
            failures.append(
                f"method '{method}': the geometric mean of its speedups over C={levels} is {summary.value:.3f} "
                f"(of their upper bounds {summary.high:.3f}), below {floor:.3f} (stored "
                f"{stored['geomean_speedup']:.3f} x (1 - {rtol_name} {rtol}), {found.source})"
            )
        crossover_unit = "" if crossover is not None else f"none up to C={max(levels)}"
        if stored is not None and crossover is not None and not coarse:  # another machine's crossover: shown only
            before = stored.get("crossover_concurrency")
            if before is None or crossover < before:
                was = f"C={before}" if before is not None else f"none up to C={stored.get('top_level', max(levels))}"
                # A method that broke even (ngram at C=16 on cpu-tiny: 1.03 [0.96, 1.04]) dips under 1.0 by
                # session drift alone; the drop counts when it is beyond the level gate's own tolerance.
                at = estimates[levels.index(crossover)]
                level_rtol = self.ctx.profile.tolerance.speedup_rtol
                if stats.fails_floor(at, 1 - level_rtol):
                    failures.append(
                        f"method '{method}': speculation is now slower than the baseline engine from "
                        f"C={crossover} ({at.describe(3)}), stored: {was} ({found.source})"
                    )
                else:
                    crossover_unit = f"was {was}; within speedup_rtol {level_rtol} of break-even: not a failure"
        j.rows = [
            Row(
                "geomean_speedup",
                summary.value,
                stored.get("geomean_speedup") if stored else None,
                floor,
                ci_low=summary.low,
                ci_high=summary.high,
                headline=True,
            ),
            Row(
                "crossover_concurrency",
                crossover,
                stored.get("crossover_concurrency") if stored else None,
                unit=crossover_unit,
                headline=True,
            ),
        ] + self._runner(method)
        return self.ctx.decide(j, stored, [], failures)

    def _runner(self, method: str, concurrency: int | None = None) -> list[Row]:
        """The model runner that measured the row ('v1' / 'v2', when known); a ratio over the baseline
        engine on the other runner says it is not like for like (vLLM picks the runner per engine:
        suffix falls back to V1 where the baseline engine runs V2)."""
        if not (runners := self.ctx.runners(method)):
            return []
        ours, theirs = runners
        unit = (
            ours
            if ours == theirs
            else (
                f"{ours} vs baseline {theirs}: across model runners, not like for like "
                "(vLLM chose the runner per engine)"
            )
        )
        return [Row("runner", None, unit=unit, concurrency=concurrency)]

    def rtol(self, basis: Basis) -> tuple[str, float]:
        tol = self.ctx.profile.tolerance
        return (
            ("coarse_speedup_rtol", tol.coarse_speedup_rtol)
            if basis == Basis.COARSE
            else ("speedup_rtol", tol.speedup_rtol)
        )

    def _rows(
        self,
        method: str,
        values: dict,
        base: dict,
        concurrency: int,
        is_baseline: bool,
        rtol: float = 0.0,
        step_cost: bool = True,
    ) -> list[Row]:
        rows = []
        for metric, value in values.items():
            if value is None or metric in ("trials", "ci_low", "ci_high"):
                continue
            unit = {"tok_s": "tok/s", "_ms": "ms", "usd_per_mtok": "USD / M tokens"}.get(
                next((e for e in ("tok_s", "_ms", "usd_per_mtok") if metric.endswith(e)), ""), ""
            )
            row = dict(baseline=base.get(metric), unit=unit, concurrency=concurrency)
            if step_cost and (ceiling := self.step_cost_bounds(method, base).get(metric)) is not None:
                row.update(bound=ceiling, failing=value > ceiling + ROUNDING)
            if metric == "speedup":
                bound = base["speedup"] * (1 - rtol) if "speedup" in base else None
                row.update(ci_low=values.get("ci_low"), ci_high=values.get("ci_high"), bound=bound, headline=True)
            elif metric == "throughput_tok_s" and is_baseline:
                row.update(headline=True)
            rows.append(Row(metric, value, **row))
        return rows

    def _disturbed(self, result, alone: float) -> str | None:
        """Why this interleaved measurement says nothing, if it does not: the baseline engine's trials
        paired with the method's ran far off its own trials of this run, so the machine changed under
        the measurement (seen on cpu-tiny: 212 tok/s paired with ngram against 382 alone, which
        stored an ngram speedup 30 % above every later run's)."""
        if not result.paired:
            return None
        ratio = result.baseline_throughput / alone
        rtol = self.ctx.profile.tolerance.machine_rtol
        if stats.within_rtol(ratio, rtol):
            return None
        return (
            f"C={result.concurrency}: the baseline engine's trials paired with this method ran at "
            f"{result.baseline_throughput:.1f} tok/s against {alone:.1f} on their own earlier in this run "
            f"({ratio:.2f}x, outside machine_rtol {rtol}): the machine changed under the measurement, so "
            f"the speedup {result.estimate.describe()} is neither judged nor stored. Rerun on a quiet machine"
        )

    def _other_machine(self, concurrency: int, now: float) -> str | None:
        """Why this run's speedup ratios cannot be held against the stored ones, if they cannot.

        A ratio of two throughputs still depends on the machine: on a CPU twice as fast, a fixed
        per-step overhead weighs twice as much against the forward pass (cpu-tiny's speedups moved by
        -22 % to +9 % on a machine whose baseline engine ran 2.2x faster under the same CPU name).
        The baseline engine's own throughput, stored next to the ratios, tells.
        """
        stored = self.ctx.baselines.entry(BASELINE, self.gate, Level(concurrency))
        if not stored or not stored.get("throughput_tok_s"):
            return None
        ratio = now / stored["throughput_tok_s"]
        rtol = self.ctx.profile.tolerance.machine_rtol
        if stats.within_rtol(ratio, rtol):
            return None
        return (
            f"C={concurrency}: the baseline engine runs at {now:.1f} tok/s here against "
            f"{stored['throughput_tok_s']:.1f} stored "
            f"({ratio:.2f}x, outside machine_rtol {rtol}; {self.ctx.baselines.source(BASELINE, self.gate)}), so this "
            f"is not the machine (or the load) the speedups were stored under. Store this machine's with "
            f"`{self.ctx.baselines.update_command}`"
        )
