"""Boxes and their matching: one image's detections, class-wise non-maximum suppression, and mAP@0.5 of ranked
detections against a truth, each image's matches made once (:class:`MatchTable`) so that a bootstrap over images
resamples arithmetic, not matching. The detection measure (``trtpipe.tasks.detect``) decodes heads into these."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NMS_IOU = 0.7
MAX_DETECTIONS = 300
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


def _image_hits(truth: Detections, ranked: Detections, cls: int) -> tuple[np.ndarray, np.ndarray, int]:
    """One image's ``ranked`` boxes of class ``cls``, best score first, matched greedily to the unmatched ``truth``
    box of that class they overlap most: their scores, whether each matched, and the image's truth count."""
    truth_boxes = truth.boxes[truth.classes == cls]
    mine = ranked.classes == cls
    boxes, scores = ranked.boxes[mine], ranked.scores[mine]
    taken = np.zeros(len(truth_boxes), dtype=bool)
    overlaps = box_iou(boxes, truth_boxes) if len(truth_boxes) else np.zeros((len(boxes), 0))
    order = np.argsort(-scores, kind="stable")
    matched = np.zeros(len(order), dtype=bool)
    for position, j in enumerate(order):
        candidates = np.where(taken, -1.0, overlaps[j]) if len(truth_boxes) else np.empty(0)
        best = int(candidates.argmax()) if candidates.size else -1
        if best >= 0 and candidates[best] >= MATCH_IOU:
            taken[best] = matched[position] = True
    return scores[order].astype(np.float64), matched, len(truth_boxes)


class MatchTable:
    """Every image's matches of ``ranked`` to ``truth``, per class, made once: the mAP@0.5 of any resample of the
    images (with repeats, as the bootstrap draws them) is then arithmetic on these, no box matched again. Matching
    is within an image, so an image repeated k times counts its hits and truth boxes k times."""

    def __init__(self, truth: list[Detections], ranked: list[Detections]) -> None:
        self.images = len(truth)
        found = [t.classes for t in truth]
        self.classes = [int(c) for c in np.unique(np.concatenate(found))] if found else []
        self._per_class = []
        for cls in self.classes:
            hits = [_image_hits(t, r, cls) for t, r in zip(truth, ranked, strict=True)]
            scores = np.concatenate([h[0] for h in hits]) if hits else np.empty(0)
            matched = np.concatenate([h[1] for h in hits]) if hits else np.empty(0, dtype=bool)
            image = np.concatenate([np.full(len(h[0]), i) for i, h in enumerate(hits)]) if hits else np.empty(0, int)
            order = np.argsort(-scores, kind="stable")  # image order among equal scores, as one pooled list has it
            totals = np.array([h[2] for h in hits], dtype=np.float64)
            self._per_class.append((matched[order].astype(np.float64), image[order], totals))

    def average_precision(self, position: int, weights: np.ndarray) -> float | None:
        """AP of the ``position``-th class with each image counted ``weights[image]`` times; None where the
        truth has no box of that class among them. All-point interpolation: precision made monotone from the
        right, integrated over recall's steps."""
        matched, image, totals = self._per_class[position]
        total = float((weights * totals).sum())
        if total == 0:
            return None
        counted = weights[image]
        if not counted.any():
            return 0.0
        tp, seen = np.cumsum(counted * matched), np.cumsum(counted)
        precision = np.where(seen > 0, tp / np.where(seen > 0, seen, 1.0), 0.0)
        precision = np.maximum.accumulate(precision[::-1])[::-1]
        return float((counted * matched * precision).sum() / total)

    def mean(self, index: np.ndarray | None = None) -> float | None:
        """mAP@0.5 over the classes present in the truth of the images ``index`` picks (all: None), or None
        where their truth has no box at all."""
        weights = np.ones(self.images) if index is None else np.bincount(index, minlength=self.images).astype(float)
        aps = [ap for position in range(len(self.classes))
               if (ap := self.average_precision(position, weights)) is not None]
        return float(np.mean(aps)) if aps else None


def average_precision(truth: list[Detections], ranked: list[Detections], cls: int) -> float | None:
    """AP at IoU 0.5 of class ``cls``: ``ranked`` boxes matched greedily, best score first, to the unmatched
    ``truth`` box of the same image they overlap most; None when the truth has no box of that class."""
    table = MatchTable(truth, ranked)
    if cls not in table.classes:
        return None
    return table.average_precision(table.classes.index(cls), np.ones(len(truth)))


def mean_average_precision(truth: list[Detections], ranked: list[Detections]) -> float | None:
    """mAP@0.5 over the classes present in ``truth``; None when the truth has no box at all."""
    return MatchTable(truth, ranked).mean()
