"""The release-day report as text (Markdown that reads as plain text in a terminal): the releases and
their trees, what changed section by section, what could not be read, the runner owner's to-do list,
each suite's counts, failures and time, and the verdict with its exit code.

Neighbours: release_day computes the Day; cli/release_day prints these parts as they are ready.
"""

from __future__ import annotations

from pathlib import Path

from specgate.release.release_day import EXIT_OK, Day
from specgate.release.suites import Suite

MAX_FAILURES = 40  # failing tests listed per suite; the rest are counted (the JUnit file has them all)


def _shown(path: Path, root: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def header(day: Day, root: Path, since_given: bool) -> str:
    chosen = "--since" if since_given else "the newest supported release before it (specgate/vllm_compat/releases.py)"
    trees = "; ".join(
        f"{r}: {_shown(t, root)}" + (f" (fetched in {day.fetched[r]:.0f} s)" if r in day.fetched else " (here already)")
        for r, t in day.trees.items()
    )
    return (
        f"# vLLM {day.release} release day\n\n"
        f"Compared with vLLM {day.since}: {chosen}. Sources, read with ast (nothing imported): {trees}.\n"
    )


def changes(day: Day) -> str:
    out = ["", f"## What changed for speculative decoding, {day.since} -> {day.release}"]
    for section in day.sections:
        out += ["", f"### {section.title}", ""]
        out += [f"- {line}" for line in section.lines] or ["- unchanged"]
    out += ["", "### not read from the sources", ""]
    out += [f"- {line}" for line in day.unread] or ["- nothing: every section above was found in both trees"]
    out += ["", f"## What a runner's owner must do before moving to {day.release}", ""]
    out += [f"- {line}" for line in day.todo] or ["- nothing found in the profiles, the docs or the suite's code"]
    return "\n".join(out) + "\n"


def suite(s: Suite) -> str:
    title = {"contract": "contract suite (tests/contract)", "properties": "V2 sampler property suite (tests/property)"}
    out = [f"\n### {title.get(s.name, s.name)}: {s.counts()} in {s.seconds:.0f} s\n", f"`{s.command}`"]
    if not s.junit:
        out.append(f"\npytest wrote no JUnit file (exit {s.returncode}); the end of its output:\n")
        out += [f"    {line}" for line in s.tail.splitlines()]
        return "\n".join(out) + "\n"
    if s.failures:
        out.append("")
        out += [f"- {test}: {first}" for test, first in s.failures[:MAX_FAILURES]]
        if len(s.failures) > MAX_FAILURES:
            out.append(f"- ... and {len(s.failures) - MAX_FAILURES} more ({s.junit})")
    if s.skip_reasons and not s.failures and not s.passed:
        out.append(f"\nevery test skipped; the first reason: {s.skip_reasons[0]}")
    return "\n".join(out) + "\n"


def suites_heading(day: Day) -> str:
    return f"\n## The suites on vLLM {day.release}\n"


def verdict(day: Day, skipped: list[str]) -> str:
    ran = ", ".join(f"{s.name} {'passed' if s.ok else 'FAILED'}" for s in day.suites) or "no suite ran"
    skipped_text = f"; not run: {', '.join(skipped)}" if skipped else ""
    meaning = (
        "the suite supports this release as far as these suites see"
        if day.exit_code == EXIT_OK
        else "the suite needs work before runners move to this release"
    )
    return (
        f"\n## Verdict\n\n{ran}{skipped_text}: {meaning} (exit {day.exit_code}). "
        f"{len(day.todo)} to-do items. Wall time {day.seconds:.0f} s"
        + (f" ({', '.join(f'{s.name} {s.seconds:.0f} s' for s in day.suites)})" if day.suites else "")
        + ".\n"
    )
