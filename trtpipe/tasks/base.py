"""What every task measure returns: its figures against the reference (FP32's own outputs), the one figure an
accuracy budget is judged on, and, with labels, the same figure against the labels for both models; each with
its 95 % interval over the samples it was judged on (trtpipe.intervals): Wilson's for a share of samples (top-1),
the bootstrap over images widened to at least Wilson's for a share pooled over images (mAP, pixels, F1), and the
paired bootstrap for the accuracy drop with labels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trtpipe.intervals import Interval, difference_interval, share_interval
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
    agreement_interval: Interval | None = None  # ``agreement``'s 95 % interval over the samples
    accuracy_interval: Interval | None = None  # ``accuracy``'s, with labels
    drop_interval: Interval | None = None  # ``reference_accuracy - accuracy``'s (paired, same samples), with labels
    measured_by: str | None = None  # how the outputs were read, where a choice was made ("decoded as yolox: ...")
    # The 95 % intervals of figures beside the headline that are shares too (a recognizer's per-character agreement)
    figure_intervals: dict[str, Interval] = field(default_factory=dict)
    # ``agreement`` on the samples an index array picks (with repeats, as a bootstrap draws them): two candidates
    # judged on the same samples are compared pair by pair through it (trtpipe.optimize.judging.step_rule). Not written.
    agreement_on: Callable[[np.ndarray], float] | None = field(default=None, repr=False, compare=False)


def as_float(array: np.ndarray) -> np.ndarray:
    return np.asarray(array, dtype=np.float64)


def pooled_share(hits: np.ndarray, totals: np.ndarray,
                 empty: float = 1.0) -> tuple[float, Interval, Callable[[np.ndarray], float]]:
    """A share pooled over images (``hits`` of ``totals`` per image: pixels that agree, a map's F1 terms), its
    interval, the bootstrap over images at least as wide as Wilson's (pixels of one image are not independent:
    the image is the unit), and the share on the images an index array picks. ``empty``: the share where every
    total is zero."""
    hits, totals = as_float(hits), as_float(totals)

    def share(index: np.ndarray) -> float:
        total = totals[index].sum()
        return float(hits[index].sum() / total) if total > 0 else empty

    point = share(np.arange(len(hits)))
    return point, share_interval(point, share, len(hits)), share


def paired_drop(reference: Callable[[np.ndarray], float], candidate: Callable[[np.ndarray], float],
                units: int) -> Interval:
    """The interval of ``reference - candidate`` (each a figure over the images an index array picks), both
    measured on the same resampled images (see trtpipe.intervals.difference_interval)."""
    every = np.arange(units)
    ceiling = reference(every)  # the candidate's share is in 0..1, so the drop is in ceiling - 1 .. ceiling
    found = difference_interval(ceiling - candidate(every), lambda i: reference(i) - candidate(i), units)
    return Interval(max(found.low, ceiling - 1.0), min(found.high, ceiling), found.units, found.method, found.level)
