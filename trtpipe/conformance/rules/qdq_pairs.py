"""Explicit quantization comes in pairs: a QuantizeLinear feeds DequantizeLinear nodes only, and an activation's
DequantizeLinear is fed by a QuantizeLinear."""

from __future__ import annotations

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("qdq-pairs", "every QuantizeLinear feeds only DequantizeLinear; activation DQ nodes follow a Q",
            "TensorRT developer guide, Explicit Quantization: Q/DQ layers in pairs, quantized tensors are only "
            "consumed by DequantizeLayer", (Target.TENSORRT,))


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type == "QuantizeLinear":
            others = [c for c in graph.readers.get(node.output[0], []) if c.op_type != "DequantizeLinear"]
            if others or node.output[0] in graph.graph_outputs:
                where = ", ".join(graph.label(c) for c in others) or "the graph output"
                findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                        f"quantized output is consumed by {where}, not a DequantizeLinear",
                                        "follow every QuantizeLinear with a DequantizeLinear"))
        elif node.op_type == "DequantizeLinear" and node.input[0] not in graph.constants:
            source = graph.producer.get(node.input[0])
            if source is None or source.op_type != "QuantizeLinear":
                findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                        "dequantizes a tensor that no QuantizeLinear produced",
                                        "put the matching QuantizeLinear before it"))
    return findings
