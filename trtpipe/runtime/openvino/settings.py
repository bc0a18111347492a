"""The run settings OpenVINO receives: the only ones its backend is given."""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.vocab import PerformanceHint, Precision


@dataclass(frozen=True)
class OpenVinoSettings:
    """How OpenVINO runs an ONNX artifact; each default is the same as RunOptions'."""

    threads: int | None = None  # inference threads
    hint: PerformanceHint = PerformanceHint.LATENCY
    inference_precision: Precision = Precision.FP32  # f32, or bf16 kernels for a BF16 artifact
