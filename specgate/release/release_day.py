"""A new CUDA vLLM release met in one go (`specgate release-day R`): its sources fetched, the contract and
V2 sampler property suites run against them, and what changed for speculative decoding since the last
supported release, with what a runner's owner must do, as one report.

Exit codes (EXIT_*): 0 the report is printed and every suite that ran passed; 1 the report is printed
and a suite failed or could not run (the release needs suite work before runners move to it); 2 bad
input: not a release number, a release PyPI does not have, an unpacked tree that is not one, no earlier
supported release to compare with; 3 PyPI cannot be reached (no network). 2 and 3 print one paragraph.

Neighbours: below are vllm_tree / vllm_facts / vllm_speculators (reading a tree), changes (the
comparison), advice (the to-do list), suites (the pytest runs), sampler.cuda_sources (fetching), profile/
(the GPU profiles), run.scenarios and figures.acceptance (what the suite assumes); above, cli/release_day.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from specgate.errors import SpecgateError
from specgate.release import advice, changes, suites, vllm_facts
from specgate.release.vllm_tree import Tree
from specgate.sampler import cuda_sources
from specgate.vllm_compat import releases
from specgate.vllm_compat.releases import version_key

EXIT_OK, EXIT_SUITE_FAILED, EXIT_USAGE, EXIT_OFFLINE = 0, 1, 2, 3
OFFLINE = re.compile(
    r"NewConnectionError|Failed to establish a new connection|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|No route to host|ConnectTimeout|ProxyError|"
    r"Max retries exceeded|Connection refused|Could not fetch URL"
)
NOT_FOUND = re.compile(r"from versions: ([^)]*)\)")
# The project's files whose environment advice is checked (docs/vllm-releases.md is the record of what
# releases did, not advice).
ADVICE_FILES = (
    "README.md",
    "docs/*.md",
    "ci/*.sh",
    "ci/workflows/*.yml",
    "fixtures/profiles/*.toml",
    "specgate/**/*.py",
)
RECORD = "docs/vllm-releases.md"


class ReleaseDayError(SpecgateError):
    """The release or its sources cannot be used: the message says which and what to do."""

    exit_code = EXIT_USAGE


class Offline(ReleaseDayError):
    exit_code = EXIT_OFFLINE


def last_supported(before: str) -> str:
    """The newest supported CUDA release older than `before` ('' when none): what a release is compared with
    (specgate.vllm_compat.releases, the one table of supported releases)."""
    return next((r.version for r in releases.supported(releases.CUDA) if r.key < version_key(before)), "")


@dataclass
class Day:
    release: str
    since: str
    trees: dict[str, Path]
    fetched: dict[str, float] = field(default_factory=dict)  # release -> seconds it took to fetch
    suites: list[suites.Suite] = field(default_factory=list)
    sections: list[changes.Section] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT_OK if all(s.ok for s in self.suites) else EXIT_SUITE_FAILED


def checked(release: str, what: str = "RELEASE") -> str:
    if not re.fullmatch(r"\d+\.\d+\.\d+", release):
        raise ReleaseDayError(
            f"specgate release-day: {what} {release!r} is not a vLLM release number; give one like 0.34.0."
        )
    return release


def sources(release: str) -> tuple[Path, float]:
    """The release's unpacked tree (fetched when missing) and the seconds the fetch took (0: already here)."""
    checked(release)
    if not cuda_sources.missing(release):
        return cuda_sources.tree(release), 0.0
    start = time.monotonic()
    try:
        tree = cuda_sources.fetch(release)
    except cuda_sources.FetchError as exc:
        raise _why_not(release, exc) from None
    return tree, time.monotonic() - start


def _why_not(release: str, exc: cuda_sources.FetchError) -> ReleaseDayError:
    quoted = next((line.strip() for line in exc.output.splitlines() if OFFLINE.search(line)), "")
    listed = NOT_FOUND.search(exc.output)
    if not quoted and listed and listed.group(1).strip() == "none":
        quoted = f"{listed.group(0)}: its index lists no vllm at all"
    if quoted:
        return Offline(
            f"specgate release-day: PyPI could not be reached to download vLLM {release}'s wheel (no network, or "
            f"a proxy in the way); pip said: {quoted[:300]}. Run it again where pip can reach PyPI, or unpack the "
            f"wheel's .py files and dist-info by hand into {cuda_sources.tree(release)} (or point "
            "$SPECGATE_VLLM_CUDA_SRC at a directory that holds it)."
        )
    if listed:
        known = [v.strip() for v in listed.group(1).split(",") if re.fullmatch(r"\d+\.\d+\.\d+", v.strip())]
        newest = ", ".join(known[-5:]) or "none"
        return ReleaseDayError(
            f"specgate release-day: vLLM {release} is not on PyPI (pip download found no wheel for "
            f"vllm=={release}; the newest releases there: {newest}). Check the number "
            "(`pip index versions vllm`)."
        )
    return ReleaseDayError(f"specgate release-day: {exc}. pip's whole output:\n{exc.output.strip()}")


