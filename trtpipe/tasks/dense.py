"""Dense maps: one value per pixel ``[N, 1, H, W]`` (a text detector's probability map, a saliency or depth map).
F1 of the candidate's map above a threshold against the reference's, and the mean absolute error."""

from __future__ import annotations

import numpy as np

from trtpipe.tasks.base import Fidelity
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


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    figures = {"mean_abs_err": float(np.abs(reference - candidate).mean()), "threshold": THRESHOLD}
    accuracy = reference_accuracy = None
    if labels is not None:
        truth = np.asarray(labels)[: len(reference)].reshape(reference.shape) > 0.5
        reference_accuracy, accuracy = f1(truth, reference > THRESHOLD), f1(truth, candidate > THRESHOLD)
    return Fidelity(Task.DENSE, f1(reference > THRESHOLD, candidate > THRESHOLD), f"F1 at {THRESHOLD:g} vs FP32",
                    figures, accuracy, reference_accuracy, f"F1 at {THRESHOLD:g}" if labels is not None else None)
