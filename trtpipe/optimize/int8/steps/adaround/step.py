"""INT8 step ``adaround``: each weight's rounding learned so the layer's output matches FP32
(int8/steps/adaround/algorithm.py), on up to 64 calibration samples; kept unless it lowers the judged figure, always
when named (step.LearnedStep)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtpipe import console
from trtpipe.inputs import count
from trtpipe.optimize.int8.step import Candidate, Int8Run, LearnedStep, Outcome


@dataclass(frozen=True)
class AdaroundRecord:
    layers: int
    samples: int
    iterations: int
    flipped_share: dict[str, float]  # layer -> the share of its weights rounded the other way

    def to_dict(self) -> dict[str, Any]:
        return {"layers": self.layers, "samples": self.samples, "iterations": self.iterations,
                "flipped_share": self.flipped_share}


class Adaround(LearnedStep):
    name = "adaround"
    title = "AdaRound"

    def passes(self, run: Int8Run, current: Candidate) -> float:
        from trtpipe.optimize.int8.steps.adaround.algorithm import rounded_layers

        return 2 * len(rounded_layers(current.model))  # each layer: its inputs, FP32's outputs

    def fixed_work(self, run: Int8Run, current: Candidate) -> float:
        """Each layer's iterations run it forward and backward on a minibatch, whatever the sample count: over
        the layers, about three passes of the model on BATCH samples an iteration."""
        from trtpipe.optimize.int8.steps.adaround.algorithm import BATCH

        return 3.0 * BATCH * run.context.options.adaround_iterations

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        """The current INT8 mix with AdaRound's learned weight rounding, and the figures after."""
        from trtpipe.optimize.int8.steps.adaround.algorithm import adaround, rounded_layers

        context = run.context
        layers = len(rounded_layers(current.model))
        batches = self.learning_batches(run, current)
        with console.progress() as bar:
            task = bar.add_task("AdaRound: learning each layer's weight rounding", total=layers)
            rounded, flipped = adaround(run.fp32, current.model, batches,
                                        iterations=context.options.adaround_iterations,
                                        on_layer=lambda: bar.advance(task))
        after = run.compare(rounded)
        share = sum(flipped.values()) / max(1, len(flipped))
        console.note(f"AdaRound ({len(flipped)} layers, {100 * share:.1f} % of weights rounded the other way): "
                     f"{after.check.line()}")
        return Outcome(after, AdaroundRecord(len(flipped), sum(count(b) for b in batches),
                                             context.options.adaround_iterations, flipped))
