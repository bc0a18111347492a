"""Detectors: the mAP@0.5 of the candidate's detections against the reference's own detections.

A raw one-stage head is decoded here, as the exporters write it:

- ``yolov8`` (YOLOv8/v11, anchor-free): ``[N, 4+C, A]`` (or transposed ``[N, A, 4+C]``) of box centre, size (in
  input pixels) and C class scores;
- ``yolov5`` (YOLOv5/v7): ``[N, A, 5+C]`` (or ``[N, 5+C, A]``) with an objectness score after the box;
- ``yolox`` (YOLOX, anchor-free, exported without its decoding): ``[N, A, 5+C]`` laid as YOLOv5's, but the box is
  raw: its centre an offset in strides from its grid cell's corner, its size the log of its size in strides, over
  the grids of strides 8, 16 and 32 of the input (the anchors count fixes the input's size: a square one, or the one
  the caller knows), as YOLOX's own ``demo_postprocess`` decodes it;
- ``scores_boxes``: two outputs, per-anchor class scores ``[N, A, C]`` then decoded boxes ``[N, A, 4]`` (x1 y1 x2 y2,
  input pixels), as ``trtpipe.models.detectors.detector_head`` writes torchvision's one-stage detectors.

The anchors axis is the longer of the last two. Layouts alike (YOLOv5's and YOLOX's) are told apart by what the
decoded boxes look like (:func:`choose`): scores in 0..1, boxes of a few pixels at least, centres inside the image;
a head no built-in decoder reads plausibly is not measured as a detector. Anything else is decoded by the user's
``--postprocess module:fn``, which takes a model's outputs and returns, per image, ``(boxes [K, 4] as x1 y1 x2 y2,
scores [K], classes [K])``. Detections are the decoded boxes after class-wise non-maximum suppression (IoU 0.7, at
most 300, as Ultralytics predicts). The reference's boxes scoring at least 0.25 are the truth; the candidate's
boxes down to 0.001 are ranked by score, so a box whose score moved a little across the threshold is still matched,
and AP is the area under the all-point interpolated precision-recall curve, averaged over the classes the reference
found.
Label boxes, when given, are the truth for both models instead (``mAP@0.5`` against labels).

mAP pools every image's boxes, so its interval is the bootstrap over images (the unit: boxes of one image are not
independent), each image's matches made once (:class:`MatchTable`), widened to at least Wilson's interval for a
share of that many images: a bootstrap alone collapses to a point at 100 %.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.intervals import Interval, share_interval
from trtpipe.tasks.base import Fidelity, paired_drop
from trtpipe.tasks.boxes import Detections, MatchTable, nms
from trtpipe.tasks.boxes import average_precision as average_precision
from trtpipe.vocab import Task

YOLO_EXPECTED = "a raw YOLO-style head [N, 4+C, anchors] or [N, anchors, 4+C] (yolov5: 5+C)"
EXPECTED = f"{YOLO_EXPECTED}, or class scores [N, anchors, C] then boxes [N, anchors, 4]"
TRUTH_SCORE = 0.25  # the reference's detections at Ultralytics' default confidence are the truth
RANKED_SCORE = 0.001  # the candidate's detections are ranked down to this score (as mAP evaluations do)
MAX_BEFORE_NMS = 3000


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


Rows = tuple[np.ndarray, np.ndarray]  # every anchor's box [N, A, 4] (x1 y1 x2 y2) and class scores [N, A, C]


def _corners(centre: np.ndarray, size: np.ndarray) -> np.ndarray:
    return np.concatenate([centre - size / 2, centre + size / 2], axis=-1)


def _yolo_rows(outputs: Sequence[np.ndarray], objectness: bool) -> Rows:
    rows = _oriented(np.asarray(outputs[0], dtype=np.float64), 1 if objectness else 0)
    scores = rows[..., 5:] * rows[..., 4:5] if objectness else rows[..., 4:]
    return _corners(rows[..., :2], rows[..., 2:4]), scores


def _ranked_rows(rows: Rows) -> list[Detections]:
    return [ranked(boxes, scores) for boxes, scores in zip(*rows, strict=True)]


def _decode_yolo(outputs: Sequence[np.ndarray], objectness: bool) -> list[Detections]:
    return _ranked_rows(_yolo_rows(outputs, objectness))


YOLOX_STRIDES = (8, 16, 32)
MAX_SIDE = 8192  # the largest input side a grid's anchors count is solved for


def grid_anchors(height: int, width: int, strides: Sequence[int] = YOLOX_STRIDES) -> int:
    """How many cells the grids of ``strides`` have over a ``height`` x ``width`` input (YOLOX: floor division)."""
    return sum((height // stride) * (width // stride) for stride in strides)


def square_side(anchors: int, strides: Sequence[int] = YOLOX_STRIDES) -> int | None:
    """The side of the square input whose grids at ``strides`` have ``anchors`` cells (a multiple of the largest
    stride), or None where no square input has: 3549 anchors are a 416x416 input, 8400 a 640x640 one."""
    step = max(strides)
    for side in range(step, MAX_SIDE + 1, step):
        count = grid_anchors(side, side, strides)
        if count >= anchors:
            return side if count == anchors else None
    return None


def _yolox_rows(outputs: Sequence[np.ndarray], size: tuple[int, int] | None = None,
                strides: Sequence[int] = YOLOX_STRIDES) -> Rows:
    rows = _oriented(np.asarray(outputs[0], dtype=np.float64), 1)
    anchors = rows.shape[1]
    if size is None:
        side = square_side(anchors, strides)
        size = (side, side) if side else None
    if size is None or grid_anchors(*size, strides) != anchors:
        raise BadInput(f"The yolox decoder reads a head whose anchors are the cells of the grids at strides "
                       f"{'/'.join(map(str, strides))} of the input; {anchors} anchors are not"
                       + (f" those of a {size[0]}x{size[1]} input" if size else " those of a square input")
                       + ": give --postprocess module:fn for this head.")
    cells, scales = [], []
    for stride in strides:
        y, x = np.meshgrid(np.arange(size[0] // stride), np.arange(size[1] // stride), indexing="ij")
        cells.append(np.stack([x.ravel(), y.ravel()], axis=1))
        scales.append(np.full((len(cells[-1]), 1), float(stride)))
    grid, scale = np.concatenate(cells), np.concatenate(scales)
    centre = (rows[..., :2] + grid) * scale
    size_px = np.exp(np.minimum(rows[..., 2:4], 30.0)) * scale  # a garbage head must not overflow to inf
    return _corners(centre, size_px), rows[..., 5:] * rows[..., 4:5]


def yolox_decoder(height: int, width: int, strides: tuple[int, ...] = YOLOX_STRIDES) -> Decoder:
    """YOLOX's raw grid head at an input of ``height`` x ``width`` (see the module's docstring)."""
    return lambda outputs: _ranked_rows(_yolox_rows(outputs, (height, width), strides))


def decode_yolox(outputs: Sequence[np.ndarray]) -> list[Detections]:
    """YOLOX's raw grid head at the square input its anchors count implies."""
    return _ranked_rows(_yolox_rows(outputs))


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
    return _ranked_rows(_scores_boxes_rows(outputs))


