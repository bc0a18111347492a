"""What every pass is handed: the options, the data, the FP32 reference, and where it records what it did."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison, compare
from trtpipe.inputs import Batch, count
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.int8.recipes import Recipe
from trtpipe.optimize.judging.evaluate import logits, outputs
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.records import PassRecord
from trtpipe.vocab import Target, Task

R = TypeVar("R", bound=PassRecord)

CALIBRATION_BATCH = 8  # per-batch activation memory is what calibration peaks at: 8 keeps it near 1 GB at 224x224


@dataclass
class PassContext:
    options: OptimizeOptions
    target: Target
    calib: Dataset | None
    evaluation: Dataset | None
    probe: Dataset  # calibration, eval or seeded random inputs: what graph passes are checked on
    static_batch: int | None
    output: Path
    task: Task | None = None  # what the outputs mean: the measure every check and the budget use
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None  # --postprocess: a detector's decoding
    details: dict[str, Any] = field(default_factory=dict)  # the stage's own manifest sections (input, options...)
    fp32_nodes: list[str] = field(default_factory=list)  # nodes a precision pass kept in FP32 on purpose
    recipe: Recipe | None = None  # INT8: the --quality recipe that runs (its graph passes already have)
    # INT8: the graph before the recipe's own passes (scale_depthwise's float gains cost time where nothing is
    # integer): what speed placement writes where no integer mix runs faster than float
    float_graph: onnx.ModelProto | None = None
    records: list[PassRecord] = field(default_factory=list)  # what each pass did, in the order they ran
    # cross-fitted (optimize.held_out): each fold's judging indices into ``calib``; INT8 fits on the others
    folds: tuple[np.ndarray, ...] | None = None
    # seconds one sample costs a pass of the FP32 model, from its graph's work at the reference pace (optimize.work:
    # the same under any load), and whether it was timed instead: what the time budgets spend (pass_seconds)
    pace: tuple[float, bool] | None = None
    # the reference's outputs on a judging set, computed once: a recipe compares a dozen candidates with one FP32
    # model on one set, and on a large dense model each FP32 pass over it costs as much as the candidate's
    _expected: list[tuple[onnx.ModelProto, tuple[int, int, int], object, list[np.ndarray]]] = field(
        default_factory=list, repr=False)

    def record(self, record: PassRecord) -> None:
        """Keep what a pass did (a pass that runs again replaces its record)."""
        self.records = [r for r in self.records if r.section != record.section] + [record]

    def recorded(self, kind: type[R]) -> R | None:
        """The record of kind ``kind``, if that pass ran."""
        return next((r for r in self.records if isinstance(r, kind)), None)

    def manifest_details(self) -> dict[str, Any]:
        """The manifest's ``details``: the stage's sections, then each pass's record under its section."""
        return self.details | {r.section: r.to_dict() for r in self.records}

    def pass_seconds(self, fp32: onnx.ModelProto) -> tuple[float, bool]:
        """Seconds a sample costs a pass of ``fp32`` and whether that is the reference pace (worked out once:
        optimize.work.pace)."""
        if self.pace is None:
            from trtpipe.optimize.judging.work import pace

            data = self.calib or self.probe
            self.pace = pace(fp32, data.images, self.static_batch)
        return self.pace

    def batches(self, dataset: Dataset) -> list[Batch]:
        """Calibration batches; with a static batch axis, only full batches of that size."""
        size = self.static_batch or CALIBRATION_BATCH
        batches = dataset.batches(size)
        return [b for b in batches if count(b) == size] if self.static_batch else batches

    def _reference_outputs(self, reference: onnx.ModelProto, images: Batch) -> list[np.ndarray]:
        """The reference's outputs on ``images``, from the last few computed where the same model object (unchanged:
        its size and counts agree) ran on the same batch object; else computed and kept."""
        shape = (len(reference.graph.node), len(reference.graph.initializer), reference.ByteSize())
        for model, seen, batch, found in self._expected:
            if model is reference and batch is images and seen == shape:
                return found
        with console.tracked(f"The reference's outputs on {count(images)} samples", count(images)) as done:
            found = outputs(reference, images, batch=self.static_batch, on_samples=done)
        self._expected = [*self._expected[-3:], (reference, shape, images, found)]
        return found

    def logits(self, model: onnx.ModelProto, images: Batch,
               as_written: bool = False) -> np.ndarray:
        return logits(model, images, as_written=as_written, batch=self.static_batch)

    def outputs(self, model: onnx.ModelProto, images: Batch,
                as_written: bool = False) -> list[np.ndarray]:
        return outputs(model, images, as_written=as_written, batch=self.static_batch)

    def compare(self, reference: onnx.ModelProto, candidate: onnx.ModelProto, data: Dataset,
                as_written: bool = False) -> Comparison:
        """Every output of the candidate against the reference model's on ``data``, with the task's figure
        (accuracy of both where it has labels); ``as_written``: run as evaluate.run_settings says."""
        expected = self._reference_outputs(reference, data.images)
        names = [o.name for o in reference.graph.output]
        with console.tracked(f"Judging on {count(data.images)} samples of {data.source}", count(data.images)) as done:
            got = outputs(candidate, data.images, as_written=as_written, batch=self.static_batch,
                          on_samples=done)
        return compare(expected, got, data.labels, task=self.task, names=names, decoder=self.decoder)
