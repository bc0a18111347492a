"""Folders of a model repository that are not served are skipped with a warning naming them and why."""

from __future__ import annotations

import shutil
from pathlib import Path

from trtpipe import console
from trtpipe.serve.repository.loading import discover


def test_folders_that_are_not_served_are_named_with_the_reason(digits_onnx: Path, tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    for folder in ("real/1", "bad name!/1", ".hidden/1", "new\nline/1", "real/²", "real/latest", "real/2"):
        (repository / folder).mkdir(parents=True, exist_ok=True)
    for folder in ("real/1", "bad name!/1", ".hidden/1", "new\nline/1", "real/²"):
        shutil.copy(digits_onnx, repository / folder / "model.onnx")
    with console.recording_warnings() as warnings:
        found = discover(repository)
    assert found == {"real": [("1", repository / "real" / "1" / "model.onnx")]}
    said = "\n".join(warnings)
    assert f"{repository / 'bad name!'} is not a safe model name" in said
    assert f"{repository / '.hidden'} is a hidden folder" in said
    assert repr(str(repository / "new\nline")) in said  # escaped: a name cannot forge a log line
    assert f"{repository / 'real' / '²'} is not a version folder" in said  # isdigit() but not a number
    assert f"{repository / 'real' / 'latest'} is not a version folder" in said
    assert f"{repository / 'real' / '2'} holds no model" in said
    assert len(warnings) == 6
