"""Quantization scales are finite and positive."""

from __future__ import annotations

import numpy as np

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("scale", "Q/DQ scales are finite and positive",
            "ONNX operator spec, QuantizeLinear/DequantizeLinear (y = x / y_scale); TensorRT developer guide: "
            "scales must be positive", tuple(Target))


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        scale = graph.constant(node.input[1])
        if scale is None:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node), "scale is computed at run time",
                                    "make the scale a constant (an initializer)"))
            continue
        scale = scale.astype(np.float64)
        if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
            bad = scale[~(np.isfinite(scale) & (scale > 0))].ravel()[:4].tolist()
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node), f"scale has values {bad}",
                                    "recalibrate: a tensor that is constant zero or overflows gives such scales"))
    return findings
