"""Strongly typed networks take types from the graph: no node may mix FP32 and FP16 inputs."""

from __future__ import annotations

import onnx

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("fp16-typing", "no node mixes float32 and float16 inputs (TensorRT inserts no implicit casts in a "
            "strongly typed network)",
            "TensorRT developer guide, Strongly Typed Networks: types follow the ONNX graph, mismatched input types "
            "are an error", (Target.TENSORRT,))
FLOATS: dict[int, str] = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16",
                          onnx.TensorProto.BFLOAT16: "bfloat16"}
# Ops whose inputs legitimately differ in type (scales, shapes, indices, the value of a cast).
MIXED_BY_DESIGN = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Resize", "Reshape", "Expand",
                   "Slice", "Pad", "Tile", "ConstantOfShape", "Gather", "Range", "Shape", "Clip"}
# Of those, the inputs that must still share the data's type T (ONNX operator specs): Clip(input: T, min: T, max: T)
# and Pad(data: T, pads: int64, constant_value: T, axes). Their bounds were skipped with the rest of the op, so an
# FP16 Clip with FP32 min/max passed here and failed in TensorRT's parser.
SAME_TYPE_INPUTS = {"Clip": (0, 1, 2), "Pad": (0, 2),
                    # QuantizeLinear(x: T1, y_scale: T1) from opset 19 (before it both are float32): an FP16 tensor
                    # is quantized with an FP16 scale. A DequantizeLinear's one float input is its scale, whose type
                    # its output takes, so its readers' checks cover it.
                    "QuantizeLinear": (0, 1)}


def _typed_inputs(node: onnx.NodeProto) -> list[str]:
    """The inputs of ``node`` that must agree in float type: all of them, or for an op mixed by design only those
    that :data:`SAME_TYPE_INPUTS` names (none for the rest)."""
    if node.op_type in SAME_TYPE_INPUTS:
        return [node.input[i] for i in SAME_TYPE_INPUTS[node.op_type] if i < len(node.input)]
    return [] if node.op_type in MIXED_BY_DESIGN else list(node.input)


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        kinds = {FLOATS[graph.types[name]] for name in _typed_inputs(node)
                 if name and graph.types.get(name) in FLOATS}
        if len(kinds) > 1:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"mixes {' and '.join(sorted(kinds))} inputs",
                                    "insert a Cast so its inputs agree (re-run 'trtpipe optimize --precision fp16')"))
    return findings
