"""The history of a profile's baselines: every committed update of baselines/<profile>/*.json, read
from git, with the vLLM that measured each method; what the drift check (checks/drift.py, handed it by
the session) and `specgate history` (cli/history.py: the table and its page) read.

The file's git history is the record of every accepted change: each commit that touched it is an
update (date, revision, subject), and each method's entry carries the provenance of the run that
measured it (vLLM, torch, date, revision). A method entry that stays the same across commits is one
measurement, counted where it first appeared.

Figures are comparable across updates only while what they measure is the same: the models, the
prompts and the method's engine settings. `inputs()` fingerprints those (the profile's settings for
the method, and the git object ids of the model directories and prompt files it names) at the
commit that stored a measurement, and in the working tree for this run: a retrained drafter or a new
prompt set starts a new series instead of reading as drift. A checkout without git, a shallow clone
or a baselines directory outside git has no (complete) history: `History.problem` says which.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from specgate.gates import ACCEPTANCE, MEMORY, SPEEDUP
from specgate.machine import Identity
from specgate.profile import Method, Profile
from specgate.profile.schema import not_measuring
from specgate.store.baselines import BaselineFile, baselines_dir, provenance_of

# Keys of a profile (top-level or a method's) that do not change what a method measures (tolerances,
# notes, expectations): those whose settings spec.py declares with measures=False.
NOT_INPUTS = not_measuring(Profile) | not_measuring(Method)
WORKTREE = "working tree"


@dataclass(frozen=True)
class Update:
    """One commit that changed a baseline file (or, for WORKTREE, the file as it is on disk now)."""

    commit: str
    date: str  # committer date, ISO 8601
    subject: str
    path: str  # the file, relative to the repository's top
    file: BaselineFile

    @property
    def short(self) -> str:
        return self.commit[:7] if self.commit != WORKTREE else WORKTREE


@dataclass(frozen=True)
class Point:
    """One measurement of one method as it was stored: where it first appeared and its values."""

    update: Update
    method: str
    values: dict[str, Any]  # kind -> key -> figures

    @property
    def hardware(self) -> str:
        return self.update.file.hardware

    @property
    def identity(self) -> Identity | None:
        """The machine that measured it (None: not recorded, a file of before identities)."""
        return self.update.file.identity

    @property
    def machine(self) -> str:
        """'cpu-amd-epyc-2c, machine 456737d4', or the hardware name alone where no identity was recorded."""
        return self.update.file.machine if self.identity else self.hardware

    @property
    def vllm(self) -> str:
        return self.vllm_of()

    def vllm_of(self, kind: str | None = None) -> str:
        """The vLLM that measured `kind`'s figures of this entry (None: the newest run that stored any)."""
        return str(provenance_of(self.values, kind).get("vllm"))

    def figure(self, kind: str, key: str, metric: str) -> float | None:
        value = self.values.get(kind, {}).get(key, {}).get(metric)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def describe(self, kind: str | None = None) -> str:
        """'rev abc1234 (2026-11-25, vLLM 0.32.0, cpu-amd-epyc-2c, machine 456737d4)'."""
        return f"rev {self.update.short} ({self.update.date[:10]}, vLLM {self.vllm_of(kind)}, {self.machine})"


@dataclass
class History:
    root: Path
    profile: str
    top: Path | None = None  # the repository's top, when there is one
    updates: list[Update] = field(default_factory=list)  # oldest first
    problem: str = ""  # why there is no history, or only part of it
    _inputs: dict[tuple[str, str], str | None] = field(default_factory=dict, repr=False)

    @property
    def usable(self) -> bool:
        return self.top is not None and not self.problem

    @cached_property
    def points(self) -> list[Point]:
        """Every measurement, once, where it first appeared (oldest first)."""
        seen, out = set(), []
        for update in self.updates:
            for method, entry in update.file.methods.items():
                prov = entry.get("provenance", {})
                ident = (update.path, method, prov.get("date"), prov.get("git_revision"), prov.get("vllm"))
                if ident not in seen:
                    seen.add(ident)
                    out.append(Point(update, method, entry))
        return out

    def inputs(self, commit: str, method: str, profile_path: Path) -> str | None:
        """The fingerprint of what `method` measured at `commit` (WORKTREE: now); None when unknown."""
        key = (commit, method)
        if key not in self._inputs:
            self._inputs[key] = _fingerprint(self, commit, method, profile_path) if self.top else None
        return self._inputs[key]

    def comparable(self, method: str, profile_path: Path) -> list[Point]:
        """The method's measurements that measured what this checkout measures now."""
        now = self.inputs(WORKTREE, method, profile_path)
        if now is None:
            return []
        return [
            p for p in self.points if p.method == method and self.inputs(p.update.commit, method, profile_path) == now
        ]


def _git(cwd: Path, *args: str, binary: bool = False) -> Any:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=120)
    if done.returncode != 0:
        raise OSError(done.stderr.decode(errors="replace").strip() or f"git {args[0]} exit {done.returncode}")
    return done.stdout if binary else done.stdout.decode(errors="replace")