def profiles(root: Path) -> list[advice.ProfileUse]:
    """The GPU profiles of the checkout (a CUDA release is what their runners install)."""
    from specgate.profile import load_profile

    out = []
    for path in sorted((root / "fixtures" / "profiles").glob("*.toml")):
        profile = load_profile(path, root)
        if profile.hardware == "cuda":
            out.append(
                advice.ProfileUse(
                    str(path.relative_to(root)),
                    {name: dict(m.speculative_config) for name, m in profile.methods.items()},
                    dict(profile.engine_kwargs),
                    dict(profile.engine_env),
                )
            )
    return out


def suite_use(root: Path, dropped: set[str]) -> advice.SuiteUse:
    """What the suite's own code assumes: its KV block size, the counters it reads, the packages it checks."""
    from specgate.figures.acceptance import COUNTER_NAMES, PER_POSITION
    from specgate.run.scenarios import DEFAULT_BLOCK_SIZE

    places: dict[str, list[str]] = {}
    files = [*(root / "specgate").rglob("*.py"), *(root / "ci").glob("*.sh"), root / "pyproject.toml"]
    for path in sorted(p for p in files if p.is_file() and p.parent != root / "specgate" / "release"):
        for package in dropped:
            lines = [
                str(number)
                for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                if package in line or package.replace("_", "-") in line
            ]
            if lines:
                places.setdefault(package, []).append(f"{path.relative_to(root)}:{','.join(lines)}")
    return advice.SuiteUse(
        block_size=(DEFAULT_BLOCK_SIZE["cuda"], "specgate/run/scenarios.py DEFAULT_BLOCK_SIZE['cuda']"),
        counters=((*COUNTER_NAMES, PER_POSITION), "specgate/figures/acceptance.py"),
        package_mentions={k: tuple(v) for k, v in places.items()},
    )


def advice_files(root: Path) -> list[Path]:
    found = {p for pattern in ADVICE_FILES for p in root.glob(pattern) if p.is_file()}
    return sorted(found - {root / RECORD})


def prepare(release: str, root: Path, *, since: str = "") -> Day:
    """The sources of both releases (fetched when missing), the changes between them and the to-do list."""
    start = time.monotonic()
    checked(release)
    since = checked(since, "--since") if since else last_supported(release)
    if not since:
        raise ReleaseDayError(
            f"specgate release-day: no supported CUDA release older than {release} to compare it with "
            f"(supported: {', '.join(r.version for r in releases.supported(releases.CUDA))}); give one with --since."
        )
    if version_key(since) >= version_key(release):
        raise ReleaseDayError(f"specgate release-day: --since {since} is not older than {release}.")
    day = Day(release, since, {})
    for r in (since, release):
        day.trees[r], seconds = sources(r)
        if seconds:
            day.fetched[r] = seconds
    old, new = (vllm_facts.read(Tree(day.trees[r])) for r in (since, release))
    used = profiles(root)
    args = sorted({k for p in used for k in p.engine_kwargs} | {"num_gpu_blocks_override", "block_size"})
    day.sections = changes.compare(old, new, tuple(args))
    day.unread = [f"{f.release}: {line}" for f in (old, new) for line in f.unread]
    day.todo = advice.todo(
        old,
        new,
        used,
        advice.mentions(root, advice_files(root)),
        suite_use(root, set(old.requirements) - set(new.requirements)),
        advice.broken_internals(day.trees[since], day.trees[release]),
    )
    day.seconds = time.monotonic() - start
    return day


def run_suite(day: Day, name: str, plan: suites.Plan) -> suites.Suite:
    """One suite against the new release's tree, added to the day."""
    suite = suites.run(name, day.release, day.trees[day.release], plan)
    day.suites.append(suite)
    day.seconds += suite.seconds
    return suite
