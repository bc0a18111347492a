"""Per-channel weight scales lie along the consumer's output-channel axis, one scale per channel."""

from __future__ import annotations

import onnx

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.onnx_info import attribute
from trtpipe.vocab import Target

RULE = Rule("per-channel-axis", "per-channel weight scales follow the consumer's output channels (Conv axis 0, "
            "ConvTranspose axis 1, Gemm by transB, MatMul the last axis)",
            "TensorRT developer guide, Q/DQ: per-channel quantization of weights along the K (output channel) axis; "
            "ONNX spec, DequantizeLinear 'axis'", tuple(Target))


def expected_axis(consumer_op: str, consumer: onnx.NodeProto, rank: int) -> int | None:
    if consumer_op == "Conv":
        return 0
    if consumer_op == "ConvTranspose":
        return 1
    if consumer_op == "Gemm":
        return 0 if attribute(consumer, "transB", 0) else 1
    if consumer_op == "MatMul":
        return rank - 1
    return None


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "DequantizeLinear" or node.input[0] not in graph.constants:
            continue
        scale = graph.constant(node.input[1])
        if scale is None or scale.size <= 1:
            continue
        weight = graph.constant(node.input[0])
        assert weight is not None
        axis = attribute(node, "axis", 1)
        axis = axis + weight.ndim if axis is not None and axis < 0 else axis
        for consumer in graph.readers.get(node.output[0], []):
            if len(consumer.input) < 2 or consumer.input[1] != node.output[0]:  # not the consumer's weight
                continue
            want = expected_axis(consumer.op_type, consumer, weight.ndim)
            if want is None:
                continue
            if axis != want or scale.size != weight.shape[want]:
                findings.append(Finding(
                    RULE.name, Severity.ERROR, graph.label(node),
                    f"per-channel scale on axis {axis} ({scale.size} scales) for {graph.label(consumer)}, whose "
                    f"weight {list(weight.shape)} needs axis {want} ({weight.shape[want]} scales)",
                    "quantize the weight per output channel along the consumer's channel axis"))
    return findings
