"""Segmenters: per-pixel class scores ``[N, C, H, W]``. Pixel agreement and mIoU against the reference's
argmax; pixel accuracy against label masks ``[N, H, W]`` (class indices). The image is the unit of the intervals
(its pixels are not independent): the bootstrap over images, at least as wide as Wilson's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trtpipe.tasks.base import Fidelity, paired_drop, pooled_share
from trtpipe.vocab import Task

EXPECTED = "[N, C, H, W] per-pixel class scores (C > 1)"


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] > 1


def mean_iou(truth: np.ndarray, predicted: np.ndarray) -> float:
    """Mean over the classes present in ``truth`` of |truth ∩ predicted| / |truth ∪ predicted|."""
    ious = []
    for cls in np.unique(truth):
        t, p = truth == cls, predicted == cls
        ious.append(np.logical_and(t, p).sum() / np.logical_or(t, p).sum())
    return float(np.mean(ious)) if ious else 1.0


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    ref, cand = reference.argmax(1), candidate.argmax(1)
    figures = {"miou": mean_iou(ref, cand)}
    per_image = ref.reshape(len(ref), -1) == cand.reshape(len(cand), -1)
    agreement, agreement_interval, agreement_on = pooled_share(per_image.sum(1), np.full(len(ref), per_image.shape[1]))
    accuracy = reference_accuracy = accuracy_interval = drop_interval = None
    if labels is not None:
        masks = np.asarray(labels)[: len(ref)]
        if masks.shape != ref.shape:
            from trtpipe.errors import BadInput

            raise BadInput(f"Segmentation labels have shape {masks.shape}; the model's class maps are {ref.shape}: "
                           "give one class index per pixel, [N, H, W].")
        # Pixels labelled outside the model's classes are "ignore" (VOC marks boundaries 255), as segmentation
        # benchmarks score them; masks with no pixel inside are not labels of this model.
        valid = (masks >= 0) & (masks < reference.shape[1])
        if not valid.any():
            from trtpipe.errors import BadInput

            raise BadInput(f"Segmentation labels hold no class of the model's 0..{reference.shape[1] - 1} (they run "
                           f"{masks.min()}..{masks.max()}): give the masks of this model's classes.")
        counted = valid.reshape(len(ref), -1).sum(1)
        ref_right = ((ref == masks) & valid).reshape(len(ref), -1).sum(1)
        right = ((cand == masks) & valid).reshape(len(ref), -1).sum(1)
        reference_accuracy = float(ref_right.sum() / counted.sum())
        accuracy, accuracy_interval, _ = pooled_share(right, counted)

        def pooled(hits: np.ndarray) -> Callable[[np.ndarray], float]:
            return lambda i: float(hits[i].sum() / max(int(counted[i].sum()), 1))

        drop_interval = paired_drop(pooled(ref_right), pooled(right), len(ref))
        figures["miou_labels"] = mean_iou(masks[valid], cand[valid])
        figures["ignored_pixels"] = float(1 - valid.mean())
    return Fidelity(Task.SEGMENT, agreement, "pixel agreement", figures, accuracy,
                    reference_accuracy, "pixel accuracy" if labels is not None else None,
                    agreement_interval=agreement_interval, accuracy_interval=accuracy_interval,
                    drop_interval=drop_interval, agreement_on=agreement_on)
