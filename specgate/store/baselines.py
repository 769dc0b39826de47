"""Stored baselines: read, validate, merge, write atomically, diff.

One JSON file per profile, hardware name and machine identity: `baselines/<profile>/<hardware-key>.<id>.json`

    {"schema": 1, "profile": "cpu-tiny", "hardware": "cpu-amd-epyc-2c",
     "identity": {"kind": "cpu", "vendor": "AuthenticAMD", "family": 25, "model": 17, ..., "id": "456737d4"},
     "methods": {"eagle": {"provenance": {...},
                           "acceptance": {"<category>": {"mean_acceptance_length": 1.9, ...}}}}}

The hardware key is the marketing name (machine.hardware_key); the identity (machine.identity: CPU family,
model, stepping, kernel flags, caches, cores; GPU memory, SMs, clocks, power limit) is what measured the
figures, and its id names the file, so two machines sold under one name keep a file each and neither
overwrites the other's. A file without an identity (`<hardware-key>.json`, written before identities were
recorded) is no machine's own: every run reads it as another machine's (portable figures judged, speed
coarsely), and an update writes the machine's own file beside it.

Values are grouped by method, then by kind of measurement ("acceptance", "speedup", "memory"),
then by key (a prompt category, a concurrency level, a quantity). Each method carries the
provenance of the run that measured it (vLLM / torch / Python versions, device, date, git revision,
and "models": the ref and resolved revision of every model its engine loaded, specgate.store.revisions),
so a run filtered to one method updates that method alone and the others keep theirs.

Provenance is per group of figures (group_of: speed, memory, requests, the portable rest): "provenance" is the
newest run that stored any of the method's figures, and "provenance.groups" holds the provenance of
each group a later run did not re-measure (speed figures kept from another machine, say); a group
not listed there was measured by that newest run. A file written before groups has no "groups": its
one provenance is every group's (provenance_of).

This module is the file format: where the files live, load and validate, merge, the atomic write,
diff. What one run reads from them and how it writes (other machines' files, the locked merge, the
machine stamp of speedups) is specgate.store.baseline_store.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.errors import BaselineError
from specgate.formatting import num
from specgate.gates import GATES, gate_named
from specgate.machine import Identity
from specgate.settings import NAMES, Spelling
from specgate.store.revisions import short

SCHEMA = 1
# The kinds of figures a file holds: the gates whose records an update stores (the registry's `Gate.stored`):
# acceptance per category; speedup per level; load: acceptance at each concurrency level (checks.load);
# memory; structured: acceptance under a JSON schema; requests: acceptance at T > 0 (checks.requests); edges:
# acceptance per traffic edge class (checks.edges)
KINDS = tuple(g for g in GATES if g.stored)
ROLES = ("target", "tokenizer", "drafter")  # the models a method entry records, in the order they are said


def group_of(kind: str) -> str:
    """The provenance group of a kind: figures that one run may store while another's are kept (speed, memory,
    requests) each carry the provenance of their own run; the rest are "portable"."""
    return getattr(gate_named(kind), "stored", "") or "portable"


def provenance_of(entry: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    """The provenance of the run that measured `kind`'s figures in a method entry (None: the newest run that
    stored any of them); one provenance without groups (an older file) is every group's."""
    prov = entry.get("provenance", {})
    if kind is not None and (own := prov.get("groups", {}).get(group_of(kind))):
        return own
    return {k: v for k, v in prov.items() if k != "groups"}


