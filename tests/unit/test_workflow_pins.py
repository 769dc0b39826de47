"""Every action in ci/workflows/ is pinned by commit (a 40-hex SHA with its tag in a comment), and zizmor's
offline audits at its default persona find nothing. Bumping a pin: README, "Self-hosted GPU runners"."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / "ci" / "workflows"
ALL_WORKFLOWS = sorted(WORKFLOWS.glob("*.yml"))

USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<rest>.*)$")
PINNED = re.compile(r"(?P<action>[\w.-]+/[\w.-]+(?:/[\w.-]+)*)@(?P<sha>[0-9a-f]{40}) # (?P<tag>v\d+(?:\.\d+){0,2})")


def uses_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text after `uses:`) for every `uses:` line of the file, comment included."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = USES_LINE.match(line)
        if m:
            found.append((number, m.group("rest").rstrip()))
    return found


def parsed_uses(path: Path) -> list[str]:
    """The `uses:` values YAML sees (steps and reusable-workflow jobs), to check that no line escaped the scan."""
    values = []
    for job in yaml.safe_load(path.read_text(encoding="utf-8"))["jobs"].values():
        if "uses" in job:
            values.append(job["uses"])
        values += [step["uses"] for step in job.get("steps", []) if "uses" in step]
    return values


def test_the_workflows_use_actions():
    assert ALL_WORKFLOWS and any(uses_lines(p) for p in ALL_WORKFLOWS)


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit_with_its_tag_in_a_comment(path):
    lines = uses_lines(path)
    bad = [f"{path.name}:{n}: uses: {rest}" for n, rest in lines if not PINNED.fullmatch(rest)]
    assert not bad, "not `owner/repo[/path]@<40-hex sha> # v<tag>`:\n" + "\n".join(bad)
    from_lines = sorted(PINNED.fullmatch(rest).group("action", "sha") for _, rest in lines)
    from_yaml = sorted(tuple(value.split("@", 1)) for value in parsed_uses(path))
    assert from_lines == from_yaml, "a `uses:` the line scan did not see (quoted or flow style?)"


def test_one_action_and_tag_has_one_commit_across_the_workflows():
    """A bumped pin is bumped everywhere: the same action at the same tag names the same commit."""
    seen: dict[tuple[str, str], set[str]] = {}
    for path in ALL_WORKFLOWS:
        for _, rest in uses_lines(path):
            m = PINNED.fullmatch(rest)
            if m:
                seen.setdefault((m["action"], m["tag"]), set()).add(m["sha"])
    split = {f"{action}@{tag}": sorted(shas) for (action, tag), shas in seen.items() if len(shas) > 1}
    assert not split, split


def _zizmor() -> str | None:
    # The venv's own (the dev extra installs it next to the interpreter), else one on PATH.
    beside = Path(sys.executable).parent / "zizmor"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("zizmor")


def test_zizmor_offline_finds_nothing():
    exe = _zizmor()
    if exe is None:
        pytest.skip("zizmor is not installed (pip install zizmor; it is in the dev extra)")
    # No ZIZMOR_* settings from the caller's environment: the default persona, offline, every file parsed.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZIZMOR_")}
    env["NO_COLOR"] = "1"
    # Files, not the folder: zizmor collects a folder's workflows from .github/workflows/ only.
    cmd = [exe, "--offline", "--strict-collection", "--no-progress", "--color", "never", *map(str, ALL_WORKFLOWS)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, f"zizmor exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    assert "No findings to report" in proc.stdout, proc.stdout + proc.stderr
