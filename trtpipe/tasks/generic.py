"""Any other outputs: no task figure; every output is still compared (errors, cosine, SNR) by the comparison, so
a budget has nothing to be judged on and is refused."""

from __future__ import annotations

import numpy as np

from trtpipe.tasks.base import Fidelity
from trtpipe.vocab import Task

EXPECTED = "any outputs"


def fits(shape: tuple[int, ...]) -> bool:
    return True


def measure(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Fidelity:
    return Fidelity(Task.GENERIC, None, "per-output cosine, relative error and SNR")
