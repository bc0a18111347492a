"""DequantizeLinear inputs TensorRT can dequantize: int8 (fp8 and int4 where the opset has them)."""

from __future__ import annotations

import onnx

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("dq-input-type", "DequantizeLinear takes int8 (or fp8/int4) for TensorRT, never int32 or uint8",
            "TensorRT API, IDequantizeLayer: 'only activation types allowed as input' (int8, fp8, int4, fp4); "
            "onnx/onnx-tensorrt#850, NVIDIA/TensorRT#3360", (Target.TENSORRT,))
ALLOWED: dict[int, int] = {onnx.TensorProto.INT8: 10, onnx.TensorProto.FLOAT8E4M3FN: 19, onnx.TensorProto.INT4: 21}


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear":
            continue
        kind = graph.types.get(node.input[0])
        if kind is None:
            continue
        if kind in ALLOWED and graph.opset >= ALLOWED[kind]:
            continue
        name = onnx.TensorProto.DataType.Name(kind)
        bias = " (a quantized bias)" if kind == onnx.TensorProto.INT32 else ""
        findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                f"dequantizes {name}{bias}, which TensorRT's DequantizeLayer does not accept",
                                "quantize for --target tensorrt (no bias quantization, signed int8 activations)"))
    return findings
