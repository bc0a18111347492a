"""Artifacts are written atomically and readable by other users as the umask allows."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trtpipe.files import write_json_atomic, write_text_atomic


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_honour_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    previous = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "config.pbtxt", "x")
        write_json_atomic(tmp_path / "m.manifest.json", {"a": 1})
    finally:
        os.umask(previous)
    for name in ("config.pbtxt", "m.manifest.json"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode
    assert not list(tmp_path.glob(".*.tmp"))
