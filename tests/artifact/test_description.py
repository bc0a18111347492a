"""An artifact's description trusts its manifest only when the manifest describes the file on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from tests.conftest import error_line
from trtpipe import console
from trtpipe.artifact.description import describe_artifact
from trtpipe.artifact.records.manifest import manifest_path
from trtpipe.errors import BadInput
from trtpipe.vocab import Precision, Task


def _copy(digits_onnx: Path, folder: Path) -> Path:
    copy = folder / "model.onnx"
    shutil.copy(digits_onnx, copy)
    shutil.copy(manifest_path(digits_onnx), manifest_path(copy))
    return copy


def test_a_model_another_run_replaced_is_described_as_unverified(digits_onnx: Path, tmp_path: Path) -> None:
    model = _copy(digits_onnx, tmp_path)
    assert describe_artifact(model).task is Task.CLASSIFY  # from the manifest
    replacement = onnx.load(str(model))
    replacement.doc_string = "written by another run"
    model.write_bytes(replacement.SerializeToString())
    with console.recording_warnings() as warnings:
        description = describe_artifact(model)
    assert len(warnings) == 1 and "model.manifest.json describes another file" in warnings[0]
    assert "treated as unverified" in warnings[0]
    # Judged by its own graph, as an ONNX from elsewhere: no task, precision read from the operators.
    assert description.task is None and description.precision is Precision.FP32


def test_a_damaged_manifest_is_one_error_line_naming_file_and_field(digits_onnx: Path, tmp_path: Path,
                                                                    run_cli) -> None:  # type: ignore[no-untyped-def]
    model = _copy(digits_onnx, tmp_path)
    data = json.loads(manifest_path(model).read_text())
    data["artifact"]["precision"] = "int3"
    manifest_path(model).write_text(json.dumps(data))
    with pytest.raises(BadInput, match=r"'artifact\.precision' is 'int3'"):
        describe_artifact(model)
    result = run_cli("export-triton", model, "--name", "digits", "-o", tmp_path / "triton")
    assert result.exit_code == 1
    line = error_line(result.output)
    assert str(manifest_path(model)) in line and "'artifact.precision' is 'int3'" in line
    assert "Traceback" not in result.output
