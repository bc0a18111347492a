"""Dense maps: one value per pixel ``[N, 1, H, W]`` (a text detector's probability map, a saliency or depth map).
F1 of the candidate's map above a threshold against the reference's, and the mean absolute error. F1 is pooled
over the images' pixels, its interval the bootstrap over images (the unit), at least as wide as Wilson's."""

from __future__ import annotations

import numpy as np

from trtpipe.tasks.base import Fidelity, paired_drop, pooled_share
from trtpipe.vocab import Task

EXPECTED = "[N, 1, H, W] a map of one value per pixel"
# DBNet's binarisation threshold (PaddleOCR's det_db_thresh), the most common dense map shipped: a text map.
THRESHOLD = 0.3


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 4 and shape[1] == 1


def f1(truth: np.ndarray, predicted: np.ndarray) -> float:
    """F1 of boolean ``predicted`` against boolean ``truth``; 1.0 where both are empty."""
    tp = float(np.logical_and(truth, predicted).sum())
    wrong = float(np.logical_xor(truth, predicted).sum())
    return 1.0 if tp + wrong == 0 else 2 * tp / (2 * tp + wrong)


def f1_terms(truth: np.ndarray, predicted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image (the first axis), F1's numerator 2 TP and denominator 2 TP + FP + FN: pooled over any images, F1
    is the sum of the first over the sum of the second."""
    flat_truth, flat_predicted = truth.reshape(len(truth), -1), predicted.reshape(len(predicted), -1)
    tp = 2.0 * np.logical_and(flat_truth, flat_predicted).sum(1)
    return tp, tp + np.logical_xor(flat_truth, flat_predicted).sum(1)


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    figures = {"mean_abs_err": float(np.abs(reference - candidate).mean()), "threshold": THRESHOLD}
    agreement, agreement_interval, agreement_on = pooled_share(*f1_terms(reference > THRESHOLD, candidate > THRESHOLD))
    accuracy = reference_accuracy = accuracy_interval = drop_interval = None
    if labels is not None:
        truth = np.asarray(labels)[: len(reference)].reshape(reference.shape) > 0.5
        ref_terms, terms = f1_terms(truth, reference > THRESHOLD), f1_terms(truth, candidate > THRESHOLD)
        reference_accuracy, _, reference_on = pooled_share(*ref_terms)
        accuracy, accuracy_interval, accuracy_on = pooled_share(*terms)
        drop_interval = paired_drop(reference_on, accuracy_on, len(reference))
    return Fidelity(Task.DENSE, agreement, f"F1 at {THRESHOLD:g} vs FP32",
                    figures, accuracy, reference_accuracy, f"F1 at {THRESHOLD:g}" if labels is not None else None,
                    agreement_interval=agreement_interval, accuracy_interval=accuracy_interval,
                    drop_interval=drop_interval, agreement_on=agreement_on)

