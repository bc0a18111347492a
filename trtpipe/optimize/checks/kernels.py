"""Which convolutions and matmuls the reference runtime (ONNX Runtime) really runs in integer, read from its own
optimised graph (asked through the registry: runtime/onnxruntime/sessions.py).

A Q/DQ file only asks for integer arithmetic: ONNX Runtime's graph optimiser fuses ``DQ -> Conv -> Q`` into a
QLinearConv only where the pattern it knows is there (a Q right after the convolution, uint8 activations on x86,
scales it can read), and otherwise runs the convolution in float between its Q/DQ nodes, which is slower than the
FP32 file. So after writing a ``cpu`` INT8 file, optimize has ONNX Runtime save the graph it will run
(``SessionOptions.optimized_model_filepath``, all optimisations) and counts the weighted ops in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx

from trtpipe.runtime.registry import reference_name, reference_sessions


@dataclass(frozen=True)
class KernelCount:
    """How many weighted ops the reference runtime runs in integer and in float, by op type (its optimised
    graph's)."""

    integer: dict[str, int]
    float: dict[str, int]

    @property
    def integer_total(self) -> int:
        return sum(self.integer.values())

    @property
    def total(self) -> int:
        return self.integer_total + sum(self.float.values())

    def line(self) -> str:
        """One line: how many run in integer, and what the others run as."""
        def ops(counts: dict[str, int]) -> str:
            return ", ".join(f"{n} {op}" for op, n in sorted(counts.items(), key=lambda item: -item[1]))

        integer = f" ({ops(self.integer)})" if self.integer else ""
        rest = f"; in float: {ops(self.float)}" if self.float else ""
        return (f"{reference_name()} runs {self.integer_total} of {self.total} convolutions/matmuls in integer"
                f"{integer}{rest}")

    def to_dict(self) -> dict[str, object]:
        return {"integer": dict(self.integer), "float": dict(self.float), "integer_total": self.integer_total,
                "total": self.total}


def kernel_count(model: onnx.ModelProto | Path) -> KernelCount:
    """The weighted ops in the reference runtime's optimised graph of ``model``, split into integer and float
    kernels (the kernels' names are its own: runtime/onnxruntime/sessions.py)."""
    integer, floating = reference_sessions().weighted_kernels(model)
    return KernelCount(integer, floating)
