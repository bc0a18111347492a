"""Numerical proof that an AOTInductor package computes what the PyTorch model computes in FP32.

As convert checks an ONNX file (trtpipe/convert/verify.py), the package and PyTorch FP32 eager run the same inputs
through the runtime seam: seeded random batches of several sizes inside the package's batch range (a batch the
export fixed shows up) and, for a model with a bundled data set, every held-out sample, in chunks the range
allows. Every output is compared (trtpipe.comparison) and judged against a tolerance of the package's precision:
an FP16 or BF16 package cannot match FP32 to FP32's 1e-4, so each precision has its own bound, as torch2trt's
cross-validation has. The stages are independent of each other, so the few lines that judge a comparison are here
rather than imported from convert.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe.artifact.records.sections import VerificationRecord
from trtpipe.comparison import Comparison, Tolerance, compare, merge
from trtpipe.compile.options import CompileOptions
from trtpipe.inputs import Batch, count, random_batch, take
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.base import Backend
from trtpipe.runtime.batch_axes import join
from trtpipe.vocab import Precision

RANDOM_BATCHES = (1, 2, 5)  # as convert's: clipped into the package's range
REAL_DATA_CHUNK = 128
# (atol, rtol, min cosine) per precision: FP32 as convert's; FP16 and BF16 as their mantissas allow (10 and 7 bits).
TOLERANCES = {Precision.FP32: (1e-4, 1e-4, 0.9999), Precision.FP16: (1e-3, 1e-2, 0.999),
              Precision.BF16: (1e-2, 5e-2, 0.99)}


def tolerance_of(options: CompileOptions) -> Tolerance:
    """The options' bounds, each one not given taken from the precision's."""
    atol, rtol, cosine = TOLERANCES[options.precision]
    return Tolerance(atol if options.atol is None else options.atol, rtol if options.rtol is None else options.rtol,
                     cosine if options.min_cosine is None else options.min_cosine)


@dataclass
class Verification:
    tolerance: Tolerance
    cases: list[tuple[str, Comparison, bool]] = field(default_factory=list)  # (inputs, comparison, passed)
    dataset: str | None = None

    @property
    def passed(self) -> bool:
        return all(passed for _, _, passed in self.cases)

    @property
    def overall(self) -> Comparison:
        return merge([comparison for _, comparison, _ in self.cases])

    def failure_message(self, what: str) -> str:
        """One line: the first case that failed, its worst output and the bound it broke."""
        label, comparison = next((label, c) for label, c, passed in self.cases if not passed)
        tol = self.tolerance
        worst = max(comparison.outputs, key=lambda o: max(o.max_abs_err / max(tol.allowed_abs(o.ref_max_abs), 1e-30),
                                                           (1 - o.cosine) / max(1 - tol.min_cosine, 1e-12)))
        named = f" (output '{worst.name}')" if len(comparison.outputs) > 1 else ""
        return (f"{what} differs from PyTorch FP32 beyond tolerance on {label}{named}: max abs error "
                f"{worst.max_abs_err:.3g} (allowed {tol.allowed_abs(worst.ref_max_abs):.3g}), cosine "
                f"{worst.cosine:.6f} (min {tol.min_cosine}).")

    def line(self) -> str:
        overall = self.overall
        text = (f"max abs error {overall.max_abs_err:.2e}, max rel error {overall.max_rel_err:.2e}, cosine "
                f"{overall.cosine:.6f}")
        if overall.agreement is not None:
            text += f", {overall.agreement_name} {100 * overall.agreement:.2f}%"
        labelled = next((c for _, c, _ in self.cases if c.accuracy is not None), None)
        if labelled is not None and labelled.accuracy is not None and labelled.reference_accuracy is not None:
            text += (f"; held-out {labelled.accuracy_name or 'accuracy'} {100 * labelled.accuracy:.2f}% (PyTorch "
                     f"{100 * labelled.reference_accuracy:.2f}%)")
        return text

    def record(self) -> VerificationRecord:
        """What the manifest records of this verification (``details.verification``)."""
        overall, tol = self.overall, self.tolerance
        return VerificationRecord(self.passed, tol.atol, tol.rtol, tol.min_cosine, overall.max_abs_err,
                                  overall.max_rel_err, overall.cosine, overall.top1_agreement, self.dataset,
                                  overall.reference_accuracy, overall.accuracy,
                                  tuple({"inputs": label, "passed": passed, **comparison.to_dict()}
                                        for label, comparison, passed in self.cases))

    def to_dict(self) -> dict[str, Any]:
        return self.record().to_dict()


def verify_package(reference: Backend, package: Backend, loaded: LoadedModel, batch_range: tuple[int, int],
                   tolerance: Tolerance) -> Verification:
    """Run both on the same inputs, inside ``batch_range``, and judge every output of the package."""
    low, high = batch_range
    report = Verification(tolerance)
    names = [t.name for t in package.outputs]
    rng = np.random.default_rng(0)
    for size in sorted({min(max(b, low), high) for b in RANDOM_BATCHES}):
        batch = random_batch(loaded.inputs, size, rng)
        comparison = compare(reference.run(batch), package.run(batch), names=names, task=loaded.task,
                             decoder=loaded.decoder)
        report.cases.append((f"random batch of {size}", comparison, tolerance.accepts(comparison)))
    data = loaded.evaluation_data()
    if data is not None:
        chunks = _chunks(data.images, min(max(REAL_DATA_CHUNK, low), high), low)
        if chunks:
            outputs, expected = _joined(package, chunks), _joined(reference, chunks)
            labels = None if data.labels is None else data.labels[:len(outputs[0])]
            comparison = compare(expected, outputs, labels, names=names, task=loaded.task, decoder=loaded.decoder)
            report.cases.append((data.description, comparison, tolerance.accepts(comparison)))
            report.dataset = loaded.dataset
    return report


def _joined(backend: Backend, chunks: list[Batch]) -> list[np.ndarray]:
    """Every output over ``chunks``, joined on its own batch axis, samples first (as Backend.run_chunked)."""
    parts = [backend.run(c) for c in chunks]
    axes = backend.batch_axes(chunks[0], parts[0])
    return [join(p, axis, info.name) for p, axis, info in zip(zip(*parts, strict=True), axes.axes, backend.outputs,
                                                               strict=True)]


def _chunks(data: Batch, size: int, smallest: int) -> list[Batch]:
    """``data`` in chunks of ``size`` samples; a last chunk below the range's smallest batch is left out."""
    total = count(data)
    return [take(data, start, start + size) for start in range(0, total, size)
            if min(size, total - start) >= smallest]
