"""Which convolutions and matmuls ONNX Runtime really runs in integer, read from its own optimised graph.

A Q/DQ file only asks for integer arithmetic: ONNX Runtime's graph optimiser fuses ``DQ -> Conv -> Q`` into a
QLinearConv only where the pattern it knows is there (a Q right after the convolution, uint8 activations on x86,
scales it can read), and otherwise runs the convolution in float between its Q/DQ nodes, which is slower than the
FP32 file. So after writing a ``cpu`` INT8 file, optimize has ONNX Runtime save the graph it will run
(``SessionOptions.optimized_model_filepath``, all optimisations) and counts the weighted ops in it.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import onnx

# Weighted ops as ONNX Runtime runs them after its graph optimisations, by how: integer kernels (the QDQ fusions
# and the dynamic-quantisation ones) or float ones (the NCHWc, fused-activation and plain forms).
INTEGER_KERNELS = ("QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger", "MatMulIntegerToFloat", "QGemm",
                   "DynamicQuantizeMatMul", "QLinearConvTranspose")
FLOAT_KERNELS = ("Conv", "FusedConv", "NhwcConv", "NhwcFusedConv", "ConvTranspose", "MatMul", "FusedMatMul",
                 "Gemm", "FusedGemm")


@dataclass(frozen=True)
class KernelCount:
    """How many weighted ops ONNX Runtime runs in integer and in float, by op type (its optimised graph's)."""

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
        return (f"ONNX Runtime runs {self.integer_total} of {self.total} convolutions/matmuls in integer"
                f"{integer}{rest}")

    def to_dict(self) -> dict[str, object]:
        return {"integer": dict(self.integer), "float": dict(self.float), "integer_total": self.integer_total,
                "total": self.total}


def optimized_graph(model: onnx.ModelProto | Path) -> onnx.ModelProto:
    """The graph ONNX Runtime's CPU provider runs for ``model``, all graph optimisations on, as it saves it."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="trtpipe-kernels-") as tmp:
        source = Path(tmp) / "model.onnx"
        if isinstance(model, Path):
            source = model
        else:
            onnx.save(model, str(source))
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        options.log_severity_level = 3  # ONNX Runtime warns that an NCHWc graph may not load elsewhere: it is read here
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath, load_external_data=False)


def kernel_count(model: onnx.ModelProto | Path) -> KernelCount:
    """The weighted ops in ONNX Runtime's optimised graph of ``model``, split into integer and float kernels."""
    ops = Counter(node.op_type for node in optimized_graph(model).graph.node)
    return KernelCount({op: ops[op] for op in INTEGER_KERNELS if ops[op]},
                       {op: ops[op] for op in FLOAT_KERNELS if ops[op]})
