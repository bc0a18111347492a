"""The smaller things a new user met (issue 58): a PNG named .onnx said to be a PNG at once, help defaults shown as
they are typed, counts whose nouns agree, and a manifest given to `report` named as a manifest."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import error_line
from trtpipe.bench.rounds import Timed
from trtpipe.errors import BadInput
from trtpipe.onnx_info import load_onnx
from trtpipe.report.tables import machine_line

PNG = b"\x89PNG\r\n\x1a\n" + bytes(200)


def test_a_png_named_onnx_is_called_a_png_before_anything_loads(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    picture = tmp_path / "model.onnx"
    picture.write_bytes(PNG)
    result = run_cli("optimize", picture, "-o", tmp_path / "out.onnx", "--precision", "fp16")
    assert result.exit_code == 1
    assert "is a PNG image, not an ONNX model (its first bytes say so)" in error_line(result.output)
    assert not (tmp_path / "out.onnx").exists()
    with pytest.raises(BadInput, match="is a PNG image, not an ONNX model"):
        load_onnx(picture)  # and where a file is read without the CLI (the API, a pipeline file)


def test_help_shows_defaults_as_typed(run_cli) -> None:  # type: ignore[no-untyped-def]
    bench = " ".join(run_cli("bench", "--help").output.split())
    assert "[default: 1,8,32]" in bench and "(1,8,32)" not in bench
    compile_help = " ".join(run_cli("compile", "--help").output.split())
    assert "[default: fp32]" in compile_help and "(fp32)" not in compile_help
    assert "--concurrency LEVELS" in run_cli("loadtest", "--help").output


def test_counts_agree_with_their_nouns(capsys: pytest.CaptureFixture[str]) -> None:
    report = {"environment": {"cpu": "Test CPU", "cores": 1, "threads": 1, "versions": {"torch": "2",
                                                                                        "onnxruntime": "1"}}}
    assert "(1 core, 1 thread used, no GPU)" in machine_line(report)
    timed = Timed("pytorch-fp32", 1, lambda: None)
    timed.rounds.append(np.asarray([1.0]))
    timed.report_first_round(1)
    assert "(1 run)" in " ".join(capsys.readouterr().err.split())


def test_report_names_a_manifest_as_one(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    manifest = tmp_path / "digits.manifest.json"
    manifest.write_text(json.dumps({"schema": "trtpipe.manifest/2", "stages": []}))
    result = run_cli("report", manifest, "-o", tmp_path / "r.html")
    line = error_line(result.output)
    assert "is trtpipe's manifest record (trtpipe.manifest/2), not bench results" in line
    assert "older" not in line


def test_check_takes_the_target_the_manifest_names(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """An INT8 file made for the CPU is checked against the CPU's rules unless --target names another, and the
    run says so."""
    int8 = tmp_path / "int8.onnx"
    assert run_cli("optimize", digits_onnx, "-o", int8, "--precision", "int8", "--target", "cpu", "--calib",
                   "digits", "--calib-samples", "16").exit_code == 0
    result = run_cli("check", int8)
    said = " ".join(result.output.split())
    assert "Checking against cpu: the manifest says int8.onnx was made for target cpu" in said
    assert "vs cpu:" in said
    forced = " ".join(run_cli("check", int8, "--target", "tensorrt").output.split())
    assert "Checking against" not in forced and "vs tensorrt:" in forced
