"""Detectors: the mAP@0.5 of the candidate's detections against the reference's own detections.

A raw one-stage head is decoded here, as the exporters write it:

- ``yolov8`` (YOLOv8/v11, anchor-free): ``[N, 4+C, A]`` (or transposed ``[N, A, 4+C]``) of box centre, size (in
  input pixels) and C class scores;
- ``yolov5`` (YOLOv5/v7): ``[N, A, 5+C]`` (or ``[N, 5+C, A]``) with an objectness score after the box;
- ``scores_boxes``: two outputs, per-anchor class scores ``[N, A, C]`` then decoded boxes ``[N, A, 4]`` (x1 y1 x2 y2,
  input pixels), as ``trtpipe.models.detectors.detector_head`` writes torchvision's one-stage detectors.

The anchors axis is the longer of the last two. Anything else is decoded by the user's ``--postprocess
module:fn``, which takes a model's outputs and returns, per image, ``(boxes [K, 4] as x1 y1 x2 y2, scores [K],
classes [K])``. Detections are the decoded boxes after class-wise non-maximum suppression (IoU 0.7, at most 300,
as Ultralytics predicts). The reference's boxes scoring at least 0.25 are the truth; the candidate's boxes down to
0.001 are ranked by score, so a box whose score moved a little across the threshold is still matched, and AP is
the area under the all-point interpolated precision-recall curve, averaged over the classes the reference found.
Label boxes, when given, are the truth for both models instead (``mAP@0.5`` against labels).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.tasks.base import Fidelity
from trtpipe.vocab import Task

YOLO_EXPECTED = "a raw YOLO-style head [N, 4+C, anchors] or [N, anchors, 4+C] (yolov5: 5+C)"
EXPECTED = f"{YOLO_EXPECTED}, or class scores [N, anchors, C] then boxes [N, anchors, 4]"
TRUTH_SCORE = 0.25  # the reference's detections at Ultralytics' default confidence are the truth
RANKED_SCORE = 0.001  # the candidate's detections are ranked down to this score (as mAP evaluations do)
NMS_IOU = 0.7
MAX_DETECTIONS = 300
MAX_BEFORE_NMS = 3000
MATCH_IOU = 0.5


@dataclass(frozen=True)
class Detections:
    """One image's detections."""

    boxes: np.ndarray  # [K, 4] x1 y1 x2 y2
    scores: np.ndarray  # [K]
    classes: np.ndarray  # [K] int

    def above(self, score: float) -> Detections:
        keep = self.scores >= score
        return Detections(self.boxes[keep], self.scores[keep], self.classes[keep])


Decoder = Callable[[Sequence[np.ndarray]], list[Detections]]


def fits(shape: tuple[int, ...]) -> bool:
    if len(shape) != 3:
        return False
    channels, anchors = sorted(shape[1:])
    return channels >= 5 and anchors > 4 * channels


def _oriented(head: np.ndarray, extra: int) -> np.ndarray:
    """``head`` as [N, anchors, 4+extra+C], whichever way round it was written."""
    if head.ndim != 3 or min(head.shape[1:]) < 4 + extra + 1:
        raise BadInput(f"The detector's output has shape {list(head.shape)}; the yolo decoders expect "
                       f"{YOLO_EXPECTED}: give --postprocess module:fn for another layout.")
    return head if head.shape[1] >= head.shape[2] else head.transpose(0, 2, 1)


def ranked(boxes: np.ndarray, scores: np.ndarray) -> Detections:
    """One image's candidate boxes [A, 4] (x1 y1 x2 y2) and class scores [A, C] as its detections: each box's best
    class, those scoring at least RANKED_SCORE, the best MAX_BEFORE_NMS of them, then NMS."""
    classes = scores.argmax(1)
    best = scores[np.arange(len(scores)), classes]
    keep = np.flatnonzero(best >= RANKED_SCORE)
    keep = keep[np.argsort(-best[keep])[:MAX_BEFORE_NMS]]
    return nms(Detections(boxes[keep], best[keep], classes[keep]))


def _decode_yolo(outputs: Sequence[np.ndarray], objectness: bool) -> list[Detections]:
    rows = _oriented(np.asarray(outputs[0], dtype=np.float64), 1 if objectness else 0)
    decoded = []
    for image in rows:
        centre, size = image[:, :2], image[:, 2:4]
        scores = image[:, 5:] * image[:, 4:5] if objectness else image[:, 4:]
        decoded.append(ranked(np.concatenate([centre - size / 2, centre + size / 2], axis=1), scores))
    return decoded


