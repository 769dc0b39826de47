"""The search: which candidate to run next (nearest the middle of the open range, stepping around
skips), when it is over, and the bisection's state file, which an interrupted bisection resumes from."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

from specgate.formatting import num
from specgate.gates import EQUIVALENCE, MEMORY
from specgate.release.bisect.candidates import Candidate
from specgate.release.bisect.steps import BAD, CHASEABLE, GOOD, RUN_GATES, SKIP, BisectError, Step, figure_name, moved
from specgate.store.revisions import short

STATE_VERSION = 1


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


class Bisection:
    """One bisection's settings, steps and state file; runs steps through `run_step(candidate, reference,
    chase)` (reference: the good end, whose figures become the session's baselines; chase: the gates
    that decide, None for all)."""

    def __init__(
        self, out: Path, settings: dict, candidates: list[Candidate], good: str, bad: str, restart: bool = False
    ):
        self.out, self.settings, self.candidates = Path(out), settings, candidates
        self.labels = [c.label for c in candidates]
        for which, lab in (("--good", good), ("--bad", bad)):
            if lab not in self.labels:
                raise BisectError(f"{which} {lab} is not one of the candidates ({', '.join(self.labels)}).")
        if self.labels.index(good) >= self.labels.index(bad):
            raise BisectError(f"--good {good} must come before --bad {bad} in the candidates (oldest first).")
        self.labels = self.labels[self.labels.index(good) : self.labels.index(bad) + 1]
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
            raise BisectError(
                f"the bisection state {self.state_path} is not valid JSON ({exc}); delete it "
                f"(or pass --restart) to start over."
            ) from None
        if state.get("version") != STATE_VERSION or state.get("identity") != self._identity():
            raise BisectError(
                f"{self.state_path} holds a bisection with other settings (good/bad, candidates, profile, "
                f"methods, gates or the models' revisions); give another --out, or --restart to discard it."
            )
        self.chase = state.get("chase")
        for s in state.get("steps", []):
            self.steps[s["label"]] = Step(**s)
            self.order.append(s["label"])

    def save(self) -> None:
        from specgate.store.baselines import write_text_atomic

        state = {
            "version": STATE_VERSION,
            "identity": self._identity(),
            "chase": self.chase,
            "steps": [asdict(self.steps[lab]) for lab in self.order],
        }
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
                raise BisectError(
                    f"the good release {self.good} is not good on its own ({step.verdict}: {step.reason}); "
                    f"pick another --good (its gate run: {step.results or 'none'})."
                )
            self.record(step)
        if self.bad not in self.steps:
            step = run_step(self.candidate(self.bad), reference=False, chase=self.chase)
            step.role = "bad"
            if step.verdict == SKIP:
                raise BisectError(
                    f"the bad release {self.bad} could not be tested ({step.reason}); fix that or pick "
                    f"another --bad, then rerun (the good release's figures are kept)."
                )
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
        from specgate.plugin.options import SPELLING  # the gate run's own options

        s = self.settings
        chased = [g for g in self.chase or [] if g != EQUIVALENCE]
        everything = not chased or set(chased) >= set(RUN_GATES) - {EQUIVALENCE}
        how = " (--gate)" if s.get("gates") else "" if everything or not self.chase else f" (what {self.bad} failed)"
        chase = "every gate" if everything else ", ".join(chased)
        out = [
            f"bisect {s['package']} {self.good} (good) .. {self.bad} (bad): profile {s['profile']}, methods "
            f"{', '.join(s['methods'])}; chasing {chase}{how} and greedy equivalence",
            f"  candidates ({len(self.labels)}): {' '.join(self.labels)}",
        ]
        if models := s.get("models"):
            out.append(held_line(models))
        total = waited = 0.0
        for n, lab in enumerate(self.order, start=1):
            st = self.steps[lab]
            total += st.wall_s
            waited += st.waited_s
            role = {"reference": " (reference: its figures are every step's baselines)", "bad": " (the bad end)"}.get(
                st.role, ""
            )
            out.append(f"  step {n}: {lab:<12} {st.verdict:<4} {st.wall_s:6.0f} s{role}: {st.reason}")
            if st.known:
                out.append("    known issues: " + ", ".join(f"{issue} {status}" for issue, status in st.known.items()))
        out.append(
            f"  {len(self.order)} steps, {total:.0f} s"
            + (f" (and {waited:.0f} s waiting for --lock)" if waited >= 1 else "")
        )
        out += self._known_lines()
        bad = self.steps.get(self.bad)
        if bad is not None and bad.verdict != BAD:
            out.append(
                f"not bisected: the bad end {self.bad} passes against {self.good}'s figures measured here in this "
                f"session ({bad.reason}): between these releases nothing moved that the gate sees on this "
                f"machine. A red gate on {self.bad} came from what it was compared with (baselines stored on "
                f"another machine or day: re-measure them with `{SPELLING.command(update_baselines=True)}`), from "
                "noise, or from a "
                f"method or gate left out here (--methods, --gate)."
            )
            return out
        found = verdict(self.labels, self.steps)
        if found is None:
            out.append("not finished: rerun the same command to go on.")
            return out
        lo, hi, skipped = found
        first, prev = self.steps[self.labels[hi]], self.labels[lo]
        if skipped:
            maybe = ", ".join(self.labels[i] for i in skipped)
            out.append(
                f"first bad: one of {maybe}, {self.labels[hi]} (previous good: {prev}); {maybe} could not be tested "
                "(skip): " + "; ".join(f"{self.labels[i]}: {self.steps[self.labels[i]].reason}" for i in skipped)
            )
        else:
            out.append(f"first bad: {self.labels[hi]} (previous good: {prev})")
        if first.diagnosis:
            out.append(f"  diagnosis: {first.diagnosis}")
        previous = self._figures(prev)
        moved_figures = [f for f in first.figures if moved(f)]
        for fig in moved_figures[:6]:
            before = previous.get(figure_name(fig), fig.get("baseline"))
            word = "ceiling" if fig["gate"] == MEMORY else "floor"
            out.append(
                f"  moved: {figure_name(fig)}: {prev} {num(before)} -> {self.labels[hi]} {num(fig['value'])} "
                f"(reference {self.good} {num(fig.get('baseline'))}, {word} {num(fig.get('bound'))})"
            )
        if len(moved_figures) > 6:
            out.append(f"  ... and {len(moved_figures) - 6} more figures past their bounds (see {first.results})")
        return out

    def _known_lines(self) -> list[str]:
        """Where each of the profile's known issues appears or disappears, candidate to candidate (in order)."""
        tested = [lab for lab in self.labels if lab in self.steps and self.steps[lab].known]
        out = []
        for issue in dict.fromkeys(i for lab in tested for i in self.steps[lab].known):
            seen = [(lab, self.steps[lab].known.get(issue, "not checked")) for lab in tested]
            changes = [f"{b} {sb} (after {a} {sa})" for (a, sa), (b, sb) in zip(seen, seen[1:]) if sa != sb]
            out.append(
                f"  known issue {issue}: "
                + (
                    ", ".join(f"{lab} {s}" for lab, s in seen)
                    + ("; changes at " + "; ".join(changes) if changes else "")
                )
            )
        return out

    def _figures(self, label: str) -> dict[str, float]:
        """The figures a step measured, from its measurements.json (none when it is gone)."""
        st = self.steps.get(label)
        path = Path(st.results) / "measurements.json" if st and st.results else None
        if path is None or not path.is_file():
            return {}
        return {figure_name(r): r.get("value") for r in json.loads(path.read_text(encoding="utf-8"))}


def held_line(models: dict[str, str | None]) -> str:
    """'  models held fixed (every step loads these; ...): zoo:target sha256:1a2b3c4, org/head 0e9e39f'."""
    said = ", ".join(f"{ref} {short(rev)}" for ref, rev in models.items())
    unknown = [ref for ref, rev in models.items() if not rev]
    return f"  models held fixed (every step loads these; a step that loads others is a skip): {said}" + (
        f"; {', '.join(unknown)} not in the cache yet: held only once pinned (`specgate download --pin`)"
        if unknown
        else ""
    )
