"""What convert (and verify) can be told: opset, batch axis, and the tolerance of the numerical check."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.options import Options, option
from trtpipe.vocab import DEFAULT_OPSET, ArtifactKind, BackendKind


@dataclass
class ConvertOptions(Options):
    opset: int = option(DEFAULT_OPSET, "ONNX opset.", type=int, minimum=7, maximum=25)
    dynamic_batch: bool = option(True, "Make the batch axis dynamic, or fix it to the input shape's.", type=bool,
                                 flag="--dynamic-batch/--static-batch")
    atol: float = option(1e-4, "Absolute error allowed against PyTorch FP32.", type=float, minimum=0)
    rtol: float = option(1e-4, "Error allowed relative to the largest reference output.", type=float, minimum=0)
    min_cosine: float = option(0.9999, "Lowest cosine similarity allowed between outputs.", type=float, minimum=-1,
                               maximum=1)
    runtime: BackendKind = option(ArtifactKind.ONNX.backend, "What runs the ONNX for the check: "
                                  f"{ArtifactKind.ONNX.runtimes_help}.", type=BackendKind,
                                  choices=ArtifactKind.ONNX.runtimes)
