"""Dynamic axes besides the batch need explicit profile shapes."""

from __future__ import annotations

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.onnx_info import graph_inputs
from trtpipe.vocab import Target

RULE = Rule("dynamic-axes", "only the batch axis is dynamic, or the build gives --shapes for the others",
            "TensorRT developer guide, Dynamic Shapes: every dynamic dimension needs an optimization profile range",
            (Target.TENSORRT,))


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for value in graph_inputs(graph.model):
        dims = value.type.tensor_type.shape.dim
        free = [i for i, d in enumerate(dims) if not d.HasField("dim_value") and i != 0]
        if free:
            findings.append(Finding(RULE.name, Severity.WARNING, f"input '{value.name}'",
                                    f"axes {free} are dynamic besides the batch",
                                    "give 'trtpipe build' --shapes or --min/--opt/--max-shapes for them"))
    return findings
