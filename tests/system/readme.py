"""The commands README.md shows, read from its fenced code blocks.

Every fenced block names its language: `bash` blocks hold commands (one per line, `# ...` comments
after them), `toml` and `text` blocks hold files and pictures. A documented command is a line of a
`bash` block; A test registers the command it runs, as README shows it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LANGUAGES = ("bash", "toml", "text")


def blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line number of the opening fence, language, lines) of each fenced block."""
    out, current = [], None
    for n, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            if current is None:
                current = (n, line[3:].strip(), [])
            else:
                out.append(current)
                current = None
        elif current is not None:
            current[2].append(line)
    return out


def commands(text: str | None = None) -> list[str]:
    """Every command line of README's `bash` blocks, its trailing comment removed."""
    text = README.read_text(encoding="utf-8") if text is None else text
    found = []
    for _, language, lines in blocks(text):
        if language == "bash":
            found += [c for line in lines if (c := re.sub(r"\s+#\s.*$", "", line).strip())]
    return found


def unlabelled(text: str | None = None) -> list[int]:
    """Opening fences without one of LANGUAGES: a reader (and this test) cannot tell a command from a picture."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return [n for n, language, _ in blocks(text) if language not in LANGUAGES]


def key(line: str) -> str:
    """A command as the registry names it: as README shows it, blanks collapsed."""
    return " ".join(line.split())
