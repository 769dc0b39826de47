"""Where vLLM's log records go while specgate drives engines: `STREAM`.

In this (pytest) process, `take_vllm_records()` gives the "vllm" logger a handler on STREAM and stops
its records from propagating to the root logger, and STREAM appends to the log file of the engine
concerned (the one booting or running, else the last one). vLLM logs here on its own threads and
tasks, also while an engine is being stopped on purpose (the output handler's EngineDeadError); up at
the root logger, pytest showed those records in the captured output of whichever test ran next.
pytest 9 also hands its capture handlers to every logger that does not propagate, "vllm" included:
`keep_out_of_reports()` puts a filter on them (a failing speedup test of a gate run showed an engine's
boot log and the EngineDeadError of the engine stopped before it).

specgate also sets VLLM_LOGGING_STREAM=ext://specgate.engines.logstream.STREAM, so wherever vLLM configures
its own logging, its console handler is this object too. In the engine's own processes nothing is
routed: there it writes to stdout, which is the engine's log already.

Kept free of heavy imports: vLLM's processes import it when they configure logging.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

ENV = {"VLLM_LOGGING_STREAM": "ext://specgate.engines.logstream.STREAM"}


class _Stream:
    def __init__(self) -> None:
        self.path: Path | None = None
        self.owner = os.getpid()  # a copy of this object in a forked child is not routed

    def route_to(self, path: Path) -> None:
        self.path, self.owner = Path(path), os.getpid()

    def reset(self) -> None:
        """Route nothing: what is written goes to stdout again (a test's, or after the last engine)."""
        self.path, self.owner = None, os.getpid()

    def write(self, text: str) -> int:
        if self.path is not None and os.getpid() == self.owner:
            try:
                with open(self.path, "a", encoding="utf-8", errors="replace") as fh:
                    fh.write(text)
            except OSError:
                pass
            return len(text)
        return sys.stdout.write(text)

    def flush(self) -> None:
        if self.path is None or os.getpid() != self.owner:
            sys.stdout.flush()

    def isatty(self) -> bool:
        return False


STREAM = _Stream()


def take_vllm_records() -> None:
    """In this process, vLLM's log records go to STREAM and nowhere else. Idempotent; it holds
    whether or not vLLM configures its logging here (its own handler then writes to STREAM too)."""
    logger = logging.getLogger("vllm")
    if not any(getattr(h, "stream", None) is STREAM for h in logger.handlers):
        handler = logging.StreamHandler(STREAM)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
    logger.propagate = False


def keep_out_of_reports(logging_plugin) -> None:
    """pytest's report and caplog handlers (of its logging plugin; None under -p no:logging) leave out
    the vLLM records STREAM routes to an engine's log."""
    for name in ("caplog_handler", "report_handler"):
        handler = getattr(logging_plugin, name, None)
        if handler is not None and not_routed not in handler.filters:
            handler.addFilter(not_routed)


def not_routed(record: logging.LogRecord) -> bool:
    """A logging filter: False for a vLLM record once STREAM routes them (an engine has booted here)."""
    return STREAM.path is None or not (record.name == "vllm" or record.name.startswith("vllm."))
