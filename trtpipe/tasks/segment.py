"""Segmenters: per-pixel class scores ``[N, C, H, W]``. Pixel agreement and mIoU against the reference's
argmax; pixel accuracy against label masks ``[N, H, W]`` (class indices)."""

from __future__ import annotations

import numpy as np

from trtpipe.tasks.base import Fidelity
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
    accuracy = reference_accuracy = None
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
        reference_accuracy, accuracy = float(np.mean(ref[valid] == masks[valid])), float(np.mean(cand[valid] ==
                                                                                                  masks[valid]))
        figures["miou_labels"] = mean_iou(masks[valid], cand[valid])
        figures["ignored_pixels"] = float(1 - valid.mean())
    return Fidelity(Task.SEGMENT, float(np.mean(ref == cand)), "pixel agreement", figures, accuracy,
                    reference_accuracy, "pixel accuracy" if labels is not None else None)
