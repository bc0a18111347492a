"""A Concat whose inputs are all dequantized carries one scale on every input, so TensorRT need not requantize."""

from __future__ import annotations

import numpy as np

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("concat-scales", "the dequantized inputs of a Concat share one scale and zero point",
            "TensorRT developer guide, Q/DQ Layer-Placement Recommendations (a Concat of tensors with different "
            "scales is requantized input by input); ModelOpt's ONNX PTQ gives a Concat's inputs one scale",
            (Target.TENSORRT,))


def _input_scale(graph: GraphIndex, name: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The (scale, zero point) of the DequantizeLinear that makes ``name`` from an activation, else None."""
    dq = graph.producer.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] in graph.constants:
        return None
    scale = graph.constant(dq.input[1])
    if scale is None:
        return None
    zero = graph.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros_like(scale)
    return (scale, zero) if zero is not None else None


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "Concat" or len(node.input) < 2:
            continue
        found = [_input_scale(graph, name) for name in node.input if name and name not in graph.constants]
        scales = [s for s in found if s is not None]
        if len(found) < 2 or len(scales) != len(found):
            continue  # not a quantized Concat: TensorRT runs it in float
        first_scale, first_zero = scales[0]
        if all(np.array_equal(s, first_scale) and np.array_equal(z, first_zero) for s, z in scales[1:]):
            continue
        values = ", ".join(f"{float(np.max(s)):.4g}" for s, _ in scales)
        findings.append(Finding(RULE.name, Severity.WARNING, graph.label(node),
                                f"its {len(scales)} dequantized inputs have different scales ({values}), so TensorRT "
                                "requantizes each input before the concatenation",
                                "re-quantize with trtpipe optimize --target tensorrt (its placement gives a Concat's "
                                "inputs one scale)"))
    return findings
