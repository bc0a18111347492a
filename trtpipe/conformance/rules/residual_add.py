"""A residual Add carries Q/DQ on its shortcut only, so TensorRT fuses it into the convolution."""

from __future__ import annotations

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.conformance.rules.weighted_output import WEIGHTED
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("residual-add", "an Add fed by a convolution has Q/DQ on the other (residual) input only",
            "TensorRT developer guide, Q/DQ Layer-Placement Recommendations: 'quantize the residual input in skip "
            "connections' so the element-wise addition fuses into the convolution", (Target.TENSORRT,))


def _quantized_source(graph: GraphIndex, name: str) -> str | None:
    """The op a dequantized Add input was quantized from, or None when the input is not dequantized."""
    dq = graph.producer.get(name)
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    q = graph.producer.get(dq.input[0])
    return graph.from_op(q.input[0]) if q is not None and q.op_type == "QuantizeLinear" else None


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "Add" or len(node.input) != 2:
            continue
        sources = [_quantized_source(graph, name) for name in node.input]
        if None in sources:
            continue  # at most one input quantized: TensorRT can fuse
        if any(s in WEIGHTED for s in sources):
            findings.append(Finding(RULE.name, Severity.WARNING, graph.label(node),
                                    f"both inputs are quantized (from {' and '.join(map(str, sources))}), so "
                                    "TensorRT cannot fuse it into the convolution that produced one of them",
                                    "remove the Q/DQ between that convolution and the Add (--target tensorrt)"))
    return findings
