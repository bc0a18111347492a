"""A detector's label boxes in an evaluation .npz (boxes [M, 4], classes [M], image [M]) make optimize report mAP@0.5
against the labels beside the agreement with FP32; an .npz without labels is judged against FP32 alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.tasks.detect import TRUTH_SCORE, decode_yolov8, nms

FACTORY = "tests.convert.detector_models:caching_head"


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from click.testing import CliRunner

    from trtpipe.cli.main import main

    path = tmp_path_factory.mktemp("detector") / "fp32.onnx"
    result = CliRunner().invoke(main, ["convert", FACTORY, "-o", str(path), "--task", "detect"])
    assert result.exit_code == 0, result.output
    return path


def _labelled(detector: Path, folder: Path) -> Path:
    """Eight images and, as their labels, FP32's own confident detections with the first box of each image
    dropped: a truth both models are scored against, and one neither can match fully."""
    images = np.random.default_rng(3).standard_normal((8, 3, 64, 64)).astype(np.float32)
    with OnnxRuntimeBackend(detector, RunOptions()) as backend:
        outputs = backend.run(images)
    boxes, classes, image = [], [], []
    for index, found in enumerate(decode_yolov8(outputs)):
        keep = nms(found).above(TRUTH_SCORE)
        for row in range(1, len(keep.boxes)):
            boxes.append(keep.boxes[row]), classes.append(keep.classes[row]), image.append(index)
    assert len(boxes) >= 8, "the tiny detector should find boxes on noise"
    path = folder / "labelled.npz"
    np.savez(path, images=images, boxes=np.asarray(boxes, np.float32), classes=np.asarray(classes),
             image=np.asarray(image))
    return path


def test_label_boxes_give_map_against_the_labels(detector: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    labelled = _labelled(detector, tmp_path)
    out = tmp_path / "fp16.onnx"
    result = run_cli("optimize", detector, "-o", out, "--precision", "fp16", "--calib", labelled, "--eval", labelled)
    assert result.exit_code == 0, result.output
    verification = json.loads(out.with_suffix(".manifest.json").read_text())["fp16"]["verification"]
    # FP32 against labels that are its own detections less one per image: high, but not 1.
    assert 0.3 < verification["reference_accuracy"] < 1.0
    assert verification["accuracy"] == pytest.approx(verification["reference_accuracy"], abs=0.05)


def test_box_labels_that_do_not_line_up_are_refused(detector: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.npz"
    np.savez(bad, images=np.zeros((2, 3, 64, 64), np.float32), boxes=np.zeros((3, 4), np.float32),
             classes=np.zeros(2, np.int64), image=np.zeros(3, np.int64))
    result = run_cli("optimize", detector, "-o", tmp_path / "x.onnx", "--precision", "fp16", "--calib", bad,
                     "--eval", bad)
    assert result.exit_code == 1 and "label boxes need boxes [M, 4]" in result.output
    assert not (tmp_path / "x.onnx").exists()


def test_unlabelled_npz_is_judged_against_fp32(detector: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    plain = tmp_path / "plain.npz"
    np.savez(plain, images=np.random.default_rng(4).standard_normal((8, 3, 64, 64)).astype(np.float32))
    out = tmp_path / "fp16.onnx"
    result = run_cli("optimize", detector, "-o", out, "--precision", "fp16", "--calib", plain, "--eval", plain)
    assert result.exit_code == 0, result.output
    verification = json.loads(out.with_suffix(".manifest.json").read_text())["fp16"]["verification"]
    assert verification["accuracy"] is None and verification["agreement"] > 0.9
