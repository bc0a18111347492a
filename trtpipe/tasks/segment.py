"""Segmenters: per-pixel class scores ``[N, C, H, W]``. Pixel agreement and mIoU against the reference's
argmax; pixel accuracy against label masks ``[N, H, W]`` (class indices). The image is the unit of the intervals
(its pixels are not independent): the bootstrap over images, at least as wide as Wilson's."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trtpipe.tasks.base import Fidelity, paired_drop, pooled_share
from trtpipe.vocab import Task

EXPECTED = "[N, C, H, W] per-pixel class scores (C > 1)"
# Evidence of class scores (see :func:`class_scores`): at least two classes each the best at this share of the pixels
MIN_CLASS_SHARE = 1e-3


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] > 1


def class_scores(scores: np.ndarray) -> tuple[bool, str]:
    """Whether ``scores`` [N, C, H, W] read as per-pixel class scores, and the evidence either way: the channel
    argmax picks two classes or more (each the best at MIN_CLASS_SHARE of the pixels at least: one class everywhere
    segments nothing), as probabilities, log-probabilities or logits across the channels. (Pixel-like values, an
    image's, are told apart before: trtpipe.tasks.restore.looks_like_pixels.)"""
    if scores.ndim != 4 or scores.shape[1] < 2 or not np.isfinite(scores).all() or scores.size == 0:
        return False, "not finite per-pixel scores of two channels or more"
    best = scores.argmax(1).ravel()
    counts = np.bincount(best, minlength=scores.shape[1])
    winners = int((counts >= MIN_CLASS_SHARE * len(best)).sum())
    common = int(counts.argmax())
    share = f"{100 * counts[common] / len(best):.0f}%"
    if winners < 2:
        return False, f"the channel argmax is class {common} at {share} of the pixels: one class everywhere"
    if scores.min() >= 0 and scores.max() <= 1 and np.abs(scores.sum(1) - 1).max() <= 1e-2:
        kind = "probabilities (each pixel's sum 1)"
    elif scores.max() <= 0 and np.abs(np.log(np.exp(scores).sum(1))).max() <= 1e-2:
        kind = "log-probabilities"
    else:
        kind = f"logits (values {float(scores.min()):.3g}..{float(scores.max()):.3g}, not pixels)"
    return True, (f"{kind} over {scores.shape[1]} classes, the argmax picking {winners} of them (class {common} the "
                  f"most common, at {share} of the pixels)")


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
