"""Where an engine's sockets go. vLLM binds its ZeroMQ sockets as files named by a uuid4 under
VLLM_RPC_BASE_PATH (by default the temp directory) and never removes them (utils/network_utils.py
get_open_zmq_ipc_path, 0.32.0): ~7 files an engine, ~470 in /tmp after one `.ci/run`. Each engine or
server of a run gets a directory of its own, named after the run's process, removed when it stops, or by
the run's reaper once the run has ended without removing it (SIGKILL)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "specgate-ipc-"
# A socket's path must fit sockaddr_un.sun_path (108 bytes on Linux, with its NUL): "/" + a uuid4 (37
# characters) under the directory.
_SUN_PATH_MAX, _SOCKET_NAME = 107, 37


def _bases() -> list[str]:
    return list(dict.fromkeys((tempfile.gettempdir(), "/tmp")))


def make(owner: int | None = None) -> Path | None:
    """A new directory for one engine's or server's sockets, in the temp directory, or in /tmp where the
    temp directory's path is too long for a socket's; None (vLLM's default) where neither fits."""
    prefix = f"{PREFIX}{owner or os.getpid()}-"
    for base in _bases():
        fits = len(base) + 1 + len(prefix) + 8 + _SOCKET_NAME <= _SUN_PATH_MAX  # mkdtemp adds 8 characters
        if fits and os.access(base, os.W_OK):
            return Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    return None


def remove(directory: Path | None) -> None:
    """Remove an engine's directory, after its processes have ended."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def remove_owned(owner: int) -> None:
    """Remove every directory the process `owner` made (the reaper, after that process has ended)."""
    for base in _bases():
        for directory in Path(base).glob(f"{PREFIX}{owner}-*"):
            remove(directory)
