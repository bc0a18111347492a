"""The guides' next commands work as written from the repository root: what `trtpipe run` writes for a bundled
pipeline file is where the following `trtpipe report ...` and `trtpipe serve ...` lines of the same pages look,
under the current folder and never beside the file inside the package (issue 47: `run` once wrote
trtpipe/pipeline/examples/models/, and the guide's next command failed)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.docs.pages import DOCS, ROOT
from trtpipe.pipeline.config import load_pipeline

PAGES = (ROOT / "README.md", DOCS / "guides" / "pipeline.md")


def _commands(page: Path) -> list[list[str]]:
    """Every `trtpipe ...` command a page shows, in code blocks and inline code, as words (comments dropped)."""
    text = page.read_text()
    lines = [line for block in re.findall(r"^```\w*\n(.*?)^```", text, flags=re.M | re.S)
             for line in block.splitlines()] + re.findall(r"`(trtpipe [^`]+)`", text)
    found = []
    for line in lines:
        line = line.removeprefix("$ ").split("  #")[0].strip()
        if line.startswith("trtpipe ") and len(shlex.split(line)) > 2:  # a command with its arguments
            found.append(shlex.split(line))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_report_and_serve_lines_name_what_the_runs_before_them_wrote(page: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    commands = _commands(page)
    runs = [load_pipeline(Path(words[2]), out=Path(words[words.index("--out") + 1]) if "--out" in words else None)
            for words in commands if words[1] == "run" and words[2].endswith(".toml")]
    assert runs, f"{page.name} runs no pipeline file"
    package = (ROOT / "trtpipe").resolve()
    for pipeline in runs:
        for written in (pipeline.output.repository, pipeline.output.reports):
            assert package not in written.resolve().parents, f"{page.name}: a run writes {written} inside the package"
    repositories = {p.output.repository for p in runs}
    results = {p.output.reports / p.name / "bench.json" for p in runs}
    for words in commands:
        if words[1] == "serve":
            assert Path(words[2]) in repositories, f"{page.name}: `trtpipe serve {words[2]}` serves what no run wrote"
        if words[1] == "report" and words[2].startswith("reports/"):
            assert Path(words[2]) in results, f"{page.name}: `trtpipe report {words[2]}` reads what no run wrote"
