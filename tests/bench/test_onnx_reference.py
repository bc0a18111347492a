"""An FP32 ONNX file as bench's MODEL: the file on ONNX Runtime is the reference, and every report says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest

from tests.conftest import error_line


def test_an_onnx_model_is_its_own_reference(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    elsewhere = tmp_path / "elsewhere.onnx"  # no manifest: nothing leads back to a PyTorch model
    shutil.copy(digits_onnx, elsewhere)
    int8 = tmp_path / "int8.onnx"
    assert run_cli("optimize", elsewhere, "-o", int8, "--precision", "int8", "--target", "cpu",
                   "--calib", "digits", "--task", "classify").exit_code == 0
    out = tmp_path / "bench.json"
    result = run_cli("bench", elsewhere, int8, "--batch", "1", "--iters", "5", "--rounds", "1", "--threads", "1",
                     "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["reference"] == "the FP32 ONNX on ONNX Runtime CPU" and report["model"]["source_kind"] == "onnx"
    reference, candidate = report["results"]
    assert reference["reference"] and reference["backend"] == "onnxruntime" and reference["speedup_vs_torch_fp32"] == 1
    assert not candidate["reference"] and candidate["speedup_vs_torch_fp32"] is not None
    assert candidate["task"] == "classify" and candidate["agreement"] is not None  # the manifest's task
    assert "latency vs the FP32 ONNX on ONNX Runtime CPU" in result.output
    # A benched ONNX from elsewhere gets its headline too: against the FP32 ONNX it was given.
    [entry] = report["standing_pytorch"]
    assert entry["against_reference"] and entry["pytorch"] == reference["variant"]
    assert "Against the FP32 ONNX, cpu batch 1: trtpipe's fastest, " in " ".join(result.output.split())
    assert "the speed of the reference, " in " ".join(result.output.split())


def test_an_onnx_model_that_cannot_be_a_reference_is_refused(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    model = onnx.load(str(digits_onnx))
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_param = "side"  # height and width dynamic, as detectors and OCR models export them
    dynamic = tmp_path / "dynamic.onnx"
    onnx.save(model, str(dynamic))
    result = run_cli("bench", dynamic, "--batch", "1", "--iters", "2")
    assert result.exit_code == 1 and "dynamic axes need a size to bench at: give --input-shape" in error_line(
        result.output)
    fitted = run_cli("bench", dynamic, "--batch", "1", "--iters", "2", "--rounds", "1", "--input-shape", "1x1x32x32")
    assert fitted.exit_code == 0, fitted.output
    int8 = tmp_path / "int8.onnx"
    assert run_cli("optimize", digits_onnx, "-o", int8, "--precision", "int8", "--calib", "digits").exit_code == 0
    quantized = run_cli("bench", int8, "--batch", "1", "--iters", "2")
    assert quantized.exit_code == 1 and "the reference must be the FP32 ONNX" in error_line(quantized.output)


@pytest.mark.parametrize(("name", "task", "inputs", "measure"), [
    ("ppocrv4_det", "dense", "photos with rendered text", "F1 at 0.3"),  # the real text detector
    ("picodet_layout_cdla", "detect", "document pages", "mAP@0.5 vs FP32"),  # the real layout detector
])
def test_a_packaged_model_is_judged_on_its_own_inputs_by_its_task(name: str, task: str, inputs: str, measure: str,
                                                                  tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A real model shipped in a wheel: its natural inputs are the agreement samples, its task's figure the measure
    (the detector's head read by its own decoder); the same file against itself agrees fully."""
    from trtpipe.errors import MissingDependency
    from trtpipe.models.packaged import packaged_onnx

    try:
        path = packaged_onnx(name)
    except MissingDependency as missing:
        pytest.skip(missing.message)
    out = tmp_path / "bench.json"
    result = run_cli("bench", name, path, "--batch", "1", "--iters", "2", "--rounds", "1", "--threads", "2",
                     "--eval-samples", "6", "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    artifact = report["results"][1]
    assert artifact["task"] == task and artifact["agreement"] == 1.0 and artifact["worst_output"] is None
    assert artifact["agreement_samples"] == 6  # as many of its own inputs as --eval-samples asked for
    assert inputs in report["agreement_inputs"] and measure in report["agreement_inputs"]
