"""TensorRT quantization is symmetric: every zero point is 0."""

from __future__ import annotations

import numpy as np

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("zero-point", "Q/DQ zero points are all 0 (symmetric quantization)",
            "TensorRT developer guide, Working with Quantized Types: 'TensorRT supports only symmetric quantization'"
            " (zero point must be 0)", (Target.TENSORRT,))


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 3 or not node.input[2]:
            continue
        zero = graph.constant(node.input[2])
        if zero is None:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node), "zero point is computed at run time",
                                    "make the zero point a constant 0"))
        elif np.any(zero.astype(np.int64) != 0):
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"zero point is {zero.ravel()[:4].tolist()}, not 0 (asymmetric quantization)",
                                    "quantize symmetrically (--target tensorrt)"))
    return findings
