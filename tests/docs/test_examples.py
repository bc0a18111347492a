"""The documented commands run: every `$ trtpipe ...` line of a ```console block in the README and docs/ is run,
in order, in a fresh folder per page, on the bundled digits model, and must exit 0 (as Polygraphy's test suite
runs its examples' READMEs). Pages say which files a block expects: the README's tour makes its own; the guides'
blocks start from `digits.onnx`, which `trtpipe convert digits_resnet -o digits.onnx` writes (copied in here from
the session's converted model). Blocks marked ```bash are not run: they need files of a user's own, a GPU or
minutes."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.docs.pages import ROOT, console_commands, markdown_files
from trtpipe.cli import main

PAGES = [page for page in markdown_files() if page.is_file() and console_commands(page.read_text())]


def test_the_readme_and_the_guides_have_runnable_examples() -> None:
    names = {str(page.relative_to(ROOT)) for page in PAGES}
    assert "README.md" in names
    assert len(names) >= 4, names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_exit_0(page: Path, digits_onnx: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(digits_onnx, tmp_path / "digits.onnx")
    shutil.copy(digits_onnx.with_suffix(".manifest.json"), tmp_path / "digits.manifest.json")
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for command in console_commands(page.read_text()):
        words = shlex.split(command)
        assert words[0] == "trtpipe", f"{page.name}: a console example that is not a trtpipe command: {command}"
        result = runner.invoke(main, words[1:])
        assert result.exit_code == 0, f"{page.relative_to(ROOT)}: `{command}` exited {result.exit_code}:\n" \
                                      f"{result.output[-3000:]}\n{result.exception!r}"
