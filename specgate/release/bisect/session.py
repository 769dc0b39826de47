"""One bisection session from start to end: the search run step by step with its gate runner, SIGTERM (a CI
cancel) torn down like Ctrl-C, and bisect.md written. `specgate bisect`'s options are specgate.cli.bisect."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from specgate.release.bisect.runner import GateRunner
from specgate.release.bisect.search import Bisection


def _terminate_as_interrupt(signum, frame):  # SIGTERM (a CI cancel) tears down like Ctrl-C
    raise KeyboardInterrupt


def bisect(
    root: Path,
    out: Path,
    profile,
    methods: list[str],
    settings: dict,
    candidates: list,
    good: str,
    bad: str,
    *,
    restart: bool,
    step_timeout: float,
    lock: Path | None,
) -> int:
    """Search `candidates` from `good` to `bad` to its end (resuming `out`'s state unless `restart`): 0 a first bad
    one found, 1 not found, 130 interrupted (the steps done are kept)."""
    bisection = Bisection(out, settings, candidates, good, bad, restart=restart)
    if bisection.order:
        print(f"bisect: resuming {bisection.state_path} ({len(bisection.order)} steps done)", flush=True)
    runner = GateRunner(root, out, profile, methods, settings["run_gates"], step_timeout, lock, settings.get("models"))
    previous = signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    started = time.time()
    try:
        code = bisection.run(runner)
    except KeyboardInterrupt:
        print(
            f"bisect: interrupted; {len(bisection.order)} steps are kept in {bisection.state_path}: rerun the same "
            "command to go on.",
            file=sys.stderr,
        )
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    lines = bisection.lines()
    out.mkdir(parents=True, exist_ok=True)
    (out / "bisect.md").write_text("```\n" + "\n".join(lines) + "\n```\n", encoding="utf-8")
    print("\n".join(lines))
    print(f"bisect: {out / 'bisect.md'}, state {bisection.state_path} ({time.time() - started:.0f} s this session)")
    return code
