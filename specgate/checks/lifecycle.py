"""Engine lifecycle: each engine boots once and gives its processes and memory back on shutdown."""

from __future__ import annotations

from specgate.checks import Judgement, Verdict
from specgate.gates import LIFECYCLE, Key


class LifecycleCheck:
    gate = LIFECYCLE

    def __init__(self, host):
        self.host = host

    def judge(self, method: str, key: Key) -> Judgement:
        j = Judgement(self.gate, method, key, Verdict.PASS)
        if reason := self.host.not_measurable_here(self.gate):
            j.verdict, j.messages = Verdict.SKIP, [reason]
            return j
        record = self.host.records[method]
        report = self.host.release(method)
        if record.boots != 1:
            j.messages.append(f"engine '{method}' booted {record.boots} times in one run")
        elif report is None or not report.released:
            j.messages.append(report.describe() if report else "never shut down")
        j.verdict = Verdict.FAIL if j.messages else Verdict.PASS
        return j