@dataclass
class BaselineFile:
    path: Path
    profile: str
    hardware: str
    methods: dict[str, dict[str, Any]]
    identity: Identity | None = None  # the machine that measured the figures; None: not recorded (an older file)

    @property
    def machine(self) -> str:
        """'cpu-amd-epyc-2c, machine 456737d4' (or 'machine not recorded'): which machine, for messages."""
        return f"{self.hardware}, machine {self.identity.id if self.identity else 'not recorded'}"

    def describe_machine(self) -> str:
        """The stored identity for a person ('identity not recorded' for an older file)."""
        return self.identity.describe() if self.identity else "identity not recorded"

    def entry(self, method: str, kind: str, key: str) -> dict[str, Any] | None:
        return self.methods.get(method, {}).get(kind, {}).get(key)

    def source(self, method: str, kind: str | None = None) -> str:
        """'vLLM 0.32.0, 2026-11-22, rev abc123' for failure messages: the run that measured `kind`'s figures."""
        prov = provenance_of(self.methods.get(method, {}), kind)
        return f"vLLM {prov.get('vllm')}, {str(prov.get('date', '?'))[:10]}, rev {prov.get('git_revision')}"

    def models(self, method: str, kind: str | None = None) -> dict[str, dict]:
        """role -> {"ref", "revision"} of the models `kind`'s figures were measured with ({}: not recorded)."""
        return provenance_of(self.methods.get(method, {}), kind).get("models", {})

    def to_json(self) -> dict[str, Any]:
        out = {"schema": SCHEMA, "profile": self.profile, "hardware": self.hardware, "methods": self.methods}
        return out | ({"identity": self.identity.to_json()} if self.identity else {})


# Where the stored baselines live instead of <checkout>/baselines (`specgate bisect` points its gate
# runs at the figures the good release measured in the same session).
BASELINES_DIR_ENV = "SPECGATE_BASELINES_DIR"


def baselines_dir(root: Path) -> Path:
    return Path(os.environ.get(BASELINES_DIR_ENV) or Path(root) / "baselines")


def kept_aside(root: Path, profile: str) -> Path | None:
    """baselines/<profile>.kept, where a calibration killed before it finished (tools/calibrate_speedup,
    before `specgate calibrate` judged in a scratch directory) left the checkout's baselines."""
    kept = baselines_dir(root) / f"{profile}.kept"
    return kept if kept.is_dir() else None


def baseline_path(root: Path, profile: str, hardware: str, identity: Identity | None = None) -> Path:
    """The file of `identity` under the name `hardware`; without an identity, the name's file of before
    identities were recorded."""
    return baselines_dir(root) / profile / (f"{hardware}.{identity.id}.json" if identity else f"{hardware}.json")


def load(
    path: Path, profile: str, hardware: str, say: Spelling = NAMES, identity: Identity | None = None
) -> BaselineFile:
    """The stored baselines (empty when the file does not exist yet); BaselineError when it is bad, or not
    the file of `identity` where one is asked for, saying what to do with the settings spelled as the caller's
    user spells them (`say`)."""
    if not path.exists():
        return BaselineFile(path, profile, hardware, {}, identity)
    fix = f"restore it from git (git checkout -- FILE) or delete it and rerun with {say('update_baselines')}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaselineError(f"baseline file {path} is not valid JSON ({exc}); it may be truncated; {fix}.") from None
    problem = _schema_problem(data)
    if problem:
        raise BaselineError(f"baseline file {path} does not match schema {SCHEMA}: {problem}; {fix}.")
    if data["profile"] != profile or data["hardware"] != hardware:
        raise BaselineError(
            f"baseline file {path} is for profile {data['profile']!r} on {data['hardware']!r}, "
            f"not {profile!r} on {hardware!r}; {fix}."
        )
    stored = Identity.from_json(data.get("identity"))
    if identity is not None and stored != identity:
        raise BaselineError(
            f"baseline file {path} holds the figures of machine {stored.id if stored else '(not recorded)'}, not of "
            f"this machine ({identity.id}: {identity.describe()}); a file is named by the identity that measured it. "
            f"Move it back to the name its 'identity' gives, or delete it and rerun with {say('update_baselines')}."
        )
    return BaselineFile(path, profile, hardware, data["methods"], stored)


def _schema_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return "the top level is not an object"
    if data.get("schema") != SCHEMA:
        return f"'schema' is {data.get('schema')!r}, this specgate reads {SCHEMA}"
    for key in ("profile", "hardware"):
        if not isinstance(data.get(key), str):
            return f"'{key}' is missing or not a string"
    if "identity" in data and not (isinstance(data["identity"], dict) and data["identity"]):
        return "'identity' is not an object of the machine's facts"
    methods = data.get("methods")
    if not isinstance(methods, dict):
        return "'methods' is missing or not an object"
    for name, entry in methods.items():
        if not isinstance(entry, dict):
            return f"methods.{name} is not an object"
        for kind, values in entry.items():
            if kind == "provenance":
                continue
            if kind not in KINDS:
                return f"methods.{name}.{kind} is not one of {', '.join(KINDS)}"
            if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
                return f"methods.{name}.{kind} must map keys to objects of values"
            for key, record in values.items():
                for field, value in record.items():
                    if not _numbers(value) and not (isinstance(value, dict) and all(map(_numbers, value.values()))):
                        return (
                            f"methods.{name}.{kind}.{key}.{field} is {value!r}, not a number, a list of numbers or "
                            "an object of lists of numbers"
                        )
    return None


