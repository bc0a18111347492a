"""Only standard ONNX operators, at an opset TensorRT 10/11's parser imports."""

from __future__ import annotations

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import STANDARD_DOMAINS, GraphIndex
from trtpipe.vocab import Target

RULE = Rule("operators", "standard-domain operators only; opset 9 to 25 (TensorRT 11), 20 or lower for TensorRT 10",
            "TensorRT ONNX opset guide and support matrix (TensorRT 11.x: opset 9-25); onnx-tensorrt operators.md",
            (Target.TENSORRT,))
MIN_OPSET, MAX_OPSET, MAX_OPSET_TENSORRT_10 = 9, 25, 20


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.domain not in STANDARD_DOMAINS:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"operator of domain '{node.domain}', which TensorRT's parser does not import",
                                    "re-export without custom operators (or add a TensorRT plugin)"))
    opset = graph.opset
    if not MIN_OPSET <= opset <= MAX_OPSET:
        findings.append(Finding(RULE.name, Severity.ERROR, "(model)", f"opset {opset} is outside 9-25",
                                "re-export with 'trtpipe convert --opset 18'"))
    elif opset > MAX_OPSET_TENSORRT_10:
        findings.append(Finding(RULE.name, Severity.WARNING, "(model)", f"opset {opset} needs TensorRT 11",
                                "re-export with --opset 18 to build on TensorRT 10 too"))
    return findings