def picodet_decoder(height: int, width: int, strides: tuple[int, ...] = (8, 16, 32, 64)) -> Decoder:
    """PP-PicoDet's GFL head at an input of ``height`` x ``width``: per stride, sigmoid class scores [N, A, C], then
    per stride the box sides' distances as distributions over 0..R strides [N, A, 4(R+1)] (the expectation of a
    softmax), around anchor points at the cell centres (PaddleDetection's PicoHeadV2 post-processing)."""
    grids = []
    for stride in strides:
        rows, cols = -(-height // stride), -(-width // stride)
        y, x = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
        grids.append(np.stack([(x.ravel() + 0.5) * stride, (y.ravel() + 0.5) * stride], axis=1))

    def decode(outputs: Sequence[np.ndarray]) -> list[Detections]:
        levels = len(strides)
        if len(outputs) != 2 * levels or any(np.asarray(o).shape[1] != len(g) for o, g in
                                             zip(outputs, [*grids, *grids], strict=True)):
            raise BadInput(f"The picodet decoder expects {2 * levels} outputs (per stride {strides}: scores, then box "
                           f"distributions) at {height}x{width}; the model gave shapes "
                           f"{[list(np.asarray(o).shape) for o in outputs]}.")
        decoded = []
        for image in range(len(outputs[0])):
            boxes, scores = [], []
            for stride, grid, score, dist in zip(strides, grids, outputs[:levels], outputs[levels:], strict=True):
                logits = np.asarray(dist[image], dtype=np.float64).reshape(len(grid), 4, -1)
                weights = np.exp(logits - logits.max(-1, keepdims=True))
                sides = (weights / weights.sum(-1, keepdims=True) * np.arange(logits.shape[-1])).sum(-1) * stride
                boxes.append(np.concatenate([grid - sides[:, :2], grid + sides[:, 2:]], axis=1))
                scores.append(np.asarray(score[image], dtype=np.float64))
            decoded.append(ranked(np.concatenate(boxes), np.concatenate(scores)))
        return decoded

    return decode


def decode_scores_boxes(outputs: Sequence[np.ndarray]) -> list[Detections]:
    """Class scores [N, A, C] and boxes [N, A, 4] (x1 y1 x2 y2), one row per anchor: a head cut before NMS."""
    if len(outputs) < 2 or not scores_and_boxes([tuple(np.asarray(o).shape) for o in outputs]):
        raise BadInput("The scores_boxes decoder expects class scores [N, A, C] and boxes [N, A, 4]; the model gave "
                       f"shapes {[list(np.asarray(o).shape) for o in outputs]}.")
    scores, boxes = (np.asarray(o, dtype=np.float64) for o in outputs[:2])
    return [ranked(image_boxes, image_scores) for image_scores, image_boxes in zip(scores, boxes, strict=True)]


def scores_and_boxes(shapes: Sequence[tuple[int, ...]]) -> bool:
    """Two outputs, per-anchor class scores [N, A, C] and boxes [N, A, 4], as detector_head writes them."""
    return (len(shapes) == 2 and len(shapes[0]) == len(shapes[1]) == 3 and shapes[1][2] == 4
            and shapes[0][:2] == shapes[1][:2])


def decode_yolov8(outputs: Sequence[np.ndarray]) -> list[Detections]:
    return _decode_yolo(outputs, objectness=False)


def decode_yolov5(outputs: Sequence[np.ndarray]) -> list[Detections]:
    return _decode_yolo(outputs, objectness=True)


DECODERS: dict[str, Decoder] = {"yolov8": decode_yolov8, "yolov5": decode_yolov5,
                                "scores_boxes": decode_scores_boxes}


def default_decoder(shapes: Sequence[tuple[int, ...]]) -> str:
    """The decoder the outputs' layout calls for: scores [N, A, C] and boxes [N, A, 4] is scores_boxes; else the
    first output is a raw head, anchors last ([N, A, K], YOLOv5's export) yolov5, anchors first ([N, K, A],
    YOLOv8/v11's) yolov8."""
    if scores_and_boxes(shapes):
        return "scores_boxes"
    shape = shapes[0]
    return "yolov5" if len(shape) == 3 and shape[1] > shape[2] else "yolov8"


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box in ``a`` [K, 4] with every box in ``b`` [M, 4] (x1 y1 x2 y2)."""
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(bottom_right - top_left, 0, None).prod(2)
    area_a = np.clip(a[:, 2:] - a[:, :2], 0, None).prod(1)
    area_b = np.clip(b[:, 2:] - b[:, :2], 0, None).prod(1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def nms(found: Detections, iou: float = NMS_IOU) -> Detections:
    """Class-wise greedy non-maximum suppression, highest score first, at most MAX_DETECTIONS boxes."""
    order = np.argsort(-found.scores, kind="stable")
    boxes, classes = found.boxes[order], found.classes[order]
    kept: list[int] = []
    alive = np.ones(len(order), dtype=bool)
    for i in range(len(order)):
        if not alive[i]:
            continue
        kept.append(i)
        if len(kept) == MAX_DETECTIONS:
            break
        rest = np.flatnonzero(alive[i + 1:]) + i + 1
        same = rest[classes[rest] == classes[i]]
        alive[same[box_iou(boxes[i:i + 1], boxes[same])[0] > iou]] = False
    index = order[kept]
    return Detections(found.boxes[index], found.scores[index], found.classes[index])


def average_precision(truth: list[Detections], ranked: list[Detections], cls: int) -> float | None:
    """AP at IoU 0.5 of class ``cls``: ``ranked`` boxes matched greedily, best score first, to the unmatched
    ``truth`` box of the same image they overlap most; None when the truth has no box of that class."""
    total = sum(int((t.classes == cls).sum()) for t in truth)
    if total == 0:
        return None
    hits: list[tuple[float, bool]] = []
    for t, r in zip(truth, ranked, strict=True):
        truth_boxes = t.boxes[t.classes == cls]
        mine = r.classes == cls
        boxes, scores = r.boxes[mine], r.scores[mine]
        taken = np.zeros(len(truth_boxes), dtype=bool)
        overlaps = box_iou(boxes, truth_boxes) if len(truth_boxes) else np.zeros((len(boxes), 0))
        for j in np.argsort(-scores, kind="stable"):
            candidates = np.where(taken, -1.0, overlaps[j]) if len(truth_boxes) else np.empty(0)
            best = int(candidates.argmax()) if candidates.size else -1
            matched = best >= 0 and candidates[best] >= MATCH_IOU
            if matched:
                taken[best] = True
            hits.append((float(scores[j]), matched))
    if not hits:
        return 0.0
    hits.sort(key=lambda h: -h[0])
    tp = np.cumsum([h[1] for h in hits])
    precision = tp / np.arange(1, len(hits) + 1)
    recall = tp / total
    # All-point interpolation: precision made monotone from the right, integrated over recall's steps.
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    steps = np.diff(np.concatenate([[0.0], recall]))
    return float((steps * precision).sum())


def mean_average_precision(truth: list[Detections], ranked: list[Detections]) -> float | None:
    """mAP@0.5 over the classes present in ``truth``; None when the truth has no box at all."""
    classes = np.unique(np.concatenate([t.classes for t in truth])) if truth else np.empty(0)
    aps = [ap for cls in classes if (ap := average_precision(truth, ranked, int(cls))) is not None]
    return float(np.mean(aps)) if aps else None


def label_detections(labels: Any, count: int) -> list[Detections]:
    """Label boxes from an ``.npz``'s arrays: ``boxes`` [M, 4] (x1 y1 x2 y2, input pixels), ``classes`` [M] and
    ``image`` [M] (the index of the sample each box belongs to). ``labels`` is whatever the file held: anything
    else is refused here."""
    try:
        boxes, classes, image = (np.asarray(labels[k]) for k in ("boxes", "classes", "image"))
    except (KeyError, TypeError, IndexError):
        raise BadInput("Detection labels need the arrays boxes [M, 4] (x1 y1 x2 y2), classes [M] and image [M] "
                       "(each box's sample index).") from None
    return [Detections(boxes[image == i].astype(np.float64), np.ones(int((image == i).sum())),
                       classes[image == i].astype(int)) for i in range(count)]


def measure_detections(reference: list[Detections], candidate: list[Detections],
                       labels: list[Detections] | None = None) -> Fidelity:
    truth = [d.above(TRUTH_SCORE) for d in reference]
    agreement = mean_average_precision(truth, candidate)
    figures = {"reference_boxes": float(sum(len(t.scores) for t in truth)),
               "candidate_boxes": float(sum(len(c.above(TRUTH_SCORE).scores) for c in candidate))}
    accuracy = reference_accuracy = None
    if labels is not None:
        reference_accuracy = mean_average_precision(labels, reference)
        accuracy = mean_average_precision(labels, candidate)
    note = None if agreement is not None else (f"the reference found no box scoring {TRUTH_SCORE:g} or more on "
                                               "these samples: mAP not measured")
    return Fidelity(Task.DETECT, agreement, "mAP@0.5 vs FP32", figures, accuracy, reference_accuracy,
                    "mAP@0.5" if labels is not None else None, note)


def measure(reference: np.ndarray, candidate: np.ndarray, labels: object | None,
            decoder: Decoder | None = None, outputs: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
            ) -> Fidelity:
    """mAP@0.5 of ``candidate``'s detections against ``reference``'s: the raw heads decoded by the decoder their
    layout calls for, or every output (``outputs``) by the user's ``decoder``."""
    references, candidates = outputs if outputs is not None else ([reference], [candidate])
    if decoder is None:
        decoder = DECODERS[default_decoder([tuple(np.asarray(r).shape) for r in references])]
    truth = label_detections(labels, len(reference)) if labels is not None else None
    return measure_detections(_decoded(decoder, references), _decoded(decoder, candidates), truth)


def _decoded(decoder: Decoder, outputs: Sequence[np.ndarray]) -> list[Detections]:
    found = decoder(outputs)
    count = len(outputs[0])
    if len(found) != count or not all(isinstance(d, Detections) or len(d) == 3 for d in found):
        raise BadInput(f"The detection decoder returned {len(found)} results for {count} images: it must return, "
                       "per image, (boxes [K, 4] x1 y1 x2 y2, scores [K], classes [K]).")
    return [d if isinstance(d, Detections) else Detections(np.asarray(d[0], np.float64).reshape(-1, 4),
                                                           np.asarray(d[1], np.float64).reshape(-1),
                                                           np.asarray(d[2]).astype(int).reshape(-1))
            for d in found]
