"""Numerical proof that an artifact computes what the PyTorch model computes.

The artifact and PyTorch FP32 run the same inputs through the runtime seam: random batches of several sizes
(so a batch axis that was silently fixed at export shows up) and, for a model with a bundled data set, every
held-out image, where top-1 agreement and accuracy mean something.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe.artifact.records.sections import VerificationRecord
from trtpipe.comparison import Comparison, OutputFigures, Tolerance, compare, merge
from trtpipe.convert.options import ConvertOptions
from trtpipe.inputs import Batch, random_batch
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.base import Backend
from trtpipe.vocab import Task

RANDOM_BATCHES_DYNAMIC = (1, 2, 5)
REAL_DATA_CHUNK = 128


def tolerance_of(options: ConvertOptions) -> Tolerance:
    """The bounds convert's options give (FP32's defaults unless told otherwise)."""
    return Tolerance(options.atol, options.rtol, options.min_cosine)


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
        """One line: the case and the output furthest past the tolerance, with its figures."""
        tol = self.tolerance

        def excess(output: OutputFigures) -> float:
            error = output.max_abs_err / tol.allowed_abs(output.ref_max_abs)
            return max(error, (1 - output.cosine) / max(1 - tol.min_cosine, 1e-12))

        case, out = max(((c, o) for c in self.cases if not c.passed for o in c.comparison.outputs),
                        key=lambda pair: excess(pair[1]))
        named = f" (output '{out.name}' of {len(case.comparison.outputs)})" if len(case.comparison.outputs) > 1 else ""
        task = case.comparison
        figure = f", {task.agreement_name} {_pct(task.agreement)}" if task.agreement_name else ""
        return (f"{what} differs from PyTorch FP32 beyond tolerance on {case.label}{named}: max abs error "
                f"{out.max_abs_err:.3g} (allowed {tol.allowed_abs(out.ref_max_abs):.3g} = atol {tol.atol:g} + rtol "
                f"{tol.rtol:g} x max|ref| {out.ref_max_abs:.3g}), max rel error {out.max_rel_err:.3g}, "
                f"cosine {out.cosine:.6f} (min {tol.min_cosine}){figure}.")

    def record(self) -> VerificationRecord:
        """What the manifest records of this verification (``details.verification``)."""
        overall, tol = self.overall, self.tolerance
        return VerificationRecord(self.passed, tol.atol, tol.rtol, tol.min_cosine, overall.max_abs_err,
                                  overall.max_rel_err, overall.cosine, overall.top1_agreement, self.dataset,
                                  self.reference_accuracy, self.candidate_accuracy,
                                  tuple(case.to_dict() for case in self.cases), self.eval_samples)

    def to_dict(self) -> dict[str, Any]:
        return self.record().to_dict()


def verification_inputs(loaded: LoadedModel, dynamic_batch: bool, seed: int = 0) -> list[tuple[str, Batch]]:
    """Random batches of every input, each in its dtype and range: three sizes when the batch axis is dynamic,
    else three draws of the fixed size."""
    rng = np.random.default_rng(seed)
    sizes = RANDOM_BATCHES_DYNAMIC if dynamic_batch else (loaded.input_shape[0],) * 3
    return [(f"random batch of {b}", random_batch(loaded.inputs, b, rng)) for b in sizes]


def _fed(batch: Batch, backend: Backend) -> Batch | list[np.ndarray]:
    """``batch`` as ``backend`` takes it: by name where it names the inputs so, else in order (an ONNX file
    exported elsewhere may call them otherwise)."""
    if isinstance(batch, np.ndarray) or set(batch) == {t.name for t in backend.inputs}:
        return batch
    return list(batch.values())


def verify_backends(
    reference: Backend,
    candidate: Backend,
    loaded: LoadedModel,
    *,
    dynamic_batch: bool,
    tolerance: Tolerance = FP32_TOLERANCE,
    task: Task | None = None,
) -> VerificationReport:
    """Run both backends on the same inputs and judge every output of the candidate against ``tolerance`` (the
    worst output decides), named as the candidate names them."""
    report = VerificationReport(tolerance)
    names = [t.name for t in candidate.outputs]
    for label, batch in verification_inputs(loaded, dynamic_batch):
        agreement = compare(reference.run(_fed(batch, reference)), candidate.run(_fed(batch, candidate)),
                            names=names, task=task, decoder=loaded.decoder)
        report.cases.append(CaseResult(label, agreement, tolerance.accepts(agreement)))
    data = loaded.evaluation_data()
    if data is not None:
        ref_outputs = reference.run_chunked(data.images, REAL_DATA_CHUNK)
        cand_outputs = candidate.run_chunked(data.images, REAL_DATA_CHUNK)
        usable = len(cand_outputs[0])
        comparison = compare([r[:usable] for r in ref_outputs], cand_outputs, data.labels, names=names,
                             task=task, decoder=loaded.decoder)
        report.cases.append(CaseResult(data.description, comparison, tolerance.accepts(comparison)))
        report.dataset = loaded.dataset
        report.eval_samples = usable
        report.reference_accuracy = comparison.reference_accuracy
        report.candidate_accuracy = comparison.accuracy
    return report


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"
