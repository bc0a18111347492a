"""Q/DQ scales in FP16 (INT8 with FP16 elsewhere) need an opset that allows them, and the two halves of a Q/DQ pair
hold one scale value even where one half is FP32 and the other FP16."""

from __future__ import annotations

import numpy as np
import onnx

from trtpipe.conformance.findings import Finding, Rule, Severity
from trtpipe.graph_index import GraphIndex
from trtpipe.vocab import Target

RULE = Rule("qdq-scale-type", "FP16/BF16 Q/DQ scales only from opset 19; a QuantizeLinear and the DequantizeLinear "
            "that reads it hold the same scale value, whatever its type",
            "ONNX operator specs: QuantizeLinear-19/DequantizeLinear-19 add float16 and bfloat16 to the scale's type "
            "(T1/T2), earlier versions take float32 only; onnx-tensorrt onnxOpImporters.cpp (QDQ importer): in a "
            "strongly typed network a DequantizeLayer's output type is its scale's", tuple(Target))
HALF_SCALES: dict[int, str] = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}
HALF_SCALE_OPSET = 19
# A pair's values may differ by no more than FP16's rounding of one of them (2^-11 relative, with headroom): a larger
# gap means the DequantizeLinear reads the integers on another grid than the QuantizeLinear wrote them on.
SCALE_RTOL = 2.0**-10


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or len(node.input) < 2:
            continue
        kind = graph.types.get(node.input[1])
        if kind in HALF_SCALES and graph.opset < HALF_SCALE_OPSET:
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"has a {HALF_SCALES[kind]} scale at opset {graph.opset}, where {node.op_type} "
                                    "takes float32 scales only",
                                    f"raise the opset to {HALF_SCALE_OPSET} (re-run 'trtpipe optimize', which does)"))
        if node.op_type != "DequantizeLinear":
            continue
        q = graph.producer.get(node.input[0])
        if q is None or q.op_type != "QuantizeLinear" or len(q.input) < 2:
            continue
        written, read = graph.constant(q.input[1]), graph.constant(node.input[1])
        if written is None or read is None or written.shape != read.shape:
            continue
        if not np.allclose(read.astype(np.float64), written.astype(np.float64), rtol=SCALE_RTOL, atol=0.0):
            findings.append(Finding(RULE.name, Severity.ERROR, graph.label(node),
                                    f"reads {graph.label(q)}'s integers with scale {read.ravel()[:2].tolist()}, "
                                    f"written with {written.ravel()[:2].tolist()}",
                                    "give both halves of the pair one scale value (round it to FP16 once)"))
    return findings
