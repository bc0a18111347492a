"""Calibrated ranges narrowed to where the tensor's readers still respond.

An activation that saturates maps everything beyond a bound to one value: HardSwish is 0 for every input at or
below -3, HardSigmoid is constant outside [-beta/alpha, (1-beta)/alpha], Relu is 0 below 0 and Clip constant
outside [min, max]. A tensor that only such activations read can be quantized over the responsive part of its
calibrated range and nothing its readers compute changes: the clamped values give the same outputs as the values
they replace. The steps get finer by the ratio of the ranges. It matters for a convolution's pre-activation, which
ONNX Runtime's QLinearConv must write in uint8 to run in integer: a HardSwish pre-activation spans down to about
-40 in PP-LCNet's backbone while HardSwish reads only [-3, max].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.onnx_info import attribute, clip_bounds

if TYPE_CHECKING:
    from trtpipe.optimize.int8.calibrate import Ranges


def responsive_range(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """The input interval outside which ``node`` (an activation reading one tensor) gives constant outputs; None
    for an op that does not saturate, or whose bounds are not constants."""
    if node.op_type == "HardSwish":
        return -3.0, np.inf
    if node.op_type == "Relu":
        return 0.0, np.inf
    if node.op_type == "HardSigmoid":
        alpha, beta = float(attribute(node, "alpha", 0.2)), float(attribute(node, "beta", 0.5))
        return (-beta / alpha, (1.0 - beta) / alpha) if alpha > 0 else None
    if node.op_type == "Clip":
        return clip_bounds(node, constants)
    return None


def responsive_intervals(model: onnx.ModelProto) -> dict[str, tuple[float, float]]:
    """{tensor: the interval its readers respond to} for each tensor that only saturating activations read (as
    their data input); graph outputs are left out, since a user reads every value of those."""
    graph = model.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input[:1]:
            readers.setdefault(name, []).append(node)
    other_reads = {name for node in graph.node for name in node.input[1:]} | {o.name for o in graph.output}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    found: dict[str, tuple[float, float]] = {}
    for tensor, users in readers.items():
        if tensor in other_reads:
            continue
        intervals = [responsive_range(user, constants) for user in users]
        if all(interval is not None for interval in intervals):
            found[tensor] = (min(i[0] for i in intervals), max(i[1] for i in intervals))  # type: ignore[index]
    return found


def saturated_ranges(model: onnx.ModelProto, ranges: Ranges) -> Ranges:
    """``ranges`` with each tensor that only saturating activations read narrowed to the union of their
    responsive intervals (never widened)."""
    narrowed = dict(ranges)
    for tensor, (bottom, top) in responsive_intervals(model).items():
        if tensor in ranges:
            low, high = ranges[tensor]
            if max(low, bottom) < min(high, top):
                narrowed[tensor] = (max(low, bottom), min(high, top))
    return narrowed
