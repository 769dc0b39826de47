"""A step for real: the candidate's virtualenv built (or reused), one gate run from it judged against
the figures the good release stored first in this session, under a deadline and, with --lock, taking
turns with other users of the machine."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.gates import ACCEPTANCE, MEMORY, SPEEDUP
from specgate.release.bisect.candidates import Candidate, package_of, venv_for
from specgate.release.bisect.steps import BAD, GOOD, SKIP, Step, classify


class GateRunner:
    """One gate run per candidate from its own venv, judged against the session's baselines directory."""

    def __init__(
        self,
        root: Path,
        out: Path,
        profile,
        methods: list[str],
        run_gates: list[str],
        timeout_s: float,
        lock: Path | None = None,
        held: dict[str, str | None] | None = None,
    ):
        self.root, self.out, self.profile = Path(root), Path(out), profile
        self.methods, self.run_gates, self.timeout_s, self.lock = methods, run_gates, timeout_s, lock
        self.held = held or {}  # ref -> revision: the models every step must load (revisions.held)
        self.waited = 0.0

    def __call__(self, candidate: Candidate, reference: bool, chase: list[str] | None) -> Step:
        from specgate.release import venvs

        started, self.waited = time.time(), 0.0
        try:
            python = venvs.build(
                self.root,
                venv_for(self.root, candidate, self.profile.hardware),
                self.profile.hardware,
                release=candidate.release or None,
                requirement=None if candidate.release else candidate.requirement,
            )
        except SpecgateError as exc:
            return Step(candidate.label, SKIP, f"install failed: {str(exc).splitlines()[0]}", time.time() - started)
        offered = venvs.offered_methods(python)
        kinds = {m.name: m.kind for m in self.profile.select(self.methods)}
        missing = [f"{name} ({kind})" for name, kind in kinds.items() if offered and kind not in offered]
        if missing and len(missing) == len(kinds):
            return Step(
                candidate.label,
                SKIP,
                f"{package_of(self.profile.hardware)} {candidate.label} does not offer "
                f"{', '.join(missing)}; it offers: {', '.join(offered)}",
                time.time() - started,
            )
        results = self.out / "steps" / candidate.label
        if results.exists():
            shutil.rmtree(results)
        log = self.out / "steps" / f"{candidate.label}.log"
        print(
            f"bisect: {candidate.label}: gate run ({', '.join(self.run_gates)}; methods {', '.join(self.methods)})"
            f"{' storing the reference figures' if reference else ''}; log {log} ...",
            flush=True,
        )
        rc = self._pytest(python, results, log, reference)
        if rc is None:
            step = Step(
                candidate.label,
                SKIP,
                f"the gate run did not end within {self.timeout_s:.0f} s (--step-timeout); stopped; its log {log}",
            )
        else:
            step = classify(results, self.methods, chase, log, self.held)
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
            return Step(
                step.label,
                BAD,
                f"{step.reason}; its gate run stored no figures to judge the others against "
                f"(a correctness failure refuses to update the baselines); see {results / 'summary.md'}",
            )
        missing = [g for g in (ACCEPTANCE, SPEEDUP, MEMORY) if g in self.run_gates and g not in stored]
        note = (
            (
                f"; no {', '.join(missing)} figures stored (see its summary: a disturbed machine stores no speed "
                f"figure), so later steps cannot judge {'that gate' if len(missing) == 1 else 'those gates'}"
            )
            if missing
            else ""
        )
        return Step(step.label, GOOD, f"reference figures stored: {', '.join(sorted(stored))}{note}")

    def _pytest(self, python: Path, results: Path, log: Path, reference: bool) -> int | None:
        from specgate.plugin.options import SPELLING
        from specgate.store.baselines import BASELINES_DIR_ENV

        args = [
            str(python),
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-p",
            "no:randomly",
            "-q",
            *(f"tests/gate/test_{g}.py" for g in self.run_gates),
            *SPELLING.args(
                profile=self.profile.path, methods=",".join(self.methods), out=results, update_baselines=reference
            ),
        ]
        env = {**os.environ, BASELINES_DIR_ENV: str(self.out / "baselines")}
        env.pop("VIRTUAL_ENV", None)
        log.parent.mkdir(parents=True, exist_ok=True)
        waiting = time.time()
        with _held(self.lock), open(log, "wb") as fh:
            self.waited = time.time() - waiting
            proc = subprocess.Popen(
                args, cwd=self.root, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
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
