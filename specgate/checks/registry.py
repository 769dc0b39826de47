"""Each gate's check, filed under its registry entry (specgate.gates): the one place that says which
check judges a gate and what it is built from.

    Parts           what the checks are built from: the context, the measurement store, the scenario runs,
                    the engine host, the prompt inputs, the project root (the session builds it)
    CHECKS          gate -> how its check is built from the parts
    build_checks    every gate's check, each one's `gate` checked against the entry it is filed under
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.checks import Check, Context
from specgate.checks.acceptance import AcceptanceCheck
from specgate.checks.edges import EdgesCheck
from specgate.checks.equivalence import EquivalenceCheck
from specgate.checks.lifecycle import LifecycleCheck
from specgate.checks.load import LoadCheck
from specgate.checks.memory import MemoryCheck
from specgate.checks.requests import RequestsCheck
from specgate.checks.scenarios import PreemptionCheck, PrefixSoakCheck, StructuredCheck
from specgate.checks.speedup import SpeedupCheck
from specgate.gates import GATES, Gate


@dataclass(frozen=True)
class Parts:
    ctx: Context
    store: Any  # run.measurements.MeasurementStore: every measurement, once per method
    scenarios: Any  # run.scenarios.ScenarioRuns: the scenarios' measurements
    host: Any  # engines.host.EngineHost: the engines' lives
    inputs: Any  # prompts.inputs.PromptInputs
    root: Path


CHECKS: dict[str, Callable[[Parts], Check]] = {
    EquivalenceCheck.gate: lambda p: EquivalenceCheck(p.ctx, p.store, p.inputs),
    AcceptanceCheck.gate: lambda p: AcceptanceCheck(p.ctx, p.store),
    SpeedupCheck.gate: lambda p: SpeedupCheck(p.ctx, p.store),
    LoadCheck.gate: lambda p: LoadCheck(p.ctx, p.store),
    MemoryCheck.gate: lambda p: MemoryCheck(p.ctx, p.store, p.host, p.root),
    LifecycleCheck.gate: lambda p: LifecycleCheck(p.host),
    StructuredCheck.gate: lambda p: StructuredCheck(p.ctx, p.scenarios),
    PrefixSoakCheck.gate: lambda p: PrefixSoakCheck(p.ctx, p.scenarios, p.store, p.inputs),
    PreemptionCheck.gate: lambda p: PreemptionCheck(p.ctx, p.store, p.scenarios, p.inputs),
    RequestsCheck.gate: lambda p: RequestsCheck(p.ctx, p.scenarios, p.store),
    EdgesCheck.gate: lambda p: EdgesCheck(p.ctx, p.scenarios),
}
if set(CHECKS) != set(GATES):  # a gate without a check, or a check of no gate: the registry is the list
    raise ImportError(f"specgate.checks.registry: checks {sorted(CHECKS)} do not match the gates {sorted(GATES)}")


def build_checks(parts: Parts) -> dict[Gate, Check]:
    """gate -> its check, in the registry's order."""
    return {gate: CHECKS[gate](parts) for gate in GATES}
