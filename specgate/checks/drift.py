"""Drift: each portable figure held to the best value the profile's baseline history ever stored.

The gates compare a run with the latest stored baseline, and every intended upgrade rewrites it, so a
figure that loses 4 % per vLLM release passes every gate and is down 15 % after four. The baseline
files' git history still holds every stored value with the vLLM that measured it: here a portable
figure (acceptance per category, drafter weights, KV-cache tokens lost) must also stay within
`drift_rtol` of the best value any committed update stored for the same inputs (history.History:
same models, prompts and method settings; a retrained drafter starts a new series). Past it: a
failure naming the best update, the first update where the figure dropped and the vLLM releases in
between (`drift = "warn"`: a warning). `drift_since = "YYYY-MM-DD"` forgets the updates before a
date: how a team accepts a drop it has decided to live with. Without git history (no git, a shallow
clone, baselines outside git) nothing is judged and the summary says so once.
"""

from __future__ import annotations

import warnings

from specgate.checks import ROUNDING, Row
from specgate.gates import ACCEPTANCE, MEMORY

# (gate, metric) -> (description, higher is better, which absolute slack applies)
DRIFTING = {
    (ACCEPTANCE, "mean_acceptance_length"): ("mean acceptance length", True, None),
    (MEMORY, "static_mib_measured"): ("drafter weights (MiB)", False, "memory"),
    (MEMORY, "kv_tokens_lost"): ("KV-cache tokens lost", False, None),
}


class DriftWarning(UserWarning):
    """A portable figure drifted past drift_rtol from its best stored value, under `drift = "warn"`."""


class DriftCheck:
    """Used by the acceptance and memory checks: rows and messages for one judgement's figures."""

    def __init__(self, ctx):
        self.ctx = ctx

    @property
    def enabled(self) -> bool:
        return self.ctx.profile.tolerance.drift_rtol > 0

    def judge(self, method: str, gate: str, key: str, measured: dict) -> tuple[list[Row], list[str]]:
        """(rows, failures) for the drifting figures of (method, gate, key); under drift = "warn" the
        failures are issued as DriftWarning and not returned."""
        if not self.enabled or self.ctx.reference(method, gate) != method:  # a canary is meant to be worse
            return [], []
        history = self.ctx.history()
        if not history.usable:
            return [], []
        points = self._points(history, method)
        rows, failures = [], []
        for (g, metric), (what, higher, slack) in DRIFTING.items():
            if g != gate or not isinstance(measured.get(metric), (int, float)):
                continue
            if gate == MEMORY and metric in self.ctx.baselines.machine_figures:  # this machine's alone: its identity
                here = (self.ctx.baselines.hardware, self.ctx.baselines.identity)
                series = [(p, p.figure(gate, key, metric)) for p in points if (p.hardware, p.identity) == here]
            else:
                series = [(p, p.figure(gate, key, metric)) for p in points]
            series = [(p, v) for p, v in series if v is not None]
            if not series:
                continue
            value = float(measured[metric])
            best, bound, failure = self._judge(method, gate, key, what, value, series, higher, slack)
            rows.append(Row(f"drift_{metric}", value, best, bound, failing=failure is not None))
            if failure:
                failures.append(failure)
        if failures and self.ctx.profile.drift == "warn":
            for message in failures:
                warnings.warn(DriftWarning(message), stacklevel=2)
            return rows, []
        return rows, failures

    def _points(self, history, method: str):
        since = self.ctx.profile.drift_since
        return [
            p for p in history.comparable(method, self.ctx.profile.path) if not since or p.update.date[:10] >= since
        ]

    def _judge(self, method, gate, key, what, measured, series, higher, slack) -> tuple[float, float, str | None]:
        """(best, bound, failure message or None) of one figure against its history (oldest first)."""
        tol = self.ctx.profile.tolerance
        at = max(range(len(series)), key=lambda i: (series[i][1] if higher else -series[i][1], -i))  # the earliest best
        best_point, best = series[at]
        extra = {"memory": tol.memory_slack_mib}.get(slack, 0.0)
        bound = best * (1 - tol.drift_rtol) if higher else max(best, 0.0) * (1 + tol.drift_rtol) + extra
        if (measured >= bound - ROUNDING) if higher else (measured <= bound + ROUNDING):
            return best, bound, None
        after = series[at + 1 :]
        first = next(((p, v) for p, v in after if (v < best - ROUNDING if higher else v > best + ROUNDING)), None)
        releases = list(
            dict.fromkeys([best_point.vllm_of(gate)] + [p.vllm_of(gate) for p, _ in after] + [_running_vllm()])
        )
        dropped = (
            f"It first dropped at {first[0].describe(gate)}: {best:.4g} -> {first[1]:.4g}"
            if first
            else f"Every later update stored {best:.4g}: it dropped in this run"
        )
        change = f"{(measured - best) / abs(best):+.1%}" if best else f"{measured - best:+.4g}"
        return (
            best,
            bound,
            (
                f"method '{method}', {key}: {what} {measured:.4g} is {change} from the best the baseline history "
                f"stored, {best:.4g} at {best_point.describe(gate)}; drift_rtol {tol.drift_rtol} allows "
                f"{'down to' if higher else 'up to'} {bound:.4g}. {dropped}; vLLM since the best: "
                f"{' -> '.join(releases)} "
                f'(this run). Find the release with `specgate bisect`; accept the drop with drift_since = "YYYY-MM-DD" '
                f"in {self.ctx.profile.path.name}"
            ),
        )


def _running_vllm() -> str:
    from specgate import machine

    return str(machine.module_version("vllm"))
