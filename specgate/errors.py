"""Exceptions raised by specgate.

    SpecgateError                  anything the user can fix: the message says what and how
    ├── ProfileError               a profile TOML is malformed or names something that does not exist
    ├── PromptSetError             a prompt JSONL file is malformed or looks like random tokens
    ├── ZooError                   an embedded model is missing or corrupt
    ├── BaselineError              a stored baseline file is malformed, truncated or of another schema
    ├── EngineBootError            vLLM refused to start an engine; carries the tail of its log
    ├── EngineDied                 a running engine died (a crash at a verification step, a kill,
    │   │                          out of memory): which process, its exit, vLLM's own error
    │   └── EngineStalled          a running engine made no progress for stall_timeout_s: what it
    │                              was doing, where its stacks are; its processes were stopped
    ├── EndpointError              (endpoint.py) a server the run was pointed at is unreachable or not vLLM
    ├── ResultsError               a results directory, its measurements or its run record (run.json) is
    │                              missing, corrupt or of another schema
    └── NotMeasurable              this run cannot measure it (e.g. memory of a remote server): a skip

Every message is one paragraph naming the file or setting at fault and what to do about it, so the
plugin can print it without a stack trace (a setting as the caller spells it: specgate.settings).
"""

from __future__ import annotations

__all__ = [  # the public surface (specgate.PUBLIC)
    "BaselineError",
    "EngineBootError",
    "EngineDied",
    "EngineStalled",
    "NotMeasurable",
    "ProfileError",
    "PromptSetError",
    "ResultsError",
    "SpecgateError",
    "ZooError",
]


class SpecgateError(Exception):
    """Base class: a problem the user can fix, described in the message."""


class ProfileError(SpecgateError):
    """Raised when a profile file cannot be parsed or validated."""


class PromptSetError(SpecgateError):
    """Raised when a prompt set cannot be loaded or fails validation."""


class ZooError(SpecgateError):
    """Raised when an embedded (zoo) model is missing or cannot be loaded."""


class BaselineError(SpecgateError):
    """Raised when a stored baseline file cannot be read or does not match the schema."""


class EngineBootError(SpecgateError):
    """Raised when an engine fails to boot; `log_tail` holds the last lines the engine printed and
    `log_path` names its whole log."""

    def __init__(
        self,
        message: str,
        log_tail: str = "",
        method: str = "",
        reason: str = "",
        detail: str = "",
        repeat: bool = False,
        log_path=None,
    ):
        super().__init__(message)
        self.log_tail = log_tail
        self.log_path = log_path
        self.method = method
        self.reason = reason  # the engine's own one-line error
        self.detail = detail  # the full text of the exception vLLM raised in this process
        self.repeat = repeat  # a later test of the same method: said in one line, the first has the log

    def again(self) -> EngineBootError:
        """The same failure for the method's later tests, in one line."""
        return type(self)(
            f"not judged: the engine for method '{self.method}' did not boot ({self.reason}); see this method's "
            "first failure for the engine log",
            self.log_tail,
            self.method,
            self.reason,
            self.detail,
            repeat=True,
            log_path=self.log_path,
        )


class EngineDied(SpecgateError):
    """Raised when a running engine dies; the message names the process, its exit and vLLM's error."""

    def __init__(self, message: str, method: str = "", reason: str = "", repeat: bool = False):
        super().__init__(message)
        self.method = method
        self.reason = reason  # vLLM's own one-line error, or how the process ended
        self.repeat = repeat

    happened = "died"

    def again(self) -> EngineDied:
        return type(self)(
            f"not judged: the engine for method '{self.method}' {self.happened} earlier in this run ({self.reason}); "
            "see this method's first failure for the processes and the log",
            self.method,
            self.reason,
            repeat=True,
        )


class EngineStalled(EngineDied):
    """Raised when a running engine (or server) made no progress for the profile's stall_timeout_s;
    its processes were stopped after their stacks were written next to its log."""

    happened = "was stopped for making no progress"


class ResultsError(SpecgateError):
    """Raised when a results directory, its measurements table or its run.json is missing, corrupt, or
    of a schema this specgate does not read; the message names the file and what to do."""


class NotMeasurable(SpecgateError):
    """Raised when this kind of run cannot measure something at all; the tests skip with the message."""
