"""Classifiers: class scores ``[N, C]``. Top-1 and top-5 agreement with the reference; top-1 accuracy with
labels (one class index per sample). Each share of samples with Wilson's interval; the accuracy drop with the
paired bootstrap over samples."""

from __future__ import annotations

import numpy as np

from trtpipe.intervals import wilson
from trtpipe.tasks.base import Fidelity, paired_drop
from trtpipe.vocab import Task

EXPECTED = "[N, C] class scores (C > 1)"


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 2 and shape[1] > 1


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    agrees = reference.argmax(1) == candidate.argmax(1)
    top1 = float(np.mean(agrees))
    k = min(5, reference.shape[1])
    top_k = np.argpartition(-candidate, k - 1, axis=1)[:, :k]
    top5 = float(np.mean((top_k == reference.argmax(1)[:, None]).any(1)))
    accuracy = reference_accuracy = accuracy_interval = drop_interval = None
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)[: len(reference)]
        if len(labels) and (labels.min() < 0 or labels.max() >= reference.shape[1]):
            from trtpipe.errors import BadInput

            raise BadInput(f"Class labels run {labels.min()}..{labels.max()}; the model has {reference.shape[1]} "
                           f"classes (0..{reference.shape[1] - 1}): give labels of this model's classes.")
        ref_right, right = reference.argmax(1) == labels, candidate.argmax(1) == labels
        reference_accuracy, accuracy = float(np.mean(ref_right)), float(np.mean(right))
        accuracy_interval = wilson(int(right.sum()), len(right))
        drop_interval = paired_drop(lambda i: float(ref_right[i].mean()), lambda i: float(right[i].mean()), len(right))
    return Fidelity(Task.CLASSIFY, top1, "top-1 agreement", {"top5_agreement": top5}, accuracy, reference_accuracy,
                    "top-1 accuracy" if labels is not None else None,
                    agreement_interval=wilson(int(agrees.sum()), len(agrees)), accuracy_interval=accuracy_interval,
                    drop_interval=drop_interval, agreement_on=lambda i: float(agrees[i].mean()))