def _numbers(value) -> bool:
    """A stored figure: a number, or a list of numbers (null where a window had no step)."""
    if isinstance(value, list):
        return all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def merge(
    stored: BaselineFile,
    measured: dict[str, dict[str, dict[str, dict]]],
    prov: dict[str, Any],
    models: dict[str, dict] | None = None,
) -> BaselineFile:
    """A new BaselineFile: `measured` (method -> kind -> key -> values) replaces what it covers,
    everything it did not measure is kept as stored, each group of figures with its own provenance. A value
    measured as None (e.g. the acceptance length of a method that drafted nothing) is left out: the schema
    stores numbers only. `models` (method -> role -> {"ref", "revision"}) is stamped with this run's figures."""
    methods = json.loads(json.dumps(stored.methods))  # deep copy
    for method, kinds in measured.items():
        entry = methods.setdefault(method, {})
        stamp = dict(prov, models=models[method]) if models and method in models else dict(prov)
        groups = {group_of(k): provenance_of(entry, k) for k in entry if k != "provenance"}
        for kind, values in kinds.items():
            kept = {key: {f: v for f, v in vals.items() if v is not None} for key, vals in values.items()}
            if kept:
                entry.setdefault(kind, {}).update(kept)
                groups[group_of(kind)] = stamp
        if any(p is stamp for p in groups.values()):
            kept_groups = {g: p for g, p in sorted(groups.items()) if p is not stamp and p != stamp}
            entry["provenance"] = dict(stamp, groups=kept_groups) if kept_groups else stamp
        elif not entry:
            del methods[method]
    return BaselineFile(stored.path, stored.profile, stored.hardware, methods, stored.identity)


def write_atomic(baseline: BaselineFile) -> None:
    write_text_atomic(baseline.path, json.dumps(baseline.to_json(), indent=2, sort_keys=True) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Change:
    method: str
    kind: str
    key: str
    field: str
    old: float | None
    new: float | None

    @property
    def relative(self) -> float | None:
        if self.old is None or self.new is None or self.old == 0:
            return None
        return (self.new - self.old) / abs(self.old)


def _flatten(values: dict, prefix: str = "") -> Iterator[tuple[str, float | None]]:
    """Each number of a stored record by its path: 'field', 'field[i]', 'requests.<prompt id>[i]'."""
    for field, value in sorted(values.items()):
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{field}.")
        elif isinstance(value, list):
            for i, x in enumerate(value):
                yield f"{prefix}{field}[{i}]", None if x is None else float(x)
        else:
            yield f"{prefix}{field}", None if value is None else float(value)


def diff(old: BaselineFile, new: BaselineFile) -> list[Change]:
    """Every value that differs between two baseline files (added, removed or changed)."""
    changes = []
    for method in sorted(set(old.methods) | set(new.methods)):
        o_entry, n_entry = old.methods.get(method, {}), new.methods.get(method, {})
        for kind in KINDS:
            o_kind, n_kind = o_entry.get(kind, {}), n_entry.get(kind, {})
            for key in sorted(set(o_kind) | set(n_kind)):
                o_vals = dict(_flatten(o_kind.get(key, {})))
                n_vals = dict(_flatten(n_kind.get(key, {})))
                for field in sorted(set(o_vals) | set(n_vals)):
                    a, b = o_vals.get(field), n_vals.get(field)
                    if a != b:
                        changes.append(Change(method, kind, key, field, a, b))
    return changes


def format_diff(
    changes: list[Change], title: str, old: BaselineFile | None = None, new: BaselineFile | None = None
) -> str:
    """An old -> new table grouped by gate, then method, with the relative change of every value that
    moved; an entry that is new (or removed) as a whole is one row. With both files, a first line
    says which vLLM measured each side when that changed."""
    models = model_lines(old, new) if old is not None and new is not None else []
    if not changes:
        return f"{title}: no value changed" + "".join(f"\n  model: {line}" for line in models)
    lines = [title]
    if old is not None and new is not None and (moved := upgrade_line(old, new)):
        lines.append(f"  {moved}")
    lines += [f"  model: {line}" for line in models]
    rows = [("method", "kind", "key", "value", "old", "new", "change")]
    for (method, kind, key), group in grouped(changes):
        if all(c.old is None for c in group) or all(c.new is None for c in group):
            state = "new" if group[0].old is None else "removed"
            rows.append((method, kind, key, f"({len(group)} values)", "-", "-", f"{state} entry"))
            continue
        rows += [_diff_row(c) for c in group]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(lines + ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows])


