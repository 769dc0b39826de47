"""What a vLLM engine's or server's log says when it failed: the root cause, the lines leading up to
it, and the whole text a refusal is matched against.

    root_cause(log, exc)   (vLLM's own reason, the log lines that lead up to it): the first real
                           traceback's exception with the sentence that follows its header line
                           (pydantic puts the message on the next, indented line)
    failure_text(error)    everything a failure says, the whole log it names included, long lines
                           intact: what `expected_boot_error` is matched against (shorten after)
    boot_failed(...), boot_overdue(...)   the EngineBootError of an in-process boot that raised or ran past
                           its deadline, quoting the log

Used for in-process engines (engine.py) and for servers (server.py) alike.
"""

from __future__ import annotations

import re
from pathlib import Path

from specgate.errors import EngineBootError

TAIL_LINES = 25
MAX_REASON = 400  # characters of the engine's one-line reason kept in messages

_EXCEPTION_LINE = re.compile(r"(?:^|\] |\s)([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$")
# what vLLM's multi-process logging puts in front of a child's lines: "(EngineCore pid=2) ERROR 11-22
# 00:58:42 [core.py:1510] " or "(APIServer pid=7) "
_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+ \S+ \[[^\]]*\] )?")


def read_lines(path: Path | None) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines() if path else []
    except OSError:
        return []


def tail(path: Path | None, lines: int = TAIL_LINES) -> list[str]:
    return read_lines(path)[-lines:]


def _body(line: str) -> str:
    """A log line without the process and logger prefix vLLM puts in front of it."""
    return line[_PREFIX.match(line).end() :]


def _continuation(lines: list[str], j: int) -> str:
    """The first sentence of the indented line right after an exception's header line, if any: where
    pydantic's ValidationError says what was wrong ('  Value error, Model architectures [...] are not
    supported for now. Supported architectures: ...')."""
    if j + 1 >= len(lines):
        return ""
    body = _body(lines[j + 1])
    if not body[:1].isspace() or not body.strip() or "Traceback (most recent call last)" in body:
        return ""
    text = body.strip().split(" [type=", 1)[0]  # pydantic appends the error's type and the whole input
    end = text.find(". ")
    return text[: end + 1] if end >= 0 else text


def root_cause(log_path: Path | None, exc: BaseException) -> tuple[str, str]:
    """(the line that says why, the log lines leading up to it) for an engine or server that failed.

    The root cause is the first traceback in the log that is not an "Exception ignored" notice: the
    worker's own error comes first, the wrappers re-raised by the engine core and this process later.
    When the exception's header line only announces its message (pydantic), the sentence on the next
    line is part of the reason and of the tail.
    """
    lines = read_lines(log_path)
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" not in line or (i and "Exception ignored" in lines[i - 1]):
            continue
        for j in range(i + 1, len(lines)):
            match = _EXCEPTION_LINE.search(lines[j])
            if match:
                more = _continuation(lines, j)
                last = j + 1 if more else j
                excerpt = "\n".join(lines[max(i, last - TAIL_LINES + 1) : last + 1])
                reason = f"{match.group(1)}: {match.group(2)}" + (f" {more}" if more else "")
                return shorten(reason), excerpt
    first = (str(exc).strip().splitlines() or [""])[0]
    return shorten(f"{type(exc).__name__}: {first}"), "\n".join(lines[-TAIL_LINES:])


def shorten(text: str, limit: int = MAX_REASON) -> str:
    """For display only: `text` cut to `limit` characters, saying so."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_text(error: BaseException) -> str:
    """Everything `error` says, vLLM's own words first (the exception it raised here, the whole log it
    names in `log_path`, long lines included), the message specgate wrapped them in last: a refusal
    vLLM logged anywhere can be matched, however long its line."""
    parts = [str(getattr(error, "detail", "") or ""), str(getattr(error, "log_tail", "") or "")]
    parts += read_lines(getattr(error, "log_path", None))
    parts.append(str(error))
    return "\n".join(p for p in parts if p)


def boot_overdue(kind: str, waited_s: float, message: str, method: str, log_path: Path) -> EngineBootError:
    """The error of a boot stopped at its deadline (`kind` 'boot') or for want of progress."""
    return EngineBootError(
        f"{message}. Engine log: {log_path}",
        log_tail="\n".join(tail(log_path)),
        method=method,
        log_path=log_path,
        reason=f"{'boot deadline' if kind == 'boot' else 'no progress'} after {waited_s:.0f} s",
    )


def boot_failed(exc: Exception, where: str, release: str, method: str, log_path: Path) -> EngineBootError:
    """The error of a boot that raised `exc`: vLLM's root cause from the log, what to check."""
    reason, lines = root_cause(log_path, exc)
    return EngineBootError(
        f"{where} failed to boot on {release}: {reason} Full engine log: {log_path}. Check the method's "
        "speculative_config and model paths in the profile, or leave the method out of the run's methods.",
        log_tail=lines,
        method=method,
        reason=reason,
        detail=f"{type(exc).__name__}: {exc}",
        log_path=log_path,
    )
