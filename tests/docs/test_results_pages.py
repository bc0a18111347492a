"""Every table on a results page says when it was measured: the section holding it (from its heading to the next)
names a date, so a figure can always be read against the code of its day. The machine and the command are in the
same prose; a date is the part a test can check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT

DATE = re.compile(r"\b20\d\d-\d\d(-\d\d)?\b|\brecorded before 20\d\d-\d\d-\d\d\b")
PAGES = sorted(p for p in (DOCS / "results").glob("*.md") if p.name != "README.md")


def _sections(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.split(r"^## ", text, flags=re.M)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_is_dated(page: Path) -> None:
    undated = [section.splitlines()[0] for section in _sections(page.read_text())
               if re.search(r"^\|---", section, flags=re.M) and not DATE.search(section)]
    assert not undated, f"{page.relative_to(ROOT)}: sections with a table and no date: {undated}"


def test_the_results_index_lists_every_page() -> None:
    index = (DOCS / "results" / "README.md").read_text()
    missing = [p.name for p in PAGES if f"]({p.name})" not in index]
    assert not missing, f"docs/results/README.md does not list {missing}"


def test_the_codes_citations_of_the_docs_resolve() -> None:
    """A docstring or comment that cites a docs page (``docs/results/int8-design.md, 'Depthwise scaling'``) names a
    page that exists and, where it quotes a section, a heading of that page that begins with the quote."""
    cite = re.compile(r"(docs/[\w/.-]+\.md)(?:, '([^']+)')?")
    broken = []
    for path in sorted((ROOT / "trtpipe").rglob("*.py")):
        text = re.sub(r"\n\s*#?\s*", " ", path.read_text())  # a citation may wrap across lines
        for page, section in cite.findall(text):
            target = ROOT / page
            if not target.is_file():
                broken.append(f"{path.relative_to(ROOT)}: {page} does not exist")
                continue
            headings = [line.lstrip("#").strip().replace("`", "") for line in target.read_text().splitlines()
                        if line.startswith("#")]
            if section and not any(h.startswith(section.replace("`", "")) for h in headings):
                broken.append(f"{path.relative_to(ROOT)}: no section '{section}' in {page}")
    assert not broken, "; ".join(broken)
