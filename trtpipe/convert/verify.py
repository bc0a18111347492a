"""Numerical proof that an artifact computes what the PyTorch model computes.

The artifact and PyTorch FP32 run the same inputs through the runtime seam: random batches of several sizes
(so a batch axis that was silently fixed at export shows up) and, for a model with a bundled data set, every
held-out image, where top-1 agreement and accuracy mean something.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe.comparison import Comparison, compare, merge
from trtpipe.convert.options import ConvertOptions
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.base import Backend

RANDOM_BATCHES_DYNAMIC = (1, 2, 5)
REAL_DATA_CHUNK = 128


@dataclass(frozen=True)
class Tolerance:
    """Allowed error: max |candidate - reference| <= atol + rtol * max |reference|, and a cosine floor.

    The error bound scales with the output's magnitude: random-weight ImageNet nets emit logits in the
    hundreds, the digits model in the tens, and the same absolute bound cannot serve both.
    """

    atol: float = 1e-4
    rtol: float = 1e-4
    min_cosine: float = 0.9999

    def allowed_abs(self, ref_max_abs: float) -> float:
        return self.atol + self.rtol * ref_max_abs

    def accepts(self, agreement: Comparison) -> bool:
        return (agreement.max_abs_err <= self.allowed_abs(agreement.ref_max_abs)
                and agreement.cosine >= self.min_cosine)


    @classmethod
    def of(cls, options: ConvertOptions) -> Tolerance:
        return cls(options.atol, options.rtol, options.min_cosine)


FP32_TOLERANCE = Tolerance()


@dataclass
class CaseResult:
    label: str
    comparison: Comparison
    passed: bool

    def to_dict(self) -> dict[str, Any]:
        return {"inputs": self.label, "passed": self.passed, **self.comparison.to_dict()}


@dataclass
class VerificationReport:
    tolerance: Tolerance
    cases: list[CaseResult] = field(default_factory=list)
    dataset: str | None = None
    eval_samples: int = 0
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases)

    @property
    def overall(self) -> Comparison:
        return merge([case.comparison for case in self.cases])

    def failure_message(self, what: str) -> str:
        worst = max((c for c in self.cases if not c.passed),
                    key=lambda c: c.comparison.max_abs_err / self.tolerance.allowed_abs(c.comparison.ref_max_abs))
        a, tol = worst.comparison, self.tolerance
        return (f"{what} differs from PyTorch FP32 beyond tolerance on {worst.label}: max abs error "
                f"{a.max_abs_err:.3g} (allowed {tol.allowed_abs(a.ref_max_abs):.3g} = atol {tol.atol:g} + rtol "
                f"{tol.rtol:g} x max|ref| {a.ref_max_abs:.3g}), max rel error {a.max_rel_err:.3g}, "
                f"cosine {a.cosine:.6f} (min {tol.min_cosine}), top-1 agreement "
                f"{_pct(a.top1_agreement)}.")

    def to_dict(self) -> dict[str, Any]:
        overall = self.overall
        return {
            "passed": self.passed,
            "tolerance": {"atol": self.tolerance.atol, "rtol": self.tolerance.rtol,
                          "min_cosine": self.tolerance.min_cosine},
            "max_abs_err": overall.max_abs_err,
            "max_rel_err": overall.max_rel_err,
            "cosine": overall.cosine,
            "top1_agreement": overall.top1_agreement,
            "dataset": self.dataset,
            "eval_samples": self.eval_samples,
            "reference_accuracy": self.reference_accuracy,
            "candidate_accuracy": self.candidate_accuracy,
            "cases": [case.to_dict() for case in self.cases],
        }


def verification_inputs(loaded: LoadedModel, dynamic_batch: bool, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Random batches: three sizes when the batch axis is dynamic, else three draws of the fixed size."""
    rng = np.random.default_rng(seed)
    sizes = RANDOM_BATCHES_DYNAMIC if dynamic_batch else (loaded.input_shape[0],) * 3
    return [(f"random batch of {b}", rng.standard_normal((b, *loaded.sample_shape), dtype=np.float32))
            for b in sizes]


def verify_backends(
    reference: Backend,
    candidate: Backend,
    loaded: LoadedModel,
    *,
    dynamic_batch: bool,
    tolerance: Tolerance = FP32_TOLERANCE,
) -> VerificationReport:
    """Run both backends on the same inputs and judge the candidate against ``tolerance``."""
    report = VerificationReport(tolerance)
    for label, batch in verification_inputs(loaded, dynamic_batch):
        agreement = compare(reference.run(batch)[0], candidate.run(batch)[0])
        report.cases.append(CaseResult(label, agreement, tolerance.accepts(agreement)))
    data = loaded.evaluation_data()
    if data is not None:
        ref_logits = reference.run_chunked(data.images, REAL_DATA_CHUNK)
        cand_logits = candidate.run_chunked(data.images, REAL_DATA_CHUNK)
        usable = len(cand_logits)
        comparison = compare(ref_logits[:usable], cand_logits, data.labels)
        report.cases.append(CaseResult(data.description, comparison, tolerance.accepts(comparison)))
        report.dataset = loaded.dataset
        report.eval_samples = usable
        report.reference_accuracy = comparison.reference_accuracy
        report.candidate_accuracy = comparison.accuracy
    return report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"
