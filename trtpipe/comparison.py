"""How far one set of outputs is from a reference: the one comparison type that verification, optimize's
accuracy figures, bench rows and selection all report.

Agreement (errors, cosine, top-1 agreement) is always measured against the reference outputs; accuracy only
where labels exist, for both the reference and the candidate, so an accuracy drop is always a like-for-like
difference measured on the same samples.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float
    mean_abs_err: float
    max_rel_err: float
    cosine: float
    top1_agreement: float | None  # None when the output is not a batch of class scores
    ref_max_abs: float
    samples: int
    reference_accuracy: float | None = None  # None without labels
    accuracy: float | None = None

    @property
    def accuracy_drop_pp(self) -> float | None:
        """Top-1 accuracy lost against the reference, in percentage points (negative: the candidate scores higher);
        rounded to 1e-9 so that 95 of 100 correct loses exactly 5.0 points, not 5.000000000000004 (which a
        5-point budget would refuse)."""
        if self.reference_accuracy is None or self.accuracy is None:
            return None
        return round(100.0 * (self.reference_accuracy - self.accuracy), 9)

    @property
    def agreement_drop_pp(self) -> float | None:
        """Without labels, the share of samples whose top-1 class changed, in percentage points."""
        return None if self.top1_agreement is None else 100.0 * (1.0 - self.top1_agreement)

    @property
    def drop_pp(self) -> float | None:
        """What an accuracy budget is judged on: the accuracy drop with labels, else the top-1 disagreement."""
        drop = self.accuracy_drop_pp
        return drop if drop is not None else self.agreement_drop_pp

    def to_dict(self) -> dict[str, float | int | None]:
        return {**asdict(self), "accuracy_drop_pp": self.accuracy_drop_pp}

    def line(self) -> str:
        text = f"max abs error {self.max_abs_err:.3g}, mean {self.mean_abs_err:.3g}, cosine {self.cosine:.6f}"
        if self.top1_agreement is not None:
            text = f"top-1 agreement {100 * self.top1_agreement:.2f}%, " + text
        if self.accuracy is not None and self.reference_accuracy is not None:
            text = (f"accuracy {100 * self.accuracy:.2f}% vs {100 * self.reference_accuracy:.2f}% "
                    f"({self.accuracy_drop_pp:+.2f} pp drop), " + text)
        return f"{text} on {self.samples} samples"


def compare(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None = None) -> Comparison:
    """Compare ``candidate`` with ``reference`` (same shape; both cast to float64); with ``labels``, also the
    top-1 accuracy of each on the first ``len(reference)`` labels."""
    if reference.shape != candidate.shape:
        raise ValueError(f"output shapes differ: {reference.shape} vs {candidate.shape}")
    ref = reference.astype(np.float64)
    out = candidate.astype(np.float64)
    diff = np.abs(ref - out)
    scale = np.abs(ref)
    # Relative error is only meaningful where the reference is not ~0; the floor is 1e-3 of the output scale.
    floor = max(float(scale.max()) * 1e-3, 1e-12) if scale.size else 1.0
    norm = float(np.linalg.norm(ref) * np.linalg.norm(out))
    cosine = float(np.dot(ref.ravel(), out.ravel()) / norm) if norm > 0 else float(np.array_equal(ref, out))
    classes = ref.ndim == 2 and ref.shape[1] > 1
    top1 = float(np.mean(ref.argmax(1) == out.argmax(1))) if classes else None
    reference_accuracy = accuracy = None
    if labels is not None and classes:
        labels = np.asarray(labels)[: len(ref)]
        reference_accuracy, accuracy = top1_accuracy(ref, labels), top1_accuracy(out, labels)
    return Comparison(
        max_abs_err=float(diff.max()) if diff.size else 0.0,
        mean_abs_err=float(diff.mean()) if diff.size else 0.0,
        max_rel_err=float((diff / np.maximum(scale, floor)).max()) if diff.size else 0.0,
        cosine=cosine,
        top1_agreement=top1,
        ref_max_abs=float(scale.max()) if scale.size else 0.0,
        samples=int(ref.shape[0]) if ref.ndim else 1,
        reference_accuracy=reference_accuracy,
        accuracy=accuracy,
    )


def merge(parts: list[Comparison]) -> Comparison:
    """Worst case over several comparisons (means, agreement and accuracy weighted by samples)."""
    total = sum(p.samples for p in parts)

    def weighted(values: list[tuple[float | None, int]]) -> float | None:
        known = [(v, n) for v, n in values if v is not None]
        return sum(v * n for v, n in known) / sum(n for _, n in known) if known else None

    return Comparison(
        max_abs_err=max(p.max_abs_err for p in parts),
        mean_abs_err=sum(p.mean_abs_err * p.samples for p in parts) / total,
        max_rel_err=max(p.max_rel_err for p in parts),
        cosine=min(p.cosine for p in parts),
        top1_agreement=weighted([(p.top1_agreement, p.samples) for p in parts]),
        ref_max_abs=max(p.ref_max_abs for p in parts),
        samples=total,
        reference_accuracy=weighted([(p.reference_accuracy, p.samples) for p in parts]),
        accuracy=weighted([(p.accuracy, p.samples) for p in parts]),
    )


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(1) == labels))
