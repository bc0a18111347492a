"""Each variant's fidelity to the reference, on the run's one agreement set.

Every output is compared (the worst named) and the task's figure taken (the reference's own run fixes the task),
through :func:`trtpipe.comparison.compare`, the one measure verify, optimize, bench and select share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.bench.rows import BenchRow
from trtpipe.bench.samples import Samples, fed
from trtpipe.comparison import compare
from trtpipe.errors import BadInput
from trtpipe.runtime.base import Backend
from trtpipe.vocab import Task

AGREEMENT_CHUNK = 64  # capped by each backend's max batch (a TensorRT profile's maximum)


class Agreement:
    """The agreement samples, the reference's outputs on them once it has run, and the task they fixed."""

    def __init__(self, samples: Samples, task: Task | None,
                 decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None) -> None:
        self.samples, self.task, self.decoder = samples, task, decoder
        self.reference_outputs: list[np.ndarray] | None = None  # set once the reference has run

    def judge(self, backend: Backend, rows: list[BenchRow]) -> list[np.ndarray]:
        """The variant's outputs on the agreement samples, with its rows' fidelity to the reference written into
        them (the reference itself, run first, is compared with its own outputs)."""
        outputs = backend.run_chunked(fed(backend, self.samples.agreement), AGREEMENT_CHUNK)
        reference = outputs if self.reference_outputs is None else self.reference_outputs
        if len(reference) != len(outputs):
            raise BadInput(f"{rows[0].variant} has {len(outputs)} outputs and the reference {len(reference)}: the "
                           "artifact is not of this model (convert it again).")
        usable = len(outputs[0])
        comparison = compare([r[:usable] for r in reference], outputs, self.samples.labels, task=self.task,
                             names=[t.name for t in backend.outputs], decoder=self.decoder)
        if comparison.inference and self.reference_outputs is None:  # said once, when the reference fixes it
            console.note(comparison.inference)
        self.task = comparison.task
        measured = self.samples.unmeasured is None
        for row in rows:
            row.max_abs_err, row.max_rel_err, row.cosine = (comparison.max_abs_err, comparison.max_rel_err,
                                                            comparison.cosine)
            row.worst_output, row.task = comparison.worst_output, comparison.task
            row.agreement_samples = comparison.samples
            if measured:
                row.top1_agreement, row.agreement, row.agreement_name = (
                    comparison.top1_agreement, comparison.agreement, comparison.agreement_name)
                row.top1_accuracy, row.reference_accuracy = comparison.accuracy, comparison.reference_accuracy
                row.agreement_interval, row.accuracy_interval = (comparison.agreement_interval,
                                                                 comparison.accuracy_interval)
            row.note = "; ".join(filter(None, [row.note, None if measured else self.samples.unmeasured,
                                               comparison.note])) or None
        return outputs

    def inputs_sentence(self, rows: list[BenchRow]) -> str:
        """What agreement was measured on and by which measure: the sentence every report's heading prints."""
        samples, task = self.samples, self.task
        if samples.unmeasured:
            return f"{samples.description}; {samples.unmeasured}"
        name = next((r.agreement_name for r in rows if r.agreement_name), None)
        measure = f"; task {task}: Agreement is {name}" if name else f"; task {task}: no task figure" if task else ""
        return samples.description + measure