def grouped(changes: list[Change]) -> list[tuple[tuple[str, str, str], list[Change]]]:
    """Changes of one (method, kind, key) together, ordered by gate, then method, then key."""
    groups: dict[tuple[str, str, str], list[Change]] = {}
    for c in changes:
        groups.setdefault((c.method, c.kind, c.key), []).append(c)
    order = {k: i for i, k in enumerate(KINDS)}
    return sorted(
        groups.items(), key=lambda item: (order.get(item[0][1], len(order)), item[0][0] != "baseline", item[0][0])
    )


def measured_by(file: BaselineFile) -> list[str]:
    """'vLLM 0.31.0 (2026-11-25)' for each distinct vLLM release (and day) that measured figures of the file."""
    seen = set()
    for entry in file.methods.values():
        for kind in [k for k in entry if k != "provenance"] or [None]:
            if prov := provenance_of(entry, kind):
                seen.add((str(prov.get("vllm")), str(prov.get("date", "?"))[:10]))
    return [f"vLLM {v} ({d})" for v, d in sorted(seen)]


def model_moves(old: dict[str, dict], new: dict[str, dict]) -> list[tuple[str, dict, dict]]:
    """(role, old, new) for each model recorded on both sides that is another one now: another revision where
    both are known, else another reference. Roles recorded on one side only (a file written before models
    were recorded) are not a move."""
    out = []
    for role in sorted(set(old) & set(new), key=lambda r: ROLES.index(r) if r in ROLES else len(ROLES)):
        a, b = old[role], new[role]
        if a.get("revision") and b.get("revision"):
            moved = a["revision"] != b["revision"]
        else:
            moved = a.get("ref") != b.get("ref")
        if moved:
            out.append((role, a, b))
    return out


def describe_move(owner: str, role: str, a: dict, b: dict) -> str:
    """ "eagle3's drafter: org/head abc1234 -> def5678"."""
    if a.get("ref") == b.get("ref"):
        return f"{owner} {role}: {a.get('ref')} {short(a.get('revision'))} -> {short(b.get('revision'))}"
    return f"{owner} {role}: {a.get('ref')} {short(a.get('revision'))} -> {b.get('ref')} {short(b.get('revision'))}"


def model_lines(old: BaselineFile, new: BaselineFile) -> list[str]:
    """One line per model that differs between the figures of the two files, for each method in both."""
    lines = []
    for method in sorted(set(old.methods) & set(new.methods)):
        o, n = old.methods[method], new.methods[method]
        kinds = [k for k in o if k in n and k != "provenance"] or [None]
        for kind in kinds:
            for move in model_moves(old.models(method, kind), new.models(method, kind)):
                line = describe_move(f"{method}'s", *move)
                if line not in lines:
                    lines.append(line)
    return lines


def upgrade_line(old: BaselineFile, new: BaselineFile) -> str:
    """'vLLM 0.31.0 (2026-11-25) -> vLLM 0.32.0 (2026-11-26)' when the vLLM releases differ, else ''."""
    a, b = measured_by(old), measured_by(new)
    if {x.split(" (")[0] for x in a} == {x.split(" (")[0] for x in b}:
        return ""
    return f"{', '.join(a) or 'nothing stored'} -> {', '.join(b)}"


def _diff_row(c: Change) -> tuple[str, ...]:
    rel = (
        "new" if c.old is None else "removed" if c.new is None else "-" if c.relative is None else f"{c.relative:+.1%}"
    )
    return (c.method, c.kind, c.key, c.field, num(c.old), num(c.new), rel)
