"""One run's view of its stored baselines (baselines.py is the file format): which file this machine's
run reads (its hardware name and identity's), the profile's other machines' files for portable figures
(another identity under the same name is another machine, and so is a file that recorded none), the
message for a missing entry, the old -> new line when the stored figures came from another vLLM, and the
locked, merging, atomic write with its machine-stamp policy (speedups of another machine are not mixed
into this one's file).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate import machine
from specgate.errors import BaselineError
from specgate.figures.stats import within_rtol
from specgate.gates import MEMORY, SPEEDUP
from specgate.machine import Identity, detect_device, hardware_key, provenance, this_identity
from specgate.profile import BASELINE
from specgate.settings import NAMES, Spelling
from specgate.store.baselines import (
    BaselineFile,
    baseline_path,
    diff,
    format_diff,
    group_of,
    kept_aside,
    load,
    measured_by,
    merge,
    model_moves,
    provenance_of,
    write_atomic,
)

# Figures that belong to the machine, not to the model + vLLM: judged only against this machine's own
# file (speedups coarsely against another's). Everything else is portable: greedy float32 acceptance,
# drafter weights and KV tokens lost came out identical on an AMD and an Intel machine and on vLLM
# 0.31.0 and 0.32.0 (cpu-tiny). On GPUs the KV budget is a share of the device's memory, so KV
# figures are the machine's there.
MACHINE_FIGURES = {"process_mib", "device_mib", "peak_process_mib"}
DEVICE_KV_FIGURES = {"kv_tokens_lost", "kv_capacity_tokens"}


@dataclass(frozen=True)
class Stored:
    """A stored entry and where it came from."""

    values: dict[str, Any]
    source: str  # 'vLLM 0.32.0, 2026-11-25, rev abc' (+ the machine, when not this one's file)
    hardware: str
    own: bool  # from this machine's own file
    this_run: bool = False  # not stored at all: a canary's parent as measured in this same run


class BaselineStore:
    """This run's stored baselines: which file, its entries (read once; BaselineError when the file
    is bad), the profile's other machines' files for portable figures, the message for a missing
    entry, and the locked, merging, atomic write with its machine-stamp policy."""

    def __init__(
        self, root: Path, profile, hardware: str | None = None, say: Spelling = NAMES, identity: Identity | None = None
    ):
        self.root, self.profile = Path(root), profile
        self.say = say  # how the run's user spells its settings (specgate.settings)
        self.hardware = hardware or hardware_key(*detect_device(profile.hardware))
        self.identity = identity or this_identity(profile.hardware)  # what measures here, beyond the name
        self.name = profile.baselines_name  # the profile's name, or name@dtype when the run sets the dtype
        self.path = baseline_path(self.root, self.name, self.hardware, self.identity)
        self._file: BaselineFile | None = None
        self._others: list[BaselineFile] | None = None
        self.borrowed: dict[str, set[str]] = {}  # gate -> files of other machines used for this run

    @property
    def update_command(self) -> str:
        """The command that stores this run's kind of figures."""
        dtype = self.profile.dtype if self.name != self.profile.name else None
        return self.say.command(profile=self.profile.name, dtype=dtype, update_baselines=True)

    def file(self) -> BaselineFile:
        if self._file is None:
            self._file = load(self.path, self.name, self.hardware, self.say, self.identity)
        return self._file

    def others(self) -> list[BaselineFile]:
        """The profile's baseline files of other machines: other names, other identities under this name, and
        files that recorded no identity (a bad one is a BaselineError naming it)."""
        if self._others is None:
            self._others = []
            for path in sorted(self.path.parent.glob("*.json")):
                if path == self.path:
                    continue
                try:
                    hardware = json.loads(path.read_text(encoding="utf-8")).get("hardware")
                except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
                    hardware = None
                self._others.append(load(path, self.name, str(hardware), self.say))
        return self._others

    def entry(self, method: str, kind: str, key: str) -> dict[str, Any] | None:
        return self.file().entry(method, kind, key)

    def source(self, method: str, kind: str | None = None) -> str:
        return self.file().source(method, kind)

    def models_moved(self, method: str, now: dict[str, dict], kind: str | None = None) -> list[tuple]:
        """(role, stored, now, note) for each model `method`'s engine loads now (`now`: role -> {"ref",
        "revision"}) that is not the one its stored figures were measured with: those of `kind` (None: any
        of its figures; `note` then names the groups of figures concerned when not all). This machine's
        file, else the newest other machine's that has the method; nothing where no models were recorded."""
        found = [(self.file(), self.file().methods.get(method))] + [(f, f.methods.get(method)) for f in self.others()]
        file, entry = next(((f, e) for f, e in found if e), (None, None))
        if not entry:
            return []
        kinds = [kind] if kind else [k for k in entry if k != "provenance"]
        moves: dict[str, tuple[dict, dict, list[str]]] = {}
        for k in kinds:
            for role, a, b in model_moves(file.models(method, k), now):
                at = moves.setdefault(json.dumps([role, a, b], sort_keys=True), (a, b, []))
                if group_of(k) not in at[2]:
                    at[2].append(group_of(k))
        groups = {group_of(k) for k in kinds}
        return [
            (json.loads(key)[0], a, b, f" ({', '.join(these)} figures)" if set(these) != groups else "")
            for key, (a, b, these) in moves.items()
        ]

    def lookup(self, method: str, kind: str, key: str) -> Stored | None:
        """This machine's entry; else another machine's (this hardware name's first, then the newest), with
        its machine figures left out (speedups whole: the speedup check judges them coarsely)."""
        own = self.file().entry(method, kind, key)
        if own is not None:
            return Stored(own, self.file().source(method, kind), self.hardware, True)
        found = [
            ((f.hardware == self.hardware, str(provenance_of(f.methods[method], kind).get("date", ""))), f)
            for f in self.others()
            if f.entry(method, kind, key) is not None
        ]
        if not found:
            return None
        _, other = max(found, key=lambda x: x[0])
        values = other.entry(method, kind, key)
        if kind != SPEEDUP:
            values = {k: v for k, v in values.items() if k not in self.machine_figures}
        self.borrowed.setdefault(kind, set()).add(other.path.name)
        source = f"{other.source(method, kind)}, stored on {other.machine} ({other.path.name})"
        return Stored(values, source, other.hardware, False)

    @property
    def machine_figures(self) -> set[str]:
        return MACHINE_FIGURES | (DEVICE_KV_FIGURES if self.profile.hardware == "cuda" else set())

    def header(self) -> list[str]:
        """What the summary says once: baselines an interrupted calibration left aside; in one line, the
        figures this run held to another machine's files, that machine and this one."""
        lines = []
        if kept := kept_aside(self.root, self.name):
            lines.append(
                f"{kept} holds baselines an interrupted calibration moved aside: this run judged "
                f"{self.path.parent} without them; `specgate calibrate --profile {self.profile.name}` puts them "
                "back where nothing took their place"
            )
        if self.borrowed:
            lines.append(self.borrowed_line())
        return lines

    def borrowed_line(self) -> str:
        """'speed judged coarsely (...), ... held to another machine's baselines: FILE, stored on THAT
        MACHINE; this is THIS MACHINE, without baselines of its own: `update` stores them'."""
        names = set().union(*self.borrowed.values())
        files = [f for f in self.others() if f.path.name in names]
        bound_here = [k for k in (SPEEDUP, MEMORY) if k in self.borrowed or not self.file().methods]
        kv = ", KV tokens lost" if self.profile.hardware != "cuda" else ""
        what = f"portable figures (acceptance, drafter weights{kv})"
        if bound_here:
            what = (
                f"speed judged coarsely (coarse_speedup_rtol {self.profile.tolerance.coarse_speedup_rtol}), step cost "
                f"and process memory not judged, {what}"
            )
        stored = "; ".join(
            f"{f.path.name}, stored on "
            + (f.identity.describe() if f.identity else f"{f.hardware}, identity not recorded")
            for f in files
        )
        known = [f.identity for f in files if f.identity]
        this = self.identity.against(known[0]) if len(known) == 1 and len(files) == 1 else self.identity.describe()
        own = "without baselines of its own" if not self.file().methods else f"without some of them in {self.path.name}"
        return (
            f"{what} held to another machine's baselines: {stored}; this is {this}, machine {self.identity.id}, "
            f"{own}: `{self.update_command}` stores them"
        )

    def upgrade(self) -> str:
        """'baselines: vLLM 0.31.0 (2026-11-25) -> this run: vLLM 0.32.0' when the stored baselines were
        measured with another vLLM than the running one, else ''. A machine without a file of its own: those of
        the other machines' files it was judged against."""
        try:
            names = set().union(*self.borrowed.values()) if not self.file().methods else set()
            files = [f for f in self.others() if f.path.name in names] or [self.file()]
        except BaselineError:
            return ""
        stored = sorted({line for f in files for line in measured_by(f)})
        running = machine.module_version("vllm")
        if not stored or {s.split(" (")[0] for s in stored} == {f"vLLM {running}"}:
            return ""
        return f"baselines: {', '.join(stored)} -> this run: vLLM {running}"

    def missing(self, method: str, kind: str, key: str) -> str:
        return (
            f"no stored {kind} baseline for method '{method}', {key} in {self.path}; create it with "
            f"`{self.update_command}` and commit the file"
        )

    def write(
        self, measured: dict[str, dict[str, dict[str, dict]]], run_methods: set[str], models: dict | None = None
    ) -> str:
        """Merge `measured` into the stored file, atomically and under a file lock: other pytest-xdist
        workers may be merging theirs at the same moment, so the file is re-read inside the lock and
        only what this process measured is replaced, stamped with this run's provenance and `models`
        (method -> role -> {"ref", "revision"}). Returns the old -> new table."""
        from filelock import FileLock

        self.file()  # a corrupt file fails here, before anything is written
        self.path.parent.mkdir(parents=True, exist_ok=True)
        device, count = detect_device(self.profile.hardware)
        with FileLock(str(self.path) + ".lock", timeout=600):
            stored = load(self.path, self.name, self.hardware, self.say, self.identity)
            held_back, why = self._speedups_from_another_machine(stored, measured, run_methods)
            if held_back:  # the summary (geometric mean, crossover) is made of every level's ratio
                held_back.add(SPEEDUP.key(None))
            kept = {
                method: {
                    kind: {key: v for key, v in entries.items() if not (kind == SPEEDUP and key in held_back)}
                    for kind, entries in kinds.items()
                }
                for method, kinds in measured.items()
            }
            updated = merge(stored, kept, provenance(self.root, device, count, self.identity), models)
            write_atomic(updated)
        # self._file stays the file this run was judged against (the report shows old vs new).
        text = format_diff(diff(stored, updated), f"baselines written to {stored.path}", stored, updated)
        return text + (f"\n{why}" if why else "")

    def _speedups_from_another_machine(
        self, stored: BaselineFile, measured: dict, run_methods: set[str]
    ) -> tuple[set[str], str]:
        """The concurrency keys whose speedups this run must not write, and why. The baseline engine's
        stored throughput stamps every method's stored speedup with the machine it was measured on;
        rewriting it from another machine while other methods keep their ratios would leave those
        ratios judged as this machine's. Acceptance and memory do not depend on it."""
        rtol = self.profile.tolerance.machine_rtol
        keys, here, there, others = [], [], [], set()
        for key, now in measured.get(BASELINE, {}).get(SPEEDUP, {}).items():
            before = stored.entry(BASELINE, SPEEDUP, key)
            if not before or not before.get("throughput_tok_s") or not now.get("throughput_tok_s"):
                continue
            left = {m for m, kinds in stored.methods.items() if m not in run_methods and key in kinds.get(SPEEDUP, {})}
            if left and not within_rtol(now["throughput_tok_s"] / before["throughput_tok_s"], rtol):
                keys.append(key)
                here.append(f"{now['throughput_tok_s']:.1f}")
                there.append(f"{before['throughput_tok_s']:.1f}")
                others |= left
        if not keys:
            return set(), ""
        return set(keys), (
            f"speedups at {', '.join(keys)} not written: the baseline engine ran at {' / '.join(here)} tok/s here "
            f"against {' / '.join(there)} stored (outside machine_rtol {rtol}), and the stored "
            f"speedups of {', '.join(sorted(others))} were measured on that other machine; storing this run's would "
            f"mix two machines' ratios in {stored.path}. To move the speedup baselines to this machine, update every "
            f"method at once (`{self.update_command}` without {self.say('methods')})."
        )
