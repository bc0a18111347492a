"""How far one set of outputs is from a reference: the figures verification and bench both report."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    max_abs_err: float
    mean_abs_err: float
    max_rel_err: float
    cosine: float
    top1_agreement: float | None  # None when the output is not a batch of class scores
    ref_max_abs: float
    samples: int

    def to_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def compare(reference: np.ndarray, candidate: np.ndarray) -> Agreement:
    """Compare ``candidate`` with ``reference`` (same shape); both are cast to float64 first."""
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
    top1 = None
    if ref.ndim == 2 and ref.shape[1] > 1:
        top1 = float(np.mean(ref.argmax(1) == out.argmax(1)))
    return Agreement(
        max_abs_err=float(diff.max()) if diff.size else 0.0,
        mean_abs_err=float(diff.mean()) if diff.size else 0.0,
        max_rel_err=float((diff / np.maximum(scale, floor)).max()) if diff.size else 0.0,
        cosine=cosine,
        top1_agreement=top1,
        ref_max_abs=float(scale.max()) if scale.size else 0.0,
        samples=int(ref.shape[0]) if ref.ndim else 1,
    )


def merge(parts: list[Agreement]) -> Agreement:
    """Worst case over several batches (means weighted by samples)."""
    total = sum(p.samples for p in parts)
    tops = [(p.top1_agreement, p.samples) for p in parts if p.top1_agreement is not None]
    return Agreement(
        max_abs_err=max(p.max_abs_err for p in parts),
        mean_abs_err=sum(p.mean_abs_err * p.samples for p in parts) / total,
        max_rel_err=max(p.max_rel_err for p in parts),
        cosine=min(p.cosine for p in parts),
        top1_agreement=sum(t * n for t, n in tops) / sum(n for _, n in tops) if tops else None,
        ref_max_abs=max(p.ref_max_abs for p in parts),
        samples=total,
    )


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(1) == labels))
