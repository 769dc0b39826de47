"""Acceptance per (method, prompt category): mean acceptance length and per-position rates against
the stored baseline, and the profile's absolute floors; beside them how often the method drafted
(checks.drafting: the share of decode steps that drafted, draft tokens per output token)."""

from __future__ import annotations

from dataclasses import dataclass

from specgate import vllm_compat
from specgate.checks import ROUNDING, Basis, Context, Judgement, Row, Verdict, drafting
from specgate.checks import distribution as per_request
from specgate.checks.drift import DriftCheck
from specgate.errors import NotMeasurable
from specgate.figures.acceptance import AcceptanceResult
from specgate.gates import ACCEPTANCE, Category


@dataclass(frozen=True)
class Floor:
    """One threshold: `fails()` is None when the measurement holds, else the failure message."""

    what: str
    measured: float | None
    floor: float
    baseline: float | None = None
    source: str = ""  # where the baseline came from

    def fails(self) -> str | None:
        if self.measured is not None and self.measured >= self.floor - ROUNDING:
            return None
        measured = "none (no drafts were proposed)" if self.measured is None else f"{self.measured:.4g}"
        base = f"baseline {self.baseline:.4g} ({self.source}), " if self.baseline is not None else ""
        return f"{self.what}: measured {measured}, {base}floor {self.floor:.4g}"


def acceptance_floors(
    result: AcceptanceResult,
    stored: dict | None,
    acceptance_rtol: float,
    position_rtol: float,
    floors: dict[str, float],
    source: str = "",
) -> list[Floor]:
    """Floors of one (method, category): from its stored baseline and from the profile's absolute floors."""
    c = result.counters
    checks = []
    if stored is not None and "mean_acceptance_length" in stored:
        base = float(stored["mean_acceptance_length"])
        checks.append(
            Floor("mean acceptance length", c.mean_acceptance_length, base * (1 - acceptance_rtol), base, source)
        )
        measured_rates = c.per_position_rates
        for i, base_rate in enumerate(stored.get("per_position", [])):
            rate = measured_rates[i] if i < len(measured_rates) else None
            checks.append(
                Floor(f"acceptance rate at position {i + 1}", rate, base_rate * (1 - position_rtol), base_rate, source)
            )
    if "acceptance_rate" in floors:
        checks.append(Floor("acceptance rate (profile floor)", c.acceptance_rate, floors["acceptance_rate"]))
    if "mean_acceptance_length" in floors:
        checks.append(
            Floor("mean acceptance length (profile floor)", c.mean_acceptance_length, floors["mean_acceptance_length"])
        )
    return checks


class AcceptanceCheck:
    gate = ACCEPTANCE

    def __init__(self, ctx: Context, store):
        self.ctx, self.store = ctx, store
        self.drift = DriftCheck(ctx)

    def judge(self, method: str, key: Category) -> Judgement:
        ctx, tol = self.ctx, self.ctx.tolerance(method, self.gate)
        category, temperature = key.category, key.temperature
        if temperature and (broken := vllm_compat.sampled_verification_broken()):
            raise NotMeasurable(f"method '{method}', category '{category}' at temperature {temperature:g}: {broken}")
        result = self.store.acceptance(method, category, temperature)
        ref = ctx.reference(method, self.gate)
        found = ctx.lookup(method, self.gate, key)  # portable: another machine's serves too
        stored, source = (found.values, found.source) if found else (None, "")
        floors = ctx.method(method).floors
        j = Judgement(
            self.gate,
            method,
            key,
            Verdict.PASS,
            record=result.record(),
            basis=Basis.PORTABLE if found and not found.own else Basis.OWN,
        )

        def failed(checks: list[Floor]) -> list[str]:
            return [f"method '{method}', category '{key}': {msg}" for c in checks if (msg := c.fails())]

        against_baseline = failed(acceptance_floors(result, stored, tol.acceptance_rtol, tol.position_rtol, {}, source))
        schedule = (ctx.method(method).speculative_config or {}).get(drafting.SCHEDULE)
        prompts = len(self.store.category_runs(method, temperature)[category].outputs)
        against_baseline += failed(drafting.bounds(result.drafting, stored, tol.draft_rtol, schedule, source, prompts))
        against_floors = [] if ref != method else failed(acceptance_floors(result, None, 0.0, 0.0, floors))
        drift_rows, drifted = self.drift.judge(method, self.gate, key, j.record)
        outputs = self.store.category_runs(method, temperature)[category].outputs

        def text(pid: str, start: int, end: int) -> str:
            return "".join(self.store.inputs.decode(t) for t in outputs[pid].token_ids[start:end])

        where = f"method '{method}', category '{key}'"
        request_rows, by_request = per_request.judge(where, result, stored, tol, text)
        drafted = drafting.rows(j.record, stored, tol.draft_rtol, schedule)
        j.rows = self._rows(tol, j.record, stored or {}, floors) + drafted + request_rows + drift_rows
        return ctx.decide(j, stored, against_floors + drifted, against_baseline + by_request)

    def _rows(self, tol, values: dict, base: dict, floors: dict[str, float]) -> list[Row]:
        rows = []
        for metric, rtol in (("mean_acceptance_length", tol.acceptance_rtol), ("acceptance_rate", None)):
            if metric in values:
                b = base.get(metric)
                bound = b * (1 - rtol) if (b is not None and rtol is not None) else floors.get(metric)
                rows.append(Row(metric, values[metric], b, bound, headline=True))
        base_pos = base.get("per_position", [])
        for i, rate in enumerate(values.get("per_position", []), start=1):
            b = base_pos[i - 1] if i - 1 < len(base_pos) else None
            bound = None if b is None else b * (1 - tol.position_rtol)
            rows.append(Row("position_rate", rate, b, bound, position=i, failing=bound is not None and rate < bound))
        return rows
