"""Each task's measure on small arrays, against figures worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.tasks import infer_task
from trtpipe.tasks.detect import Detections, average_precision, decode_yolov5, decode_yolov8, nms
from trtpipe.vocab import Task


def test_classify_top1_top5_and_accuracy() -> None:
    reference = np.array([[3, 1, 0, 0, 0, 0, 0], [0, 2, 1, 0, 0, 0, 0], [1, 0, 5, 0, 0, 0, 0]], np.float32)
    candidate = np.array([[1, 3, 0, 0, 0, 0, 0], [0, 2, 1, 0, 0, 0, 0], [1, 1, 0, 2, 3, 4, 5]], np.float32)
    result = compare(reference, candidate, np.array([0, 1, 1]))
    assert result.task is Task.CLASSIFY
    assert result.top1_agreement == result.agreement == pytest.approx(1 / 3)  # only sample 1 keeps its class
    # Top-5: the reference's class 0 is in sample 0's top 5 and class 1 in sample 1's; class 2 is 7th in sample 2.
    assert result.figures["top5_agreement"] == pytest.approx(2 / 3)
    assert result.reference_accuracy == pytest.approx(2 / 3) and result.accuracy == pytest.approx(1 / 3)
    assert result.accuracy_drop_pp == pytest.approx(100 / 3)


def test_segment_pixel_agreement_and_miou() -> None:
    # Reference classes per pixel [[0, 0], [1, 1]]; the candidate turns one class-1 pixel into class 0.
    reference = np.zeros((1, 2, 2, 2), np.float32)
    reference[0, 0, 0, :] = 1
    reference[0, 1, 1, :] = 1
    candidate = reference.copy()
    candidate[0, :, 1, 1] = [1, 0]
    result = compare(reference, candidate, task=Task.SEGMENT)
    assert result.agreement == pytest.approx(0.75)
    # Class 0: truth 2 pixels, predicted 3, overlap 2 -> 2/3; class 1: truth 2, predicted 1, overlap 1 -> 1/2.
    assert result.figures["miou"] == pytest.approx((2 / 3 + 1 / 2) / 2)
    labels = np.array([[[0, 0], [1, 0]]])
    labelled = compare(reference, candidate, labels, task=Task.SEGMENT)
    assert labelled.reference_accuracy == pytest.approx(0.75) and labelled.accuracy == pytest.approx(1.0)
    assert labelled.accuracy_drop_pp == pytest.approx(-25.0)
    with pytest.raises(BadInput, match=r"labels have shape \(1, 3\); the model's class maps are \(1, 2, 2\)"):
        compare(reference, candidate, np.zeros((1, 3)), task=Task.SEGMENT)


def test_dense_f1_at_threshold_and_mean_error() -> None:
    reference = np.array([0.9, 0.8, 0.1, 0.6, 0.0, 0.2], np.float32).reshape(1, 1, 2, 3)
    candidate = np.array([0.9, 0.2, 0.4, 0.6, 0.0, 0.2], np.float32).reshape(1, 1, 2, 3)
    result = compare(reference, candidate)
    assert result.task is Task.DENSE
    # Above 0.3: reference {0, 1, 3}, candidate {0, 2, 3}: TP 2, FP 1, FN 1 -> F1 = 4 / 6.
    assert result.agreement == pytest.approx(4 / 6)
    assert result.figures["mean_abs_err"] == pytest.approx((0.6 + 0.3) / 6)


def test_embed_cosines() -> None:
    reference = np.array([[1, 0], [0, 2]], np.float32)
    candidate = np.array([[1, 1], [0, 3]], np.float32)
    result = compare(reference, candidate, task=Task.EMBED)
    assert result.agreement == pytest.approx((np.sqrt(0.5) + 1) / 2)
    assert result.figures["min_cosine"] == pytest.approx(np.sqrt(0.5))
    assert result.top1_agreement is None


def test_every_output_is_compared_and_the_worst_named() -> None:
    """One output turned entirely to zero (what an FP16 overflow did to a YOLOv8 head) is the comparison's
    cosine, named, even when the first output is perfect."""
    rng = np.random.default_rng(0)
    first, second = rng.standard_normal((4, 10)), rng.standard_normal((4, 3, 8))
    result = compare([first, second], [first, np.zeros_like(second)], names=["logits", "boxes"])
    assert result.cosine == 0.0 and result.worst_output == "boxes"
    assert [o.name for o in result.outputs] == ["logits", "boxes"]
    assert result.outputs[0].snr_db == float("inf") and result.outputs[1].snr_db == pytest.approx(0.0)
    assert result.task is Task.GENERIC and result.drop_pp is None  # nothing a budget could be judged on


def test_the_task_is_inferred_only_where_the_outputs_show_it() -> None:
    """Shapes choose a classifier, a segmenter and a dense map (tests/tasks/test_inference.py: a detector's boxes
    must be plausible too); a YOLO-shaped output of zeros holds no box, so it is no detector."""
    assert infer_task([np.zeros((8, 1000))]).task is Task.CLASSIFY
    assert infer_task([np.zeros((1, 84, 8400))]).task is Task.GENERIC
    head = _head([(50, 50, 20, 20)], [[0.9, 0.0]], anchors=8400)
    assert infer_task([head]).task is Task.DETECT and infer_task([head]).decoder == "yolov8"
    assert infer_task([np.zeros((2, 21, 64, 64))]).task is Task.GENERIC  # one class everywhere: no segmentation
    assert infer_task([np.zeros((2, 1, 64, 64))]).task is Task.DENSE
    with pytest.raises(BadInput, match=r"--task detect does not fit the model's first output, shaped \[8, 1000\]: "
                                       r"detect expects a raw YOLO-style head.*--postprocess MODULE:FN"):
        compare(np.zeros((8, 1000)), np.zeros((8, 1000)), task=Task.DETECT)


def _head(boxes: list[tuple[float, float, float, float]], scores: list[list[float]], anchors: int = 40) -> np.ndarray:
    """A YOLOv8 head [1, 4+C, anchors]: the given boxes (cx, cy, w, h) and class scores, the rest empty."""
    head = np.zeros((1, 4 + len(scores[0]), anchors), np.float32)
    for i, (box, score) in enumerate(zip(boxes, scores, strict=True)):
        head[0, :4, i], head[0, 4:, i] = box, score
    return head


def test_yolo_heads_decode_in_either_layout() -> None:
    head = _head([(50, 50, 20, 20), (51, 50, 20, 20), (150, 150, 10, 40)], [[0.9, 0.0], [0.8, 0.0], [0.0, 0.6]])
    (found,) = decode_yolov8([head])
    assert len(found.scores) == 2  # the second box overlaps the first (IoU 0.90) and is suppressed
    np.testing.assert_allclose(found.boxes[0], [40, 40, 60, 60])
    np.testing.assert_allclose(found.boxes[1], [145, 130, 155, 170])
    assert list(found.classes) == [0, 1]
    (transposed,) = decode_yolov8([head.transpose(0, 2, 1)])
    np.testing.assert_array_equal(transposed.boxes, found.boxes)
    # YOLOv5: objectness times class score.
    v5 = np.zeros((1, 40, 7), np.float32)
    v5[0, 0] = [50, 50, 20, 20, 0.5, 0.2, 0.9]
    (five,) = decode_yolov5([v5])
    assert list(five.classes) == [1] and five.scores[0] == pytest.approx(0.45)


def test_nms_is_per_class() -> None:
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10.5]], np.float64)
    kept = nms(Detections(boxes, np.array([0.9, 0.8, 0.7]), np.array([0, 1, 0])))
    assert list(kept.scores) == [0.9, 0.8]  # same place, other class: kept; same class: suppressed


def test_average_precision_by_hand() -> None:
    """Two truth boxes; ranked detections TP 0.9, FP 0.8, TP 0.7: precision 1, 1/2, 2/3 at recall 1/2, 1/2, 1;
    made monotone, 1, 2/3, 2/3; AP = 1/2 * 1 + 1/2 * 2/3 = 5/6."""
    truth = [Detections(np.array([[0, 0, 10, 10], [20, 20, 30, 30]], np.float64), np.ones(2), np.zeros(2, int))]
    ranked = [Detections(np.array([[0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 31]], np.float64),
                         np.array([0.9, 0.8, 0.7]), np.zeros(3, int))]
    assert average_precision(truth, ranked, 0) == pytest.approx(5 / 6)
    assert average_precision(truth, ranked, 1) is None  # no truth of that class


def test_detection_map_against_the_references_own_detections() -> None:
    reference = _head([(50, 50, 20, 20), (150, 150, 10, 40)], [[0.9, 0.0], [0.0, 0.6]])
    assert compare(reference, reference).agreement == 1.0
    moved = _head([(50, 50, 20, 20), (170, 150, 10, 40)], [[0.9, 0.0], [0.0, 0.6]])  # class 1's box is off
    result = compare(reference, moved)
    assert result.task is Task.DETECT and result.agreement == pytest.approx(0.5)  # class 0: AP 1, class 1: AP 0
    assert result.agreement_drop_pp == pytest.approx(50.0)
    threshold = _head([(50, 50, 20, 20), (150, 150, 10, 40)], [[0.2, 0.0], [0.0, 0.6]])  # 0.9 -> 0.2: still ranked
    assert compare(reference, threshold).agreement == 1.0
    empty = _head([(50, 50, 20, 20)], [[0.1, 0.0]])
    nothing = compare(empty, empty)
    assert nothing.agreement is None and "found no box scoring 0.25" in nothing.line()


def test_a_postprocess_decoder_reads_every_output() -> None:
    """Outputs the yolo decoders do not know: the user's decoder turns them into detections."""
    boxes = np.array([[[0, 0, 10, 10], [20, 20, 30, 30]]], np.float32)
    scores = np.array([[0.9, 0.8]], np.float32)

    def decoder(outputs: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return [(b, s, np.zeros(len(s), int)) for b, s in zip(outputs[0], outputs[1], strict=True)]

    result = compare([boxes, scores], [boxes, scores * np.array([[1.0, 0.1]])], decoder=decoder)
    assert result.task is Task.DETECT and result.agreement == 1.0  # the second box ranks lower but still matches
    with pytest.raises(BadInput, match="returned 0 results for 1 images"):
        compare([boxes, scores], [boxes, scores], decoder=lambda outputs: [])


def test_picodet_head_decodes_distances_around_cell_centres() -> None:
    """A 32x32 input at strides 8 and 16: one anchor of the stride-8 grid (cell (1, 2): centre x 20, y 12) scores
    0.9 for class 1, and its four side distances peak at bins 1, 2, 1, 3 (in strides of 8): a box from
    (12, -4) to (28, 36)."""
    from trtpipe.tasks.detect import picodet_decoder

    decode = picodet_decoder(32, 32, strides=(8, 16))
    scores8, scores16 = np.zeros((1, 16, 2), np.float32), np.zeros((1, 4, 2), np.float32)
    dist8, dist16 = np.zeros((1, 16, 4 * 8), np.float32), np.zeros((1, 4, 4 * 8), np.float32)
    scores8[0, 1 * 4 + 2, 1] = 0.9
    logits = np.full((4, 8), -50.0, np.float32)
    for side, peak in enumerate((1, 2, 1, 3)):
        logits[side, peak] = 50.0
    dist8[0, 1 * 4 + 2] = logits.ravel()
    (found,) = decode([scores8, scores16, dist8, dist16])
    assert list(found.classes) == [1] and found.scores[0] == pytest.approx(0.9)
    np.testing.assert_allclose(found.boxes[0], [12, -4, 28, 36], atol=1e-6)
    with pytest.raises(BadInput, match="The picodet decoder expects 4 outputs"):
        decode([scores8, dist8])


def test_labels_outside_the_models_classes() -> None:
    """A classifier's label beyond its classes is refused; a segmenter's is VOC's "ignore" (255 on boundaries):
    left out of pixel accuracy, and masks with no pixel of the model's classes are refused."""
    reference = np.array([[3, 1, 0], [0, 2, 1]], np.float32)
    with pytest.raises(BadInput, match=r"Class labels run 0\.\.50; the model has 3 classes \(0\.\.2\)"):
        compare(reference, reference, np.array([0, 50]))
    maps = np.zeros((1, 2, 2, 2), np.float32)
    maps[0, 1, 1, :] = 1  # classes [[0, 0], [1, 1]]
    ignored = compare(maps, maps, np.array([[[0, 255], [1, 0]]]), task=Task.SEGMENT)
    # Three labelled pixels, two right (the 255 one does not count): 2/3 for both models.
    assert ignored.reference_accuracy == pytest.approx(2 / 3) and ignored.figures["ignored_pixels"] == 0.25
    with pytest.raises(BadInput, match=r"hold no class of the model's 0\.\.1 \(they run 10\.\.13\)"):
        compare(maps, maps, np.array([[[10, 11], [12, 13]]]), task=Task.SEGMENT)