def _scores_boxes_rows(outputs: Sequence[np.ndarray]) -> Rows:
    scores, boxes = (np.asarray(o, dtype=np.float64) for o in outputs[:2])
    return boxes, scores


def scores_and_boxes(shapes: Sequence[tuple[int, ...]]) -> bool:
    """Two outputs, per-anchor class scores [N, A, C] and boxes [N, A, 4], as detector_head writes them."""
    return (len(shapes) == 2 and len(shapes[0]) == len(shapes[1]) == 3 and shapes[1][2] == 4
            and shapes[0][:2] == shapes[1][:2])


def decode_yolov8(outputs: Sequence[np.ndarray]) -> list[Detections]:
    return _decode_yolo(outputs, objectness=False)


def decode_yolov5(outputs: Sequence[np.ndarray]) -> list[Detections]:
    return _decode_yolo(outputs, objectness=True)


DECODERS: dict[str, Decoder] = {"yolov8": decode_yolov8, "yolov5": decode_yolov5, "yolox": decode_yolox,
                                "scores_boxes": decode_scores_boxes}


def default_decoder(shapes: Sequence[tuple[int, ...]]) -> str:
    """The decoder the outputs' layout calls for: scores [N, A, C] and boxes [N, A, 4] is scores_boxes; else the
    first output is a raw head, anchors last ([N, A, K], YOLOv5's export) yolov5, anchors first ([N, K, A],
    YOLOv8/v11's) yolov8."""
    if scores_and_boxes(shapes):
        return "scores_boxes"
    shape = shapes[0]
    return "yolov5" if len(shape) == 3 and shape[1] > shape[2] else "yolov8"


