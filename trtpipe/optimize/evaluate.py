"""Accuracy figures of a candidate model against the FP32 model it came from."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import onnx

from trtpipe.metrics import compare, top1_accuracy
from trtpipe.runtime.onnxruntime_backend import OnnxRuntimeBackend

EVAL_BATCH = 64


@dataclass(frozen=True)
class Figures:
    samples: int
    fp32_accuracy: float | None  # None without labels
    accuracy: float | None
    top1_agreement: float
    max_logit_err: float
    mean_logit_err: float
    cosine: float

    @property
    def drop_pp(self) -> float | None:
        """Accuracy lost, in percentage points (negative when the candidate scores higher)."""
        if self.fp32_accuracy is None or self.accuracy is None:
            return None
        return 100.0 * (self.fp32_accuracy - self.accuracy)

    def to_dict(self) -> dict[str, float | int | None]:
        return {**asdict(self), "accuracy_drop_pp": self.drop_pp}

    def line(self) -> str:
        text = (f"top-1 agreement {100 * self.top1_agreement:.2f}%, max logit error {self.max_logit_err:.3g}, "
                f"mean {self.mean_logit_err:.3g} on {self.samples} samples")
        if self.accuracy is not None and self.fp32_accuracy is not None:
            text = (f"accuracy {100 * self.accuracy:.2f}% vs FP32 {100 * self.fp32_accuracy:.2f}% "
                    f"({self.drop_pp:+.2f} pp drop), " + text)
        return text


def logits(model: onnx.ModelProto, images: np.ndarray, *, optimization: str = "all",
           batch: int | None = None) -> np.ndarray:
    """Run ``model`` over ``images`` with ONNX Runtime CPU; a static batch size drops the remainder."""
    with OnnxRuntimeBackend(model, optimization=optimization) as backend:
        size = batch or EVAL_BATCH
        usable = len(images) - len(images) % size if batch else len(images)
        return np.concatenate([backend.run(images[i : i + size])[0] for i in range(0, usable, size)])


def figures(reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray | None) -> Figures:
    agreement = compare(reference, candidate)
    labels = None if labels is None else labels[: len(reference)]
    return Figures(
        samples=agreement.samples,
        fp32_accuracy=None if labels is None else top1_accuracy(reference, labels),
        accuracy=None if labels is None else top1_accuracy(candidate, labels),
        top1_agreement=agreement.top1_agreement if agreement.top1_agreement is not None else 1.0,
        max_logit_err=agreement.max_abs_err,
        mean_logit_err=agreement.mean_abs_err,
        cosine=agreement.cosine,
    )
