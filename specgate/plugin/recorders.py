"""What the plugin records while pytest runs, as plugin objects registered at configure time:

    RunLife            Ctrl-C and SIGTERM stop the run cleanly, earlier runs' leftover engines are said
                       (or stopped), an interrupted run says where
    CorrectnessWatch   the failed `correctness` tests (the session refuses --update-baselines after one)
    OutcomeRecorder    each gate test's outcome for the run record: its message, whether it is a
                       correctness test, and why its check could not judge (the engine died)

plugin.py registers them at configure time and reads what they hold when the run ends.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from specgate.store.run_record import Outcome

CAUSE = "specgate_cause"  # a test's user property: why its check could not judge (run_record.Outcome.cause)
# a test's user property: what its failing judgement (or the one-paragraph failure of its session call) said,
# which the run record keeps as the test's message; pytest's traceback text is never read for it
MESSAGE = "specgate_message"


class RunLife:
    """How the run begins and ends: Ctrl-C and SIGTERM stop it cleanly (specgate.lifetime.interrupts), engine
    processes an earlier run left behind are reported or stopped, and an interrupted run says where."""

    def __init__(self) -> None:
        self.restore_signals = lambda: None
        self.header: list[str] = []
        self.current = ""  # the test running now
        self.interrupted = ""

    def start(self, config: pytest.Config, root: Path) -> None:
        """Signals handled, vLLM's log lines streamed, and earlier runs of the checkout at `root` said."""
        from specgate.engines import logstream
        from specgate.lifetime import interrupts, reaper

        self.restore_signals = interrupts.install()
        os.environ.update(logstream.ENV)  # before vLLM configures its logging: see specgate.engines.logstream
        if hasattr(config, "workerinput"):
            return  # an xdist worker: the controller looks after earlier runs
        kill = config.getoption("--specgate-kill-stale")
        for run in reaper.stale_runs(root):
            if kill:
                left = reaper.stop_stale(run)
                self.header.append(
                    f"specgate: stopped {len(run.processes) - len(left)} process(es) left by an earlier run "
                    f"(pid {run.owner}){f'; these would not die: {left}' if left else ''}"
                )
            else:
                pids = " ".join(str(p["pid"]) for p in run.processes)
                self.header.append(
                    f"specgate: WARNING: {run.describe()}. Stop them with --specgate-kill-stale (or kill "
                    f"{pids}); the state file is {run.path}"
                )

    @pytest.hookimpl
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        terminal = session.config.pluginmanager.get_plugin("terminalreporter")
        for line in self.header:  # written even with -q, where pytest prints no header
            if terminal is not None:
                terminal.write_line(line, yellow=True, bold=True)

    @pytest.hookimpl
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.current = nodeid

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self, excinfo) -> None:
        from specgate.lifetime import interrupts

        where = self.current or "collection"
        self.interrupted = f"interrupted at {where} ({interrupts.signal_name(excinfo.value)})"

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        self.restore_signals()


class CorrectnessWatch:
    """Collects failed `correctness` tests: --update-baselines refuses to write after any."""

    def __init__(self) -> None:
        self.failures: list[str] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # Failures of the test itself; an engine that did not boot (setup error) measured nothing.
        if report.failed and report.when == "call" and "correctness" in report.keywords:
            self.failures.append(report.nodeid)


class OutcomeRecorder:
    """Each gate test's outcome and message, for run.json and the report."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[str, str, str]] = {}
        self.outcomes: dict[str, Outcome] = {}  # by test, in the order they happened

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        described = self.items.get(report.nodeid)
        if described is None:
            return
        if report.skipped:
            outcome = "skipped"
            longrepr = report.longrepr
            message = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            message = message.removeprefix("Skipped: ")
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
            message = next((v for k, v in report.user_properties if k == MESSAGE), "") or crash_message(report)
        elif report.when == "call":
            outcome, message = "passed", ""
        else:
            return
        if report.nodeid in self.outcomes and outcome == "passed":
            return
        cause = dict(report.user_properties).get(CAUSE, "") if outcome in ("failed", "error") else ""
        self.outcomes[report.nodeid] = Outcome(
            report.nodeid,
            *described,
            outcome,
            message,
            correctness="correctness" in report.keywords,
            cause=cause,
            at=round(getattr(report, "start", 0.0) or time.time(), 3),
        )


def crash_message(report: pytest.TestReport, limit: int = 4000) -> str:
    """A failure no judgement explained (a test's own assert, an exception): the exception pytest reports
    (its crash entry: type and message), or the failure's whole text where it has none (pytrace=False)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip()[:limit]
