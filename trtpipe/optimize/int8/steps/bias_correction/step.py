"""INT8 step ``bias_correction``: each layer's output mean shift removed (int8/steps/bias_correction/algorithm.py), on
up to 64 calibration samples; kept unless it lowers the judged figure, always when named (step.LearnedStep)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtpipe import console
from trtpipe.inputs import count
from trtpipe.optimize.int8.step import Candidate, Int8Run, LearnedStep, Outcome


@dataclass(frozen=True)
class BiasCorrectionRecord:
    layers: int
    samples: int
    mean_abs_shift: dict[str, float]  # layer -> the mean absolute shift removed

    def to_dict(self) -> dict[str, Any]:
        return {"layers": self.layers, "samples": self.samples, "mean_abs_shift": self.mean_abs_shift}


class BiasCorrection(LearnedStep):
    name = "bias_correction"
    title = "Bias correction"

    def passes(self, run: Int8Run, current: Candidate) -> float:
        return _layers(run) + 1  # FP32's means, then a pass per layer

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        """The current INT8 mix with its biases corrected layer by layer, and the figures after."""
        from trtpipe.optimize.int8.steps.bias_correction.algorithm import correct_biases

        layers = _layers(run)
        batches = self.learning_batches(run, current)
        with console.progress() as bar:
            task = bar.add_task("Bias correction, layer by layer", total=layers)
            corrected, shifts = correct_biases(run.fp32, current.model, batches, on_layer=lambda: bar.advance(task))
        after = run.compare(corrected)
        console.note(f"Bias correction ({len(shifts)} layers): {after.check.line()}")
        return Outcome(after, BiasCorrectionRecord(len(shifts), sum(count(b) for b in batches), shifts))


def _layers(run: Int8Run) -> int:
    return sum(n.op_type in ("Conv", "ConvTranspose", "Gemm") for n in run.fp32.graph.node)
