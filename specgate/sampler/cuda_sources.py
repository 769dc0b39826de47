"""CUDA vLLM's Python sources, unpacked next to the checkout: `.venvs/vllm-cuda-src/<release>/`.

Model Runner V2's sampler is Python and Triton, so a CUDA wheel's `.py` files are enough to run it on
a CPU in Triton's interpreter (specgate.sampler.v2) and to read its internals without importing
them (tests/contract/, `SPECGATE_VLLM_SOURCE=DIR`). `python -m specgate.sampler.cuda_sources [RELEASE ...]`
(run by ci/setup-cpu.sh; without releases: every CUDA release of specgate/vllm_compat/releases.py)
fetches each release once: `pip download --no-deps vllm==R`, then only the `.py` files and the
dist-info are kept (about 60 MB per release). `$SPECGATE_VLLM_CUDA_SRC` moves the cache.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from specgate.vllm_compat import releases

# the CUDA releases the suite supports, oldest first (specgate/vllm_compat/releases.py)
RELEASES = tuple(r.version for r in reversed(releases.supported(releases.CUDA)))
HOW_TO_FETCH = "run ci/setup-cpu.sh (or python -m specgate.sampler.cuda_sources RELEASE)"
# The releases the property suite runs Model Runner V2's sampler from, when not RELEASES: e.g. a new
# release before it is supported (`specgate release-day` sets it).
RELEASES_VARIABLE = "SPECGATE_CUDA_RELEASES"


class FetchError(RuntimeError):
    """`pip download` could not fetch a release's wheel; `output` is everything pip said."""

    def __init__(self, release: str, output: str):
        self.release, self.output = release, output
        last = [line for line in output.strip().splitlines() if line.strip()][-1:] or ["(no output)"]
        super().__init__(f"pip could not download vllm=={release}: {last[0].strip()}")


def under_test() -> tuple[str, ...]:
    """The CUDA releases the property suite runs V2's sampler from: $SPECGATE_CUDA_RELEASES (comma-separated),
    else RELEASES."""
    chosen = [r.strip() for r in os.environ.get(RELEASES_VARIABLE, "").split(",") if r.strip()]
    return tuple(chosen) or RELEASES


def root() -> Path:
    if os.environ.get("SPECGATE_VLLM_CUDA_SRC"):
        return Path(os.environ["SPECGATE_VLLM_CUDA_SRC"])
    checkout = Path(__file__).resolve().parents[2]
    base = checkout if (checkout / "pyproject.toml").is_file() else Path.cwd()
    return base / ".venvs" / "vllm-cuda-src"


def tree(release: str) -> Path:
    """Where `release`'s sources are (or would be) unpacked; `vllm/` lies directly inside."""
    return root() / release


def missing(release: str) -> str:
    """'' when `release`'s sources are here, else what is missing and how to fetch it."""
    if release_of(tree(release)) == release and (tree(release) / "vllm" / "__init__.py").is_file():
        return ""
    return f"vLLM {release}'s CUDA sources are not in {tree(release)}: {HOW_TO_FETCH.replace('RELEASE', release)}"


def release_of(source: Path) -> str:
    """The release of an unpacked tree, from its dist-info directory ('' when it has none)."""
    for info in sorted(Path(source).glob("vllm-*.dist-info")):
        if m := re.fullmatch(r"vllm-(.+)\.dist-info", info.name):
            return m.group(1)
    return ""


def fetch(release: str) -> Path:
    """Unpack `release`'s Python files into tree(release) unless they are there already."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", release):
        raise ValueError(f"a vLLM release looks like 0.33.0, got {release!r}")
    target = tree(release)
    if not missing(release):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".fetch-{release}-") as tmp:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "-d",
                tmp,
                f"vllm=={release}",
            ],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise FetchError(release, proc.stdout + proc.stderr)
        (wheel,) = Path(tmp).glob("vllm-*.whl")
        staging = Path(tmp) / "tree"
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".py") or ".dist-info/" in name:
                    archive.extract(name, staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)  # whole or not at all: an interrupted fetch leaves only the temporary directory
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specgate.sampler.cuda_sources", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "releases",
        nargs="*",
        default=list(RELEASES),
        metavar="RELEASE",
        help=f"CUDA vLLM releases to unpack (default: {' '.join(RELEASES)})",
    )
    for release in parser.parse_args(argv).releases:
        try:
            print(f"vllm_source: vLLM {release}'s Python sources in {fetch(release)}")
        except FetchError as exc:
            print(f"vllm_source: {exc}\n{exc.output}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
