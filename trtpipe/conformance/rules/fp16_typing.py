"""Strongly typed networks take types from the graph: no node may mix FP32 and FP16 inputs."""

from __future__ import annotations

import onnx

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.conformance.graph import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("fp16-typing", "no node mixes float32 and float16 inputs (TensorRT inserts no implicit casts in a "
            "strongly typed network)",
            "TensorRT developer guide, Strongly Typed Networks: types follow the ONNX graph, mismatched input types "
            "are an error", (Target.TENSORRT,))
FLOATS = {onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}
# Ops whose inputs legitimately differ in type (scales, shapes, indices, the value of a cast).
MIXED_BY_DESIGN = {"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Resize", "Reshape", "Expand",
                   "Slice", "Pad", "Tile", "ConstantOfShape", "Gather", "Range", "Shape", "Clip"}


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type in MIXED_BY_DESIGN:
            continue
        kinds = {FLOATS[graph.types[name]] for name in node.input if name and graph.types.get(name) in FLOATS}
        if len(kinds) > 1:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"mixes {' and '.join(sorted(kinds))} inputs",
                                    "insert a Cast so its inputs agree (re-run 'trtpipe optimize --precision fp16')"))
    return findings
