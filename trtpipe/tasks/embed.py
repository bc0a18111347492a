"""Embeddings ``[N, D]``: the cosine between each sample's reference and candidate vectors (mean and worst). The
mean's interval is the bootstrap over samples (a cosine is a measurement, not a share of samples that agree, so
it has no Wilson floor)."""

from __future__ import annotations

import numpy as np

from trtpipe.intervals import bootstrap_values
from trtpipe.tasks.base import Fidelity
from trtpipe.vocab import Task

EXPECTED = "[N, D] one vector per sample"


def fits(shape: tuple[int, ...]) -> bool:
    return len(shape) == 2


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    dots = (reference * candidate).sum(1)
    cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 1.0)
    return Fidelity(Task.EMBED, float(cosines.mean()), "mean cosine", {"min_cosine": float(cosines.min())},
                    agreement_interval=bootstrap_values(cosines, np.mean),
                    agreement_on=lambda i: float(cosines[i].mean()))