PLAUSIBLE_SIDE = 2.0  # input pixels: a detector reports no box narrower (a misread head's are 0.7-1.5 px)
CHECKED_ROWS = 20  # per image, the best-scoring anchors whose boxes are checked
SCORE_SLACK = 1e-3
MAJORITY = 0.5  # the share of checked boxes that must pass each geometric check


@dataclass(frozen=True)
class Reading:
    """One built-in decoder's reading of a head: whether its boxes are plausible, and the evidence, for people."""

    decoder: str
    plausible: bool
    evidence: str

    def line(self) -> str:
        return f"decoded as {self.decoder}: {self.evidence}"


def _rows(name: str, outputs: Sequence[np.ndarray], image_size: tuple[int, int] | None) -> Rows:
    if name == "yolox":
        return _yolox_rows(outputs, image_size)
    if name == "scores_boxes":
        return _scores_boxes_rows(outputs)
    return _yolo_rows(outputs, objectness=name == "yolov5")


def _checked(boxes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """The boxes [K, 4] of every image's best-scoring anchors: up to CHECKED_ROWS each, of those scoring at least
    RANKED_SCORE where any does (so an empty head's zero rows are not judged), else of all (an image that found
    nothing, beside others that did)."""
    picked = []
    for image_boxes, image_scores in zip(boxes, scores, strict=True):
        best = image_scores.max(-1) if image_scores.shape[-1] else np.zeros(len(image_scores))
        order = np.argsort(-best, kind="stable")
        scoring = order[best[order] >= RANKED_SCORE]
        picked.append(image_boxes[(scoring if len(scoring) else order)[:CHECKED_ROWS]])
    return np.concatenate(picked) if picked else np.zeros((0, 4))


def read_as(name: str, outputs: Sequence[np.ndarray], image_size: tuple[int, int] | None = None) -> Reading:
    """``outputs`` read by the built-in decoder ``name``, and whether what it reads is plausible on these samples:
    scores in 0..1 (a sigmoid's), most of the best-scoring boxes at least PLAUSIBLE_SIDE pixels on each side, and,
    where the input's size is known (``image_size``, or the grid a yolox head implies), most of their centres
    inside it and their sides at most twice its; else most centres at non-negative coordinates."""
    try:
        boxes, scores = _rows(name, outputs, image_size)
    except BadInput as error:
        return Reading(name, False, error.message)
    except (ValueError, IndexError) as error:
        return Reading(name, False, f"cannot read these outputs ({error})")
    if boxes.size == 0 or scores.size == 0:
        return Reading(name, False, "no anchors to read")
    if not np.isfinite(scores).all() or scores.min() < -SCORE_SLACK or scores.max() > 1 + SCORE_SLACK:
        return Reading(name, False, f"its scores run {np.nanmin(scores):.3g}..{np.nanmax(scores):.3g}, not 0..1 as "
                                    "a detector's class scores do")
    if scores.max() < RANKED_SCORE:
        return Reading(name, False, f"no anchor scores {RANKED_SCORE:g} or more: no box to judge it by")
    top = _checked(boxes, scores)
    width, height = top[:, 2] - top[:, 0], top[:, 3] - top[:, 1]
    centre_x, centre_y = (top[:, 0] + top[:, 2]) / 2, (top[:, 1] + top[:, 3]) / 2
    sized = float(np.mean((width >= PLAUSIBLE_SIDE) & (height >= PLAUSIBLE_SIDE)))
    facts = [f"its best boxes {np.median(width):.3g}x{np.median(height):.3g} px (median)"]
    wrong = [] if sized >= MAJORITY else [f"only {100 * sized:.0f}% of them {PLAUSIBLE_SIDE:g} px or more a side"]
    if image_size is None and name == "yolox":
        side = square_side(boxes.shape[1])
        image_size = (side, side) if side else None
    if image_size is not None:
        rows_px, cols_px = image_size
        inside = float(np.mean((centre_x >= 0) & (centre_x <= cols_px) & (centre_y >= 0) & (centre_y <= rows_px)))
        small = float(np.mean((width <= 2 * cols_px) & (height <= 2 * rows_px)))
        where = f"{100 * inside:.0f}% of their centres inside the {rows_px}x{cols_px} input"
        facts.append(where)
        wrong += ([f"only {where}"] if inside < MAJORITY else []) + (
            [f"{100 * (1 - small):.0f}% of them over twice its size"] if small < MAJORITY else [])
    else:
        placed = float(np.mean((centre_x >= 0) & (centre_y >= 0)))
        where = f"{100 * placed:.0f}% of their centres at non-negative coordinates"
        facts.append(where)
        wrong += [f"only {where}"] if placed < MAJORITY else []
    if wrong:
        return Reading(name, False, f"{facts[0]}, " + ", ".join(wrong))
    return Reading(name, True, ", ".join(facts) + ", scores in 0..1")


def candidates(shapes: Sequence[tuple[int, ...]]) -> list[str]:
    """The built-in decoders that could read outputs of ``shapes``, the one their layout calls for first."""
    if scores_and_boxes(shapes):
        return ["scores_boxes"]
    if not shapes or not fits(tuple(shapes[0])):
        return []
    first = default_decoder(shapes)
    return [first, *(name for name in ("yolov8", "yolov5", "yolox") if name != first)]


def choose(outputs: Sequence[np.ndarray], image_size: tuple[int, int] | None = None,
           ) -> tuple[Reading | None, list[Reading]]:
    """The first built-in decoder (in :func:`candidates`' order) whose reading of ``outputs`` is plausible, or
    None; and every reading tried, for the line that says why none was."""
    readings = []
    for name in candidates([tuple(np.asarray(o).shape) for o in outputs]):
        reading = read_as(name, outputs, image_size)
        readings.append(reading)
        if reading.plausible:
            return reading, readings
    return None, readings


def unrecognised(readings: Sequence[Reading]) -> str:
    """Why no built-in decoder read the head, one clause per decoder tried."""
    tried = "; ".join(f"{r.decoder}: {r.evidence}" for r in readings) or "no built-in decoder fits its layout"
    return f"could not recognise the detector's head ({tried})"


def map_interval(table: MatchTable, point: float) -> Interval:
    """mAP@0.5's interval over the images: the bootstrap over images, at least as wide as Wilson's at the same
    share (trtpipe.intervals.share_interval): 32 crops that all agree give 89.3-100 %, not 100-100 %."""
    return share_interval(point, lambda index: _or_nan(table.mean(index)), table.images)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


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
    agreed = MatchTable(truth, candidate)
    agreement = agreed.mean()
    figures = {"reference_boxes": float(sum(len(t.scores) for t in truth)),
               "candidate_boxes": float(sum(len(c.above(TRUTH_SCORE).scores) for c in candidate))}
    accuracy = reference_accuracy = accuracy_interval = drop_interval = None
    if labels is not None:
        referenced, labelled = MatchTable(labels, reference), MatchTable(labels, candidate)
        reference_accuracy, accuracy = referenced.mean(), labelled.mean()
        if accuracy is not None and reference_accuracy is not None:
            accuracy_interval = map_interval(labelled, accuracy)
            drop_interval = paired_drop(lambda i: _or_nan(referenced.mean(i)), lambda i: _or_nan(labelled.mean(i)),
                                        len(labels))
    note = None if agreement is not None else (f"the reference found no box scoring {TRUTH_SCORE:g} or more on "
                                               "these samples: mAP not measured")
    return Fidelity(Task.DETECT, agreement, "mAP@0.5 vs FP32", figures, accuracy, reference_accuracy,
                    "mAP@0.5" if labels is not None else None, note,
                    agreement_interval=None if agreement is None else map_interval(agreed, agreement),
                    accuracy_interval=accuracy_interval, drop_interval=drop_interval,
                    agreement_on=None if agreement is None else lambda i: _or_nan(agreed.mean(i)))


def measure(reference: np.ndarray, candidate: np.ndarray, labels: object | None,
            decoder: Decoder | None = None, outputs: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
            ) -> Fidelity:
    """mAP@0.5 of ``candidate``'s detections against ``reference``'s: the raw heads decoded by the decoder their
    layout calls for, or every output (``outputs``) by the user's ``decoder``."""
    references, candidate_outputs = outputs if outputs is not None else ([reference], [candidate])
    how = None
    if decoder is None:
        chosen, readings = choose(references)
        if chosen is None:
            return Fidelity(Task.DETECT, None, "mAP@0.5 vs FP32",
                            note=f"{unrecognised(readings)}: mAP not measured; give --postprocess MODULE:FN that "
                                 "decodes it, or --task generic")
        decoder, how = DECODERS[chosen.decoder], chosen.line()
    truth = label_detections(labels, len(reference)) if labels is not None else None
    found = measure_detections(_decoded(decoder, references), _decoded(decoder, candidate_outputs), truth)
    return replace(found, measured_by=how) if how else found


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
