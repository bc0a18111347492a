"""The run settings OpenVINO receives: the only ones its backend is given."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trtpipe.vocab import Precision


class PerformanceHint(StrEnum):
    """OpenVINO's performance hint: one request at a time, or many in flight."""

    LATENCY = "latency"
    THROUGHPUT = "throughput"


@dataclass(frozen=True)
class OpenVinoSettings:
    """How OpenVINO runs an ONNX artifact; each default is the same as RunOptions'."""

    threads: int | None = None  # inference threads
    hint: PerformanceHint = PerformanceHint.LATENCY
    inference_precision: Precision = Precision.FP32  # f32, or bf16 kernels for a BF16 artifact
