"""The documentation files the docs tests read: the README, CHANGELOG and every page under docs/."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def markdown_files() -> list[Path]:
    """Every Markdown file a reader reaches from the README (docs/ included)."""
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def strip_code(text: str) -> str:
    """The text outside fenced code blocks and inline code spans (links there are not links)."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: formatting dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, numbered as GitHub numbers repeated headings."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        number = counts.get(base, 0)
        counts[base] = number + 1
        found.add(base if number == 0 else f"{base}-{number}")
    return found


def console_commands(text: str) -> list[str]:
    """The `$ ...` lines of every ```console block, in order: the examples a reader can paste."""
    commands = []
    for block in re.findall(r"^```console\n(.*?)^```", text, flags=re.M | re.S):
        commands += [line[2:].strip() for line in block.splitlines() if line.startswith("$ ")]
    return commands
