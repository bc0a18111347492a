"""What every task measure returns: its figures against the reference (FP32's own outputs), the one figure an
accuracy budget is judged on, and, with labels, the same figure against the labels for both models."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trtpipe.vocab import Task


@dataclass(frozen=True)
class Fidelity:
    """A task's figures for a candidate against the reference (both 0..1 where they are shares).

    ``agreement`` is the headline: how much of the reference's answer the candidate gives (top-1 agreement,
    pixel agreement, mAP@0.5 of its detections against the reference's, F1 of a map, cosine), the figure a budget
    is judged on without labels. ``accuracy``/``reference_accuracy``: the same measure against labels.
    """

    task: Task
    agreement: float | None
    agreement_name: str  # what ``agreement`` is, for people: "top-1 agreement", "mAP@0.5 vs FP32"...
    figures: dict[str, float] = field(default_factory=dict)  # the task's other figures (top-5, mIoU, ...)
    accuracy: float | None = None
    reference_accuracy: float | None = None
    accuracy_name: str | None = None  # "top-1 accuracy", "pixel accuracy", ...
    note: str | None = None  # why a figure is missing (no detections in the reference, ...)


def as_float(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)
