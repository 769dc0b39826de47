"""README.md and docs/ point where they say: every relative link and `docs/*.md` path README names exists,
and docs/profile-reference.md names every key a profile may set (a key added to specgate/profile/ without a
line there fails here)."""

from __future__ import annotations

import re
from pathlib import Path

from specgate.profile.plants import PLANTS
from specgate.profile.schema import key_of, settings
from specgate.profile.spec import Method, Profile
from specgate.profile.tables import KnownIssue

ROOT = Path(__file__).resolve().parents[2]


def test_readmes_links_and_docs_paths_exist():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    named = re.findall(r"\bdocs/[\w.-]+\.md\b", text)
    targets = [t for t in links if not re.match(r"[a-z]+://", t)] + named
    assert targets, "README.md links nothing: the test reads it wrongly"
    missing = sorted({t for t in targets if not (ROOT / t).exists()})
    assert not missing, f"README.md points at files that do not exist: {missing}"


def _keys(cls, prefix: str) -> list[str]:
    out = []
    for f in settings(cls):
        key = prefix + key_of(f)
        out.append(key)
        table = f.metadata["table"]
        if table is not None:
            out += _keys(table, key + ".")
    return out


def test_the_profile_reference_names_every_key():
    text = (ROOT / "docs" / "profile-reference.md").read_text(encoding="utf-8")
    keys = _keys(Profile, "") + _keys(KnownIssue, "known_issues.ID.") + _keys(Method, "methods.NAME.")
    assert len(keys) > 80, keys
    tables = {"tolerance", "equivalence", "speedup", "scenarios"}  # whole tables: their keys are listed
    missing = [k for k in keys if k not in tables and f"`{k}`" not in text]
    assert not missing, f"docs/profile-reference.md, 'Every key', lacks: {missing}"


def test_the_profile_reference_lists_every_plant():
    text = (ROOT / "docs" / "profile-reference.md").read_text(encoding="utf-8")
    section = text.split("## Plants", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)(?::\w+)?` \|", section, re.M))
    assert listed == set(PLANTS), f"docs/profile-reference.md, 'Plants': {sorted(listed ^ set(PLANTS))}"
