"""DATA parsed once: the optimize stage and the pipeline's cache read a spec the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from trtpipe.models.data_spec import DataKind, DataSpec
from trtpipe.pipeline.cache import data_identity


@pytest.mark.parametrize(("text", "expected"), [
    ("digits", DataSpec(DataKind.DIGITS)),
    ("digits:train", DataSpec(DataKind.DIGITS, split="train")),
    ("photos", DataSpec(DataKind.PHOTOS)),
    ("random", DataSpec(DataKind.RANDOM)),
    ("calib.npz", DataSpec(DataKind.FILE, path=Path("calib.npz"))),
    ("digits:test", DataSpec(DataKind.FILE, path=Path("digits:test"))),  # no such split: a path, not found later
])
def test_parse(text: str, expected: DataSpec) -> None:
    assert DataSpec.parse(text) == expected
    assert str(expected) == text


def test_a_bundled_name_wins_over_a_folder_of_that_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.png").write_bytes(b"x")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"x")
    assert DataSpec.parse("photos").kind is DataKind.PHOTOS and data_identity("photos") == "photos"
    assert DataSpec.parse("images") == DataSpec(DataKind.FOLDER, path=Path("images"))


def test_files_and_folders_are_identified_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "a.png").write_bytes(b"one")
    array = tmp_path / "calib.npy"
    array.write_bytes(b"two")
    before = data_identity(str(folder)), data_identity(str(array))
    (folder / "a.png").write_bytes(b"changed")
    array.write_bytes(b"changed")
    after = data_identity(str(folder)), data_identity(str(array))
    assert before[0] != after[0] and before[1] != after[1]
    assert data_identity(None) is None and data_identity("digits:eval") == "digits:eval"
    assert data_identity(str(tmp_path / "missing.npz")) == str(tmp_path / "missing.npz")
