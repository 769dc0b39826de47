"""One gate run: a thin facade over the parts that do the work.

    RunPlan             what the run will do, known before collection (profile, methods, flags)
    Selection           what the collected tests ask for (gates, concurrency levels)
    GateSession         built once both are known; composes
        host.EngineHost                 boot / keep / stop engines (or endpoint clients)
        measurements.MeasurementStore   every measurement, once per method
        baseline_store.BaselineStore    the stored file, missing entries, the locked write
        history.History                 the git history of the baseline files, read once (the drift check's)
        checks.*                        one check per gate: measure -> compare -> Judgement
        scenarios.ScenarioRuns          the scenarios' measurements (preemption, prefix soak, structured)
    results.summary_lines(session)      the terminal summary

No pytest in here; plugin.py adapts it, and tests drive it directly with specgate.testing.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from specgate.backend import BootEngine
from specgate.checks import Basis, Context, Judgement, Verdict
from specgate.checks.drift import DRIFTING
from specgate.checks.registry import Parts, build_checks
from specgate.engines.host import EngineHost
from specgate.errors import SpecgateError
from specgate.gates import EDGES, GATES, LOAD, REQUESTS, SPEEDUP, Gate, gate_named
from specgate.machine import Identity
from specgate.profile import BASELINE, Method, Profile
from specgate.prompts.inputs import PromptInputs
from specgate.run.measurements import MeasurementStore
from specgate.run.scenarios import ScenarioRuns
from specgate.settings import NAMES, Spelling
from specgate.store.baseline_store import BaselineStore
from specgate.store.baselines import describe_move
from specgate.store.history import History, read
from specgate.store.revisions import models_of, resolved, unpinned_line


@dataclass
class RunPlan:
    profile: Profile
    methods: list[Method]
    root: Path
    out_dir: Path
    update_baselines: bool = False
    strict: bool = False
    endpoints: dict[str, str] | None = None  # servers instead of booted engines
    log_dir: Path | None = None  # engine logs (default: <out_dir>/engines)
    hardware: str | None = None  # the baseline file's key (default: detected, e.g. cpu-amd-epyc-2c)
    identity: Identity | None = None  # what measures (default: detected): names the file under the key
    say: Spelling = NAMES  # how the run's user spells these settings (specgate.settings): the caller's
    inputs: PromptInputs = field(init=False)

    def __post_init__(self) -> None:
        self.root, self.out_dir = Path(self.root), Path(self.out_dir)
        self.log_dir = Path(self.log_dir or self.out_dir / "engines")
        self.inputs = PromptInputs(self.profile, self.root)

    @property
    def method_order(self) -> list[str]:
        return [BASELINE, *(m.name for m in self.methods)]

    def runs_here(self, gate: Gate, method: str) -> bool:
        """Whether the run has this gate test. A canary (a deliberately worse configuration) runs the gates it
        is a canary for, its absolute floors' acceptance, and equivalence and lifecycle as every engine does:
        its other gates would judge a configuration nobody serves (the registry's `Gate.canary`). A scenario
        runs where the profile has its `[scenarios.<gate>]` table, for the methods (the baseline engine too
        where its outputs are the reference: `Gate.reference`). The load gate runs wherever the speedup
        trials run: it judges their outputs and acceptance."""
        spec = self.profile.methods.get(method)
        if gate == LOAD:
            return self.runs_here(SPEEDUP, method)
        if gate.scenario:
            if gate not in self.profile.scenarios.enabled:
                return False
            return gate.reference if method == BASELINE else not spec.canary_of
        if spec is None or not spec.canary_of:
            return True
        return (
            "always" in gate.canary
            or ("mimic" in gate.canary and gate in spec.canary_of)
            or ("floors" in gate.canary and bool(spec.floors))
        )


@dataclass(frozen=True)
class Selection:
    gates: frozenset[Gate] = frozenset(GATES)
    levels: tuple[int, ...] = ()  # concurrency levels the speedup and load tests ask for


def _entry(gate: Gate | str) -> Gate:
    if (entry := gate_named(gate)) is None:
        raise ValueError(f"no gate named {gate!r}: the gates are {', '.join(GATES)} (specgate.gates)")
    return entry


class GateSession:
    def __init__(self, plan: RunPlan, selection: Selection = Selection(), boot: BootEngine | None = None):
        if boot is None:
            from specgate.engines.engine import boot_engine as boot
        self.plan, self.profile, self.selection = plan, plan.profile, selection
        interleave = plan.profile.speedup.interleave_baseline and SPEEDUP in selection.gates
        self.host = EngineHost(
            plan.profile, plan.methods, plan.root, plan.log_dir, boot, plan.endpoints, interleave, say=plan.say
        )
        self.store = MeasurementStore(plan.profile, self.host, plan.inputs, selection.gates, selection.levels)
        self.baselines = BaselineStore(plan.root, plan.profile, plan.hardware, say=plan.say, identity=plan.identity)
        self._history: History | None = None
        self._models: dict[str, dict[str, dict]] = {}
        ctx = Context(
            plan.profile,
            self.baselines,
            plan.strict,
            plan.update_baselines,
            runner_of=lambda name: self.host.records[name].runner,
            speed_unjudged=self.host.speed_unjudged,
            release_of=self.host.release_of,
            measured_now=self._measured_now,
            history=self.history,
            say=plan.say,
        )
        self.scenarios = ScenarioRuns(self.store)
        self.checks = build_checks(Parts(ctx, self.store, self.scenarios, self.host, plan.inputs, plan.root))
        # the baseline engine's side of every request, before a method's engine takes its place
        if REQUESTS in selection.gates and REQUESTS in plan.profile.scenarios.enabled:
            self.store.before_methods.append(lambda: self.scenarios.requests(BASELINE))
        if EDGES in selection.gates and EDGES in plan.profile.scenarios.enabled:
            self.store.before_methods.append(lambda: self.scenarios.edges(BASELINE))
        self.judgements: dict[tuple[str, str, str], Judgement] = {}
        self.spent: dict[str, float] = {}  # where the run's time went: boots, each gate, scenarios, canaries
        self.started, self.started_wall = time.monotonic(), time.time()
        self.interrupted = ""  # "interrupted at <test> (SIGTERM)" when the run was stopped

    def history(self) -> History:
        """The git history of this profile's baseline files (every machine's), read once, on first use."""
        if self._history is None:
            self._history = read(self.plan.root, self.baselines.name)
        return self._history

    def header(self) -> list[str]:
        """What the summary says once about the stored baselines: first the models that changed since the
        baselines (so that a moved figure reads as the weights before it reads as vLLM) and the hub models
        not pinned to a commit, then the store's notes (baselines set aside, other machines' files used)
        and, when the run judges drift, why it could not."""
        lines = self.model_lines()
        if self.plan.endpoints is None and (unpinned := unpinned_line(self.profile, self.plan.methods, self.plan.say)):
            lines.append(unpinned)
        lines += self.baselines.header()
        drift_rtol = self.profile.tolerance.drift_rtol
        if (
            drift_rtol
            and {gate for gate, _ in DRIFTING} & self.selection.gates
            and not (history := self.history()).usable
        ):
            lines.append(f"drift (tolerance.drift_rtol {drift_rtol}) not judged: {history.problem}")
        return lines

    def models(self, method: str) -> dict[str, dict]:
        """role -> {"ref", "revision"} of the models `method`'s engine loads (specgate.store.revisions), resolved once
        per run (again while a hub model is not in the cache yet: vLLM fetches it at the boot); {} for
        endpoints, whose servers load what they were started with."""
        if self.plan.endpoints is not None:
            return {}
        if method not in self._models:
            spec = self.profile.baseline if method == BASELINE else self.profile.methods[method]
            with self._timed("models"):  # the zoo's content hashes: ~25 ms for cpu-tiny's 8 models, once a run
                found = resolved(models_of(self.profile, spec), self.plan.root)
            if all(m["revision"] for m in found.values()):
                self._models[method] = found
            return found
        return self._models[method]

    def models_record(self, methods) -> dict[str, dict[str, dict]]:
        """What a baseline file records of the models, for each of these methods."""
        return {m: found for m in methods if (found := self.models(m))}

    def model_lines(self) -> list[str]:
        """One line per model that is not the one the baselines were measured with, a target shared by
        several methods once."""
        moved: dict[str, tuple[str, dict, dict, str, list[str]]] = {}
        for method in self.plan.method_order:
            for role, a, b, note in self.baselines.models_moved(method, self.models(method)):
                key = repr((role, sorted(a.items()), sorted(b.items()), note))
                moved.setdefault(key, (role, a, b, note, []))[4].append(method)
        return [
            describe_move(f"{methods[0]}'s" if len(methods) == 1 else "the", role, a, b)
            + (f" (for {', '.join(methods)})" if len(methods) > 1 else "")
            + f" since the baselines{note}: figures that moved may have moved with the weights, not with vLLM"
            for role, a, b, note, methods in moved.values()
        ]

    def _measured_now(self, method: str, gate: str, key: str) -> dict | None:
        judgement = self.judgements.get((method, gate, key))
        return judgement.record if judgement is not None else None

    def boot(self, method: str, gate: Gate | str | None = None) -> None:
        """Bring up `method`'s engine now (a boot failure raises EngineBootError). The baseline engine
        measured before a method booted (an xdist worker) is not booted a second time; a gate that
        boots an engine of its own (the preemption scenario) does not boot the method's, and one that judges
        what the engine produced (the load gate) does not ask again for an engine that stopped: its check judges
        what it streamed before it stopped."""
        gate = _entry(gate) if gate is not None else None
        if gate is not None and (gate.own_engine or (gate.after_stop and self.host.stopped(method))):
            return
        if not (method == BASELINE and self.store.reference_ready):
            with self._timed("boots" if not self.host.alive(method) else self._bucket(gate, method)):
                self.store.engine(method)

    def _bucket(self, gate: Gate | None, method: str) -> str:
        """Where a test's time is counted: its gate, 'canaries' for a canary's, 'scenario: <name>'."""
        if method != BASELINE and self.profile.methods[method].canary_of:
            return "canaries"
        return f"scenario: {gate}" if gate is not None and gate.scenario else str(gate or "")

    @contextlib.contextmanager
    def _timed(self, bucket: str):
        started = time.monotonic()
        try:
            yield
        finally:
            self.spent[bucket] = self.spent.get(bucket, 0.0) + time.monotonic() - started

    def judge(self, gate: Gate | str, method: str, param=None, **options) -> Judgement:
        """Run `gate`'s check (the registry's entry, or its name) for (method, test parameter); the judgement is
        kept for the results. `options` go to the check's `judge` as they are (one it does not take is a
        TypeError)."""
        gate = _entry(gate)
        with self._timed(self._bucket(gate, method)):
            judgement = self.checks[gate].judge(method, gate.key(param, baseline=method == BASELINE), **options)
        if judgement.verdict is Verdict.FAIL and (
            moved := self.baselines.models_moved(method, self.models(method), gate)
        ):
            judgement.messages.insert(
                0,
                "the models changed since this figure's baseline was stored: "
                + "; ".join(describe_move(f"{method}'s", role, a, b) for role, a, b, _ in moved)
                + ": read what follows as the weights' doing before vLLM's",
            )
        self.judgements[(method, gate, judgement.key)] = judgement
        return judgement

    @property
    def measured(self) -> dict[str, dict[str, dict[str, dict]]]:
        """What a run that updates the baselines stores: method -> gate -> key -> values."""
        out: dict = {}
        for (method, gate, key), j in self.judgements.items():
            if j.record is not None:
                out.setdefault(method, {}).setdefault(gate, {})[key] = j.record
        return out

    @property
    def baseline_released_last(self) -> bool:
        """With interleaved speedup trials the baseline engine lives until every method has run."""
        return self.host.keep_reference

    def release_all(self) -> None:
        self.host.release_all()

    def write_baselines(self, correctness_failures=()) -> str:
        """The baselines update: store this run's measurements and say what moved (the old -> new table), or
        why nothing was written. Refused when a correctness test failed in this run (`correctness_failures`:
        a build that changes outputs must not become the reference); a corrupt stored file is said, even
        when nothing was measured, and never overwritten."""
        update = self.plan.say("update_baselines")
        if correctness_failures:
            return (
                f"{update}: refusing to write baselines: {len(correctness_failures)} correctness test(s) "
                f"failed in this run ({', '.join(correctness_failures[:3])}); a build that changes outputs must not "
                "become the new reference. Fix them and rerun."
            )
        try:
            self.baselines.file()  # a corrupt file is said even when nothing was measured
            if not self.measured:
                return f"{update}: nothing was measured in this run; no baseline written."
            return self._store()
        except SpecgateError as exc:
            return f"{update}: not written: {exc}"

    def _store(self) -> str:
        """The write: speed figures not at all when the machine was disturbed at any level (a busy machine
        stores a wrong machine stamp with them)."""
        measured, note = self.measured, ""
        if disturbed := sorted({k for (_, g, k), j in self.judgements.items() if j.basis == Basis.DISTURBED}):
            measured = {
                m: rest for m, kinds in measured.items() if (rest := {g: v for g, v in kinds.items() if g != SPEEDUP})
            }
            note = (
                f"\nspeed figures not stored, at any level: the machine was disturbed during this run's speedup "
                f"trials at {', '.join(disturbed)}; acceptance and memory were. Rerun the update on a quiet machine."
            )
        return self.baselines.write(measured, set(self.plan.method_order), self.models_record(measured)) + note

    def summary_lines(self, outcomes=()) -> list[str]:
        from specgate.run.results import summary_lines

        return summary_lines(self, outcomes)
