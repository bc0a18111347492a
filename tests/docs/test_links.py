"""Every relative link in the README, CHANGELOG and docs/ leads to a file that exists, and every anchor to a
heading of that file: a moved section or a renamed page breaks a test, not a reader's click."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, anchors, markdown_files, strip_code

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _links(path: Path) -> list[str]:
    return [target for target in LINK.findall(strip_code(path.read_text()))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked here


@pytest.mark.parametrize("page", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert page.is_file(), f"{page.relative_to(ROOT)} is missing"
    broken = []
    for target in _links(page):
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_links_every_guide_and_results_page() -> None:
    """One click from the front page to each guide, the command index, the results index and the architecture."""
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in _links(ROOT / "README.md")}
    wanted = {*(ROOT / "docs" / "guides").glob("*.md"), ROOT / "docs" / "commands" / "README.md",
              ROOT / "docs" / "results" / "README.md", ROOT / "docs" / "architecture.md", ROOT / "CHANGELOG.md"}
    missing = sorted(str(p.relative_to(ROOT)) for p in wanted if p.resolve() not in linked)
    assert not missing, f"README.md does not link {missing}"


def test_anchors_follow_githubs_rules() -> None:
    """The anchor rule the link check relies on, on headings this documentation has."""
    text = "# A five-minute tour\n## check: will TensorRT accept this graph?\n## `trtpipe run`\n## Dup\n## Dup\n"
    assert anchors(text) == {"a-five-minute-tour", "check-will-tensorrt-accept-this-graph", "trtpipe-run", "dup",
                             "dup-1"}
