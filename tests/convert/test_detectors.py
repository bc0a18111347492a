"""Detectors through convert: a batch that really is dynamic, torchvision's detectors cut before their
post-processing, and one line (nothing written, no ✓ before it) where an export cannot hold a dynamic batch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.conftest import error_line
from tests.convert import detector_models
from trtpipe.comparison import compare
from trtpipe.tasks import infer_task
from trtpipe.vocab import Task

MODELS = Path(detector_models.__file__)


def _factory(name: str) -> str:
    return f"{MODELS}:{name}"


def _run_at(path: Path, batch: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: batch})


def test_a_head_that_caches_its_input_shape_exports_a_dynamic_batch(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Ultralytics' pattern: torch.export fixes the batch without failing; convert notices, says so, and the
    TorchScript exporter's graph runs at a batch it was not traced at."""
    out = tmp_path / "yolo.onnx"
    result = run_cli("convert", _factory("caching_head"), "-o", out)
    assert result.exit_code == 0, result.output
    assert "The dynamo exporter failed (FixedBatch: the ONNX it wrote fixes input 'input' at batch 2)" in result.output
    assert "dynamic batch" in result.output
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["export"]["exporter"] == "torchscript" and "FixedBatch" in manifest["export"]["fallback_reason"]
    assert manifest["inputs"][0]["shape"][0] == "batch"

    images = np.random.default_rng(1).standard_normal((3, 3, 64, 64), dtype=np.float32)
    model = detector_models.caching_head()
    with torch.no_grad():
        expected = model(torch.from_numpy(images)).numpy()
    (got,) = _run_at(out, images)
    assert got.shape == expected.shape == (3, 4 + detector_models.CLASSES, 80)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_batch_neither_exporter_keeps_dynamic_is_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "per_image.onnx"
    result = run_cli("convert", _factory("per_image"), "-o", out)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert "The torchscript exporter fixed the batch axis: the ONNX it wrote fails at batch 3 (Split node" in line
    assert "--static-batch" in line
    assert "✓" not in result.output and "dynamic batch" not in result.output
    assert list(tmp_path.iterdir()) == []
    # As the line says: with the batch fixed, the same model converts.
    assert run_cli("convert", _factory("per_image"), "--static-batch", "-o", out).exit_code == 0


def test_an_onnx_that_fails_to_run_during_verification_is_one_line(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A graph that declares a dynamic batch but holds the tracing one: verify says so in one line."""
    path = tmp_path / "per_image.onnx"
    example = torch.zeros(2, 3, 16, 16)
    torch.onnx.export(detector_models.per_image(), (example,), str(path), dynamo=False, input_names=["input"],
                      output_names=["output"], dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
    result = run_cli("verify", _factory("per_image"), path)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert f"{path} fails to run on onnxruntime during verification: Split node" in line
    assert "Traceback" not in result.output


def test_a_whole_torchvision_detector_is_one_line_saying_to_cut_it(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ssd.onnx"
    result = run_cli("convert", _factory("tiny_ssd"), "-o", out)
    assert result.exit_code == 1
    line = error_line(result.output)
    assert line.startswith("Error: The torchscript exporter fixed the batch axis")
    assert "torchvision's SSD ends in per-image post-processing" in line
    assert "trtpipe.models.detectors.detector_head(model, (height, width))" in line
    assert "make forward() independent" not in line  # the general advice gives way to the detector's
    assert "✓" not in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_torchvision_head_exports_with_a_dynamic_batch_and_is_judged_by_map(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                run_cli) -> None:
    out = tmp_path / "ssd_head.onnx"
    result = run_cli("convert", _factory("tiny_ssd_head"), "-o", out)
    assert result.exit_code == 0, result.output
    assert "with the dynamo exporter" in result.output and "Verified on onnxruntime" in result.output
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert [o["name"] for o in manifest["outputs"]] == ["scores", "boxes"]
    assert manifest["artifact"]["task"] == Task.DETECT
    case = manifest["verification"]["cases"][0]
    assert case["agreement_name"] == "mAP@0.5 vs FP32" and case["agreement"] == 1.0
    assert case["figures"]["reference_boxes"] > 0  # the measure saw detections, not an empty truth

    images = np.random.default_rng(2).random((3, 3, 64, 64), dtype=np.float32)
    scores, boxes = _run_at(out, images)
    assert scores.shape == (3, 320, detector_models.CLASSES) and boxes.shape == (3, 320, 4)
    assert (boxes >= 0).all() and (boxes <= 64).all() and np.allclose(scores[..., 0], 0)


@pytest.mark.parametrize("family", ["ssd", "retinanet", "fcos"])
def test_the_head_holds_torchvisions_own_detections(family: str) -> None:
    """Every box torchvision's post-processing keeps is an anchor of the head's outputs, same score and box."""
    from trtpipe.models.detectors import detector_head

    model = detector_models.tiny_torchvision(family)
    head = detector_head(model, detector_models.SIZE).eval()
    images = torch.rand(2, 3, detector_models.SIZE, detector_models.SIZE, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        outputs = head(images)
        detections = model(list(images))
    assert outputs["scores"].std(1).amax() > 1e-3  # the scores follow the image: a real test of the decoding
    for index, found in enumerate(detections):
        assert len(found["boxes"]) > 0
        for box, score, label in zip(found["boxes"], found["scores"], found["labels"], strict=True):
            same_score = (outputs["scores"][index, :, label] - score).abs() < 1e-6
            distance = (outputs["boxes"][index, same_score] - box).abs().amax(1).min()
            assert float(distance) < 1e-4


def test_two_stage_detectors_are_refused_with_the_reason() -> None:
    from torchvision.models.detection import fasterrcnn_mobilenet_v3_large_320_fpn

    from trtpipe.errors import BadInput
    from trtpipe.models.detectors import detector_head

    model = fasterrcnn_mobilenet_v3_large_320_fpn(weights=None, weights_backbone=None)
    with pytest.raises(BadInput, match="FasterRCNN is a two-stage detector"):
        detector_head(model, 320)


def test_scores_and_boxes_are_decoded_and_the_task_inferred() -> None:
    boxes = np.zeros((1, 40, 4))
    boxes[0, :, 2:] = 10
    boxes[0, :3] = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]]
    scores = np.zeros((1, 40, 2))
    scores[0, :3] = [[0.9, 0.0], [0.0, 0.8], [0.7, 0.0]]
    assert infer_task([scores, boxes]).task is Task.DETECT
    assert compare([scores, boxes], [scores, boxes]).agreement == 1.0
    dropped = scores.copy()
    dropped[0, 1, 1] = 0.0  # the candidate loses the one box of class 1
    result = compare([scores, boxes], [dropped, boxes])
    assert result.task is Task.DETECT and result.agreement == pytest.approx(0.5)
