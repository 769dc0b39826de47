"""Memory per method against the stored ceiling: drafter weights, KV-cache capacity lost, process /
device memory; and measured vs checkpoint-computed drafter weights, which must agree in every run."""

from __future__ import annotations

from dataclasses import dataclass

from specgate.checks import ROUNDING, Basis, Context, Judgement, Row, Verdict
from specgate.checks.drift import DriftCheck
from specgate.figures import memory
from specgate.gates import MEMORY, Key
from specgate.profile import BASELINE


@dataclass(frozen=True)
class Ceiling:
    """`measured <= baseline x (1 + rtol) + slack`; `fails()` is the message when it does not hold."""

    what: str
    measured: float
    baseline: float
    rtol: float
    slack: float
    unit: str
    source: str = ""

    @property
    def ceiling(self) -> float:
        return self.baseline * (1 + self.rtol) + self.slack

    def fails(self) -> str | None:
        if self.measured <= self.ceiling + ROUNDING:
            return None
        return (
            f"{self.what}: measured {self.measured:.4g} {self.unit}, baseline {self.baseline:.4g} {self.unit} "
            f"({self.source}), ceiling {self.ceiling:.4g} {self.unit}"
        )


# quantity in the stored record -> (description, unit, which absolute slack applies)
GATED = {
    "static_mib_measured": ("drafter weights (measured in the engine)", "MiB", "memory"),
    "static_mib_analytic": ("drafter weights (from its checkpoint)", "MiB", "memory"),
    "kv_tokens_lost": ("KV-cache capacity lost to speculation", "tokens", None),
    "process_mib": ("engine processes' peak memory above the baseline engine", "MiB", "process"),
    "device_mib": ("device memory above the baseline engine", "MiB", "memory"),
}


def _slack(tol, which: str | None) -> float:
    return {"memory": tol.memory_slack_mib, "process": tol.process_slack_mib}.get(which, 0.0)


def ceilings(measured: dict, stored: dict | None, tol, source: str = "") -> list[Ceiling]:
    """Ceilings for every gated quantity present in both the measurement and the baseline. Token
    counts get the relative tolerance only; MiB figures also an absolute slack from the profile."""
    if stored is None:
        return []
    return [
        Ceiling(
            what, float(measured[key]), max(float(stored[key]), 0.0), tol.memory_rtol, _slack(tol, slack), unit, source
        )
        for key, (what, unit, slack) in GATED.items()
        if key in measured and key in stored
    ]


def consistency_problem(rec: dict, rtol: float) -> str | None:
    """Measured vs analytic drafter weights disagreeing beyond `rtol`: the engine holds more (or less)
    than the drafter's own checkpoint. It fails the method's memory test in every run, an update run
    too; being no correctness test, it blocks no baselines update of the other figures."""
    measured, analytic = rec.get("static_mib_measured"), rec.get("static_mib_analytic")
    if measured is None or analytic is None or analytic == 0 and measured == 0:
        return None
    if abs(measured - analytic) <= rtol * max(analytic, measured):
        return None
    more = measured > analytic
    why = "a tensor loaded twice, or counted on every tensor-parallel rank" if more else "a tensor it did not load"
    return (
        f"drafter weights measured in the engine ({measured:.3f} MiB) and computed from its checkpoint "
        f"({analytic:.3f} MiB) differ by more than memory_rtol {rtol:.0%}: the engine holds "
        f"{'more' if more else 'less'} than the checkpoint ({why}). Both figures leave out the tensors vLLM takes "
        "from the target; the engine log's weight-loading lines say what it loaded"
    )


class MemoryCheck:
    gate = MEMORY

    def __init__(self, ctx: Context, store, host, root):
        self.ctx, self.store, self.host, self.root = ctx, store, host, root
        self.drift = DriftCheck(ctx)

    def judge(self, method: str, key: Key) -> Judgement:
        j = Judgement(self.gate, method, key, Verdict.PASS)
        if reason := self.host.not_measurable_here(self.gate):
            j.verdict, j.messages = Verdict.SKIP, [reason]
            return j
        tol = self.ctx.profile.tolerance
        if method == BASELINE:  # the baseline engine's own figures: stored for reference, not gated
            j.record = memory.engine_record(self.store.memory_reading(method))
            found = self.ctx.baselines.lookup(method, self.gate, key)
            base = found.values if found else {}
            j.rows = [Row(m, v, base.get(m), headline=True) for m, v in j.record.items()]
            return j
        overhead = self.store.memory_overhead(method, self.root)
        j.record = overhead.record()
        found = self.ctx.lookup(method, self.gate, key)  # another machine's: its portable figures only
        stored = found.values if found else None
        j.basis = Basis.PORTABLE if found and not found.own else Basis.OWN
        problems = [f"method '{method}': {msg}"] if (msg := consistency_problem(j.record, tol.memory_rtol)) else []
        checks = ceilings(j.record, stored, tol, found.source if found else "")
        failures = [f"method '{method}', memory: {msg}" for c in checks if (msg := c.fails())]
        reading = self.store.memory_reading(method)
        j.rows = self._rows(j.record, stored or {}, reading.device_source)
        j.rows += [Row(name, None, unit=f"not measured: {why}") for name, why in self._not_measured(overhead, reading)]
        drift_rows, drifted = self.drift.judge(method, self.gate, key, j.record)
        j.rows += drift_rows
        return self.ctx.decide(j, stored, problems + drifted, failures)

    def _not_measured(self, overhead, reading) -> list[tuple[str, str]]:
        """Figures this run could not take, and why: shown as such, never silently absent."""
        out = []
        if overhead.static_bytes_analytic is None:
            out.append(
                (
                    "static_mib_analytic",
                    "the drafter's checkpoint is not on this disk (not in the Hugging Face "
                    "cache), or holds no weight file vLLM would load that could be read",
                )
            )
        if overhead.static_bytes_measured is None:
            out.append(
                (
                    "static_mib_measured",
                    reading.drafter_not_measured or "this vLLM's model runner offers no drafter module to count",
                )
            )
        return out

    def _rows(self, values: dict, base: dict, device_source: str = "") -> list[Row]:
        tol = self.ctx.profile.tolerance
        rows = []
        for metric, value in values.items():
            if metric not in GATED:
                rows.append(Row(metric, value, base.get(metric)))
                continue
            _, unit, slack = GATED[metric]
            if metric == "device_mib" and device_source == "device":
                unit = "MiB (device-wide: NVML saw none of the engine's PIDs)"
            bound = (
                max(float(base[metric]), 0.0) * (1 + tol.memory_rtol) + _slack(tol, slack) if metric in base else None
            )
            rows.append(Row(metric, value, base.get(metric), bound, unit=unit, headline=True))
        return rows
