"""Ctrl-C and SIGTERM stop a run cleanly: both raise `Interrupted` (a KeyboardInterrupt) in the main
thread, so pytest stops at once and runs the teardown, which stops every engine and server.

Installed explicitly, rather than left to Python's defaults: a CI runner cancels a job with SIGINT and
then SIGTERM, and SIGTERM's default kills the process without any teardown (engines left behind);
and a shell that starts pytest as a background job of a script sets SIGINT to be ignored, so a
Ctrl-C forwarded to it did nothing. The waits in specgate poll (specgate.lifetime.watchdog.wait), so the
exception is raised within a fraction of a second wherever the run is.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop (SIGINT or SIGTERM)."""

    def __init__(self, signum: int):
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(f"{self.name}: stopping the run; the teardown stops every engine and server it started")


def _raise(signum, frame) -> None:
    raise Interrupted(signum)


def install() -> Callable[[], None]:
    """Handle SIGINT and SIGTERM as `Interrupted` (main thread only); returns what puts the previous
    handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        signal.signal(sig, _raise)

    def restore() -> None:
        for sig, handler in before.items():
            if handler is not None:
                signal.signal(sig, handler)

    return restore


def signal_name(exc: BaseException | None) -> str:
    """'SIGTERM', 'SIGINT' (a plain KeyboardInterrupt is Ctrl-C)."""
    return exc.name if isinstance(exc, Interrupted) else "SIGINT"
