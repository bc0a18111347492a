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


def test_temporaries_of_killed_runs_are_removed_by_the_next_write(tmp_path: Path) -> None:
    import subprocess
    import sys

    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True)
    dead = int(finished.stdout)
    stale = tmp_path / f".model.onnx.{dead}.abc123.tmp"
    stale.write_bytes(b"half a model")
    ours = tmp_path / f".model.onnx.{os.getpid()}.live.tmp"  # a write in progress in a live process: kept
    ours.write_bytes(b"in progress")
    write_text_atomic(tmp_path / "model.onnx", "x")
    assert not stale.exists() and ours.exists()


def test_a_manifest_describing_another_file_is_not_trusted(tmp_path: Path) -> None:
    from trtpipe.artifact.records.manifest import ArtifactManifest, read_manifest, write_manifest
    from trtpipe.vocab import Precision

    model = tmp_path / "model.onnx"
    model.write_bytes(b"old model")
    write_manifest(model, ArtifactManifest.describe(model, Precision.INT8))
    assert read_manifest(model) is not None
    model.write_bytes(b"new model, manifest not yet written when the run was killed")
    assert read_manifest(model) is None
