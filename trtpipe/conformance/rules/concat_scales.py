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


# Scales this close are one scale: requantizing an int8 value from one to the other moves it by at most 127 * 1e-4,
# about a hundredth of a step, so no value changes (two writers of one range round its scale apart in the last bits).
RELATIVE_TOLERANCE = 1e-4


def _input_scale(graph: GraphIndex, name: str) -> tuple[str, np.ndarray, np.ndarray] | None:
    """The DequantizeLinear that makes ``name`` from an activation, and its (scale, zero point); else None."""
    dq = graph.producer.get(name)
    if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] in graph.constants:
        return None
    scale = graph.constant(dq.input[1])
    if scale is None:
        return None
    zero = graph.constant(dq.input[2]) if len(dq.input) > 2 and dq.input[2] else np.zeros_like(scale)
    return (dq.name or dq.output[0], scale, zero) if zero is not None else None


def same_scale(first: np.ndarray, second: np.ndarray) -> bool:
    """Whether two scales (a scalar or a one-element tensor alike) are one within RELATIVE_TOLERANCE."""
    a, b = np.ravel(first).astype(np.float64), np.ravel(second).astype(np.float64)
    if a.size != b.size and min(a.size, b.size) != 1:
        return False
    return bool(np.allclose(a, b, rtol=RELATIVE_TOLERANCE, atol=0.0))


def _same_zero(first: np.ndarray, second: np.ndarray) -> bool:
    a, b = np.ravel(first).astype(np.int64), np.ravel(second).astype(np.int64)
    return (a.size == b.size or min(a.size, b.size) == 1) and bool(np.all(a == b))


def _shown(values: list[float]) -> list[str]:
    """``values`` with the fewest significant digits (4 to 9) that show them apart."""
    for digits in range(4, 10):
        shown = [f"{v:.{digits}g}" for v in values]
        if len(set(shown)) == len(set(values)):
            return shown
    return [repr(v) for v in values]


def check(graph: GraphIndex) -> list[Finding]:
    findings = []
    for node in graph.nodes:
        if node.op_type != "Concat" or len(node.input) < 2:
            continue
        found = [_input_scale(graph, name) for name in node.input if name and name not in graph.constants]
        inputs = [s for s in found if s is not None]
        if len(found) < 2 or len(inputs) != len(found):
            continue  # not a quantized Concat: TensorRT runs it in float
        _, first_scale, first_zero = inputs[0]
        scales_differ = not all(same_scale(s, first_scale) for _, s, _ in inputs[1:])
        zeros_differ = not all(_same_zero(z, first_zero) for _, _, z in inputs[1:])
        if not scales_differ and not zeros_differ:
            continue
        largest = [float(np.max(s)) for _, s, _ in inputs]
        dqs = ", ".join(dq for dq, _, _ in inputs)
        if scales_differ:
            spread = max(largest) / min(largest) if min(largest) > 0 else float("inf")
            apart = f"{100 * (spread - 1):.2g} % apart" if spread < 1.1 else f"{spread:.3g}x apart"
            what = f"its {len(inputs)} dequantized inputs have different scales ({', '.join(_shown(largest))}: " \
                   f"{apart})"
            fix = (f"give its inputs one scale: set the scale of {dqs} and of the QuantizeLinear before each to "
                   f"{_shown([max(largest)])[0]} (the largest: no input then clips), or quantize the FP32 model with "
                   "one range for all of a Concat's inputs, their union, as trtpipe optimize --target tensorrt does")
        else:
            zeros = ", ".join(str(int(np.ravel(z)[0])) for _, _, z in inputs)
            what = f"its {len(inputs)} dequantized inputs share a scale but not a zero point ({zeros})"
            fix = f"give {dqs} and the QuantizeLinear before each one zero point (0: TensorRT's INT8 is symmetric)"
        findings.append(Finding(RULE.name, Severity.WARNING, graph.label(node),
                                f"{what}, so TensorRT requantizes each input before the concatenation", fix))
    return findings
