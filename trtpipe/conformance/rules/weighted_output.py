"""No Q/DQ on the output of a weighted op unless a quantized input needs it."""

from __future__ import annotations

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("weighted-output", "no Q/DQ on the outputs of Conv/ConvTranspose/Gemm/MatMul (the logits included) "
            "unless the consumer's input is quantized",
            "TensorRT developer guide, Q/DQ Layer-Placement Recommendations: 'do not quantize the outputs of "
            "weighted operations'; ONNX Runtime's qdq_quantizer: output quantization of Conv/MatMul/Gemm is not "
            "recommended for TensorRT", (Target.TENSORRT,))
WEIGHTED = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# Ops whose *inputs* carry Q/DQ in TensorRT's placement: a Q after a weighted op that feeds one of these is the
# consumer's input quantization, not output quantization.
QUANTIZED_INPUT_OPS = (*WEIGHTED, "Add", "AveragePool", "GlobalAveragePool", "MaxPool", "Concat")


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "QuantizeLinear" or graph.from_op(node.input[0]) not in WEIGHTED:
            continue
        dequantized = [c for c in graph.readers.get(node.output[0], []) if c.op_type == "DequantizeLinear"]
        for dq in dequantized:
            users = graph.readers.get(dq.output[0], [])
            reasons = [u for u in users if u.op_type not in QUANTIZED_INPUT_OPS]
            if dq.output[0] in graph.graph_outputs or reasons:
                feeds = "the graph output" if dq.output[0] in graph.graph_outputs else ", ".join(
                    graph.label(u) for u in reasons)
                producer = graph.producer[node.input[0]]
                findings.append(Finding(RULE.name, Severity.WARNING, graph.label(producer),
                                        f"its output is quantized ({graph.label(node)}) before {feeds}",
                                        "exclude output quantization of weighted ops (--target tensorrt)"))
    return findings