def read(root: Path, profile: str, hardware: str | None = None) -> History:
    """Every committed update of baselines/<profile>/ (all machines' files, or those of the hardware name
    `hardware` alone: each identity's and the file of before identities), oldest first. Never raises for a
    missing history: `problem` says why it is missing or partial."""
    root = Path(root)
    history = History(root, profile)
    directory = baselines_dir(root) / profile
    try:
        history.top = Path(_git(root, "rev-parse", "--show-toplevel").strip())
    except OSError as exc:
        history.problem = f"{root} is not a git checkout, or git is not installed ({str(exc).splitlines()[0][:120]})"
        return history
    try:
        rel = directory.resolve().relative_to(history.top.resolve())
    except ValueError:
        history.problem = f"the baselines directory {directory} is outside the git checkout {history.top}"
        return history
    if _git(root, "rev-parse", "--is-shallow-repository").strip() == "true":
        history.problem = (
            "this is a shallow clone: its git history is cut short (in GitHub Actions: actions/checkout "
            "with fetch-depth: 0; else git fetch --unshallow)"
        )
    targets = [str(rel / f"{hardware}.json"), f":(glob){rel}/{hardware}.*.json"] if hardware else [str(rel)]
    log = _git(
        history.top, "log", "--reverse", "--no-renames", "--format=%x00%H%x09%cI%x09%s", "--name-status", "--", *targets
    )
    for block in log.split("\x00")[1:]:
        head, *names = block.strip("\n").split("\n")
        commit, date, subject = (head.split("\t", 2) + ["", ""])[:3]
        for line in names:
            status, _, path = line.partition("\t")
            if not path.endswith(".json") or status.startswith("D"):
                continue
            file = _parse(_git(history.top, "show", f"{commit}:{path}"), path)
            if file is not None:
                history.updates.append(Update(commit, date, subject, path, file))
    return history


def _parse(text: str, path: str) -> BaselineFile | None:
    """A baseline file as it was committed; None when that version does not parse (it is skipped)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("methods"), dict):
        return None
    identity = Identity.from_json(data.get("identity"))
    return BaselineFile(Path(path), str(data.get("profile")), str(data.get("hardware")), data["methods"], identity)


# -- what a method measured --------------------------------------------------------------------------
def _fingerprint(history: History, commit: str, method: str, profile_path: Path) -> str | None:
    top = history.top
    try:
        rel = str(Path(profile_path).resolve().relative_to(top.resolve()))
    except ValueError:
        return None
    try:
        text = (
            Path(top, rel).read_text(encoding="utf-8") if commit == WORKTREE else _git(top, "show", f"{commit}:{rel}")
        )
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return None
    spec = data.get("methods", {}).get(method)
    if method != "baseline" and not isinstance(spec, dict):
        return None
    settings = {k: v for k, v in data.items() if k not in NOT_INPUTS and k != "methods"}
    settings["method"] = {k: v for k, v in (spec or {}).items() if k not in NOT_INPUTS}
    refs = [
        data.get("target"),
        (spec or {}).get("engine", {}).get("kwargs", {}).get("model"),
        (spec or {}).get("speculative_config", {}).get("model"),
    ]
    for entry in data.get("prompts", []):
        refs += [entry] if isinstance(entry, str) else [v for v in entry.values() if isinstance(v, str)]
    files = {}
    for ref in refs:
        if isinstance(ref, str) and ref:
            path = f"fixtures/zoo/{ref[4:]}" if ref.startswith("zoo:") else ref
            files[ref] = _objects(top, commit, path)
    blob = json.dumps({"settings": settings, "files": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _objects(top: Path, commit: str, path: str) -> list[list[str]]:
    """(file, git object id) of every tracked file at `path` (a file or a directory); [] for a name
    that is not a tracked path (a hub id: the name itself is what identifies it)."""
    try:
        if commit != WORKTREE:
            listing = _git(top, "ls-tree", "-r", commit, "--", path)
            return sorted([line.split("\t", 1)[1], line.split()[2]] for line in listing.splitlines() if "\t" in line)
        staged = {
            line.split("\t", 1)[1]: line.split()[1] for line in _git(top, "ls-files", "-s", "--", path).splitlines()
        }
        changed = [
            n
            for n in _git(top, "diff", "--name-only", "--", path).splitlines()
            if n in staged and Path(top, n).is_file() and not Path(top, n).is_symlink()
        ]
        if changed:  # edited since they were staged: what is on disk now
            staged.update(zip(changed, _git(top, "hash-object", "--", *changed).split()))
        return sorted([n, i] for n, i in staged.items() if Path(top, n).exists() or Path(top, n).is_symlink())
    except OSError:
        return []


# -- headline figures (what `specgate history` plots per gate) ---------------------------------------
HEADLINES = {
    ACCEPTANCE: ("mean acceptance length (mean over categories)", True),
    SPEEDUP: ("speedup (geometric mean over levels)", True),
    "drafter_weights": ("drafter weights (MiB)", False),
    "kv_tokens_lost": ("KV-cache tokens lost", False),
    "process_mib": ("processes over the baseline engine (MiB)", False),
}


def headlines(values: dict[str, Any]) -> dict[str, float]:
    """Each gate's headline figure of one stored method entry (greedy acceptance: keys without @T)."""
    out: dict[str, float] = {}
    lengths = [
        v["mean_acceptance_length"]
        for k, v in values.get(ACCEPTANCE, {}).items()
        if not ACCEPTANCE.parse(k).temperature and isinstance(v.get("mean_acceptance_length"), (int, float))
    ]
    if lengths:
        out[ACCEPTANCE] = sum(lengths) / len(lengths)
    speeds = [
        v["speedup"]
        for k, v in values.get(SPEEDUP, {}).items()
        if SPEEDUP.parse(k).concurrency is not None and isinstance(v.get("speedup"), (int, float)) and v["speedup"] > 0
    ]
    if speeds:
        out[SPEEDUP] = math.exp(sum(math.log(s) for s in speeds) / len(speeds))
    overhead = values.get(MEMORY, {}).get(MEMORY.key(), {})
    for name, metric in (
        ("drafter_weights", "static_mib_measured"),
        ("kv_tokens_lost", "kv_tokens_lost"),
        ("process_mib", "process_mib"),
    ):
        if isinstance(overhead.get(metric), (int, float)):
            out[name] = float(overhead[metric])
    return out
