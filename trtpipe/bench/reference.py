"""MODEL given as an FP32 ONNX file rather than a PyTorch model: the most common starting point (an exporter's
file, a model shipped in a wheel). The reference every artifact is measured against is then that file on ONNX
Runtime CPU, and every report says so; speedups are against it, not against PyTorch.

A packaged model (``trtpipe.models.packaged``: a real trained network shipped as ONNX inside a wheel) is named by
its name, and brings its natural inputs: the agreement samples are those, so its task figure means something.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.files import sha256_file
from trtpipe.models.loader import EvaluationData
from trtpipe.models.options import ModelOptions
from trtpipe.runtime.artifacts import artifact_name, describe_artifact
from trtpipe.shapes import format_shape
from trtpipe.vocab import ArtifactKind, Precision, Task

REFERENCE = "the FP32 ONNX on ONNX Runtime CPU"
PACKAGED_EVAL_SAMPLES = 16


@dataclass
class OnnxReference:
    """What bench needs of its model, for an FP32 ONNX file: its shape, task, data and description."""

    path: Path
    name: str
    input_shape: tuple[int, ...]
    task: Task | None = None
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None
    packaged: str | None = None  # the packaged model it is, whose natural inputs are the agreement samples
    module: None = None  # no PyTorch module: the reference row runs the file itself
    source_kind: str = str(ArtifactKind.ONNX)
    dataset: str | None = None

    @property
    def source(self) -> str:
        return str(self.path)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.input_shape[1:]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "source_kind": self.source_kind,
                "source_sha256": sha256_file(self.path), "input_shape": list(self.input_shape),
                "reference": REFERENCE, "packaged": self.packaged}

    def _natural(self, seed: int) -> EvaluationData | None:
        if self.packaged is None:
            return None
        from trtpipe.models.packaged import natural_batch

        batch = natural_batch(self.packaged, count=PACKAGED_EVAL_SAMPLES, seed=seed, size=self.sample_shape[-2:])
        return EvaluationData(batch.inputs, None, f"{batch.source} (reference: {REFERENCE}; agreement, no labels)")

    def evaluation_data(self) -> EvaluationData | None:
        return self._natural(seed=1)

    def calibration_data(self) -> np.ndarray:
        data = self._natural(seed=0)
        if data is None:
            raise BadInput(f"Peers quantize on calibration data, and {self.name} brings none: bench it as a "
                           "packaged model or from its PyTorch model.")
        return data.images


def onnx_reference(spec: str, options: ModelOptions) -> OnnxReference | None:
    """The ONNX reference ``spec`` names (a packaged model's name or a .onnx path), or None for a PyTorch model."""
    from trtpipe.models.packaged import PACKAGED, packaged_onnx

    packaged = spec if spec in PACKAGED else None
    if packaged is None and not spec.lower().endswith(".onnx"):
        return None
    path = packaged_onnx(spec) if packaged else Path(spec)
    described = describe_artifact(path)
    if described.precision is not Precision.FP32:
        raise BadInput(f"MODEL {path} is {described.precision}: the reference must be the FP32 ONNX (give the file "
                       "optimize started from, or the PyTorch model).")
    if len(described.inputs) != 1:
        raise BadInput(f"{path} has {len(described.inputs)} inputs; bench measures single-input models so far.")
    dims = described.inputs[0].shape
    if options.input_shape is not None:
        shape = tuple(options.input_shape)
        if len(shape) != len(dims) or any(isinstance(d, int) and d != s for d, s in zip(dims, shape, strict=True)):
            raise BadInput(f"--input-shape {format_shape(shape)} does not fit {path}'s input "
                           f"{format_shape(dims)} ('?' is free).")
    elif packaged:
        rule = PACKAGED[packaged].preprocessing.size
        shape = (1, dims[1] if isinstance(dims[1], int) else 3, *rule.size)
    else:
        if any(not isinstance(d, int) for d in dims[1:]):
            raise BadInput(f"{path}'s input {described.inputs[0].name} is {format_shape(dims)}: its dynamic axes "
                           "need a size to bench at: give --input-shape (e.g. 1x3x640x640).")
        shape = (1, *dims[1:])
    task = options.task or (PACKAGED[packaged].task if packaged else None) or described.task
    decoder = PACKAGED[packaged].decoder() if packaged else None
    if task is Task.DETECT and len(described.outputs) > 1 and not options.postprocess and decoder is None:
        task = Task.GENERIC  # a multi-output head no decoder reads: compared output by output
    if options.postprocess:
        from trtpipe.models.user_code import load_postprocess

        decoder = load_postprocess(options.postprocess)
    name = options.name or packaged or artifact_name(path)
    return OnnxReference(path, name, tuple(int(d) for d in shape), task, decoder, packaged)
