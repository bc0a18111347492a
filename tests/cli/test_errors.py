"""What a user sees when a command is given something it cannot use: one ``Error:`` line and an exit code, never
a traceback. Malformed values are click's (exit 2); a missing input file is a user error like any other (exit 1),
reported before any model is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import error_line


@pytest.fixture()
def stand_in(tmp_path: Path) -> Path:
    """A file to pass where an input is required: these errors come before anything reads it."""
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not read")
    return path


BAD_VALUES = [
    (["optimize", "{file}", "-o", "{tmp}/o.onnx", "--precision", "fp64"], "Invalid value for '--precision'"),
    (["optimize", "{file}", "-o", "{tmp}/o.onnx", "--passes", "fuse,nope"], "unknown pass nope"),
    # A helper module in optimize/passes/ is no pass: it is refused like any unknown name.
    (["optimize", "{file}", "-o", "{tmp}/o.onnx", "--passes", "context"], "unknown pass context"),
    (["optimize", "{file}", "-o", "{tmp}/o.onnx", "--calib-samples", "0"], "--calib-samples"),
    (["build", "{file}", "-o", "{tmp}/m.plan", "--workspace", "lots"], "is not a size"),
    (["bench", "digits_resnet", "--batch", "0,2"], "positive batch sizes"),
    (["check", "{file}", "--target", "gpu"], "Invalid value for '--target'"),
    (["report", "{file}", "-o", "{tmp}/r.html", "--batch", "0"], "Invalid value for '--batch'"),
    (["loadtest", "--model", "m", "--duration", "0.1"], "Invalid value for '--duration'"),
    (["convert", "digits_resnet"], "Missing option '-o'"),
]


@pytest.mark.parametrize(("args", "message"), BAD_VALUES, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_a_bad_value_is_one_error_line_with_exit_2(args: list[str], message: str, stand_in: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli(*(a.format(file=stand_in, tmp=stand_in.parent) for a in args))
    assert result.exit_code == 2, result.output
    assert message in error_line(result.output)
    assert "Traceback" not in result.output


MISSING_INPUTS = [
    (["verify", "digits_resnet", "{missing}"], "ONNX file"),
    (["optimize", "{missing}", "-o", "{tmp}/o.onnx"], "ONNX file"),
    (["build", "{missing}", "-o", "{tmp}/m.plan"], "ONNX file"),
    (["check", "{missing}"], "ONNX file"),
    (["bench", "digits_resnet", "{missing}"], "Artifact"),
    (["report", "{missing}", "-o", "{tmp}/r.html"], "Results file"),
]


@pytest.mark.parametrize(("args", "what"), MISSING_INPUTS, ids=lambda v: v[0] if isinstance(v, list) else v)
def test_a_missing_input_file_is_a_user_error(args: list[str], what: str, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "missing.onnx"
    result = run_cli(*(a.format(missing=missing, tmp=tmp_path) for a in args))
    assert result.exit_code == 1, result.output
    assert error_line(result.output) == f"Error: {what} {missing} does not exist."
    assert "Traceback" not in result.output


def test_a_folder_given_as_an_input_file_is_refused(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("check", tmp_path)
    assert result.exit_code == 2 and "is a directory" in error_line(result.output)


def test_a_missing_output_folder_is_refused_before_any_work(stand_in: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    result = run_cli("optimize", stand_in, "-o", stand_in.parent / "no" / "such" / "o.onnx")
    assert result.exit_code == 1
    assert "does not exist: create it" in error_line(result.output)
