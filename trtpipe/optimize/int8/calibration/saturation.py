"""Calibrated ranges narrowed to where the tensor's readers still respond.

An activation that saturates maps everything beyond a bound to one value: HardSwish is 0 for every input at or
below -3, HardSigmoid is constant outside [-beta/alpha, (1-beta)/alpha], Relu is 0 below 0 and Clip constant
outside [min, max]. A tensor that only such activations read can be quantized over the responsive part of its
calibrated range and nothing its readers compute changes: the clamped values give the same outputs as the values
they replace. The steps get finer by the ratio of the ranges. It matters for a convolution's pre-activation, which
ONNX Runtime's QLinearConv must write in uint8 to run in integer: a HardSwish pre-activation spans down to about
-40 in PP-LCNet's backbone while HardSwish reads only [-3, max].

Through a Mul by a positive constant per channel (a carried gain's ``Mul(1/g)`` before a HardSwish) each channel
responds on its own interval, [-3 g_c, max]; one bound for the tensor from those alone would have to reach the
lowest -3 g, so the INT8 pass takes the channels' own lowest and highest values on the calibration data inside
their intervals (``narrowed_per_channel``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import readers_of
from trtpipe.onnx_info import attribute, clip_bounds

if TYPE_CHECKING:
    from trtpipe.optimize.int8.calibration.calibrate import Ranges


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
    their data input), or only Muls by a positive constant whose outputs are such tensors (a carried gain's
    ``Mul(1/g)`` before a HardSwish: the union over the channels, ``channel_intervals`` has each); graph outputs
    are left out, since a user reads every value of those."""
    found, scaled = _intervals(model)
    for tensor, (bottom, top) in scaled.items():
        found[tensor] = (float(bottom.min()), float(top.max()))
    return found


def channel_intervals(model: onnx.ModelProto) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{tensor: per-channel (bottom, top)} for each tensor that only Muls by a positive constant read, each into a
    tensor only saturating activations read: channel c responds on [bottom / c_c, top / c_c]."""
    return _intervals(model)[1]


def _intervals(model: onnx.ModelProto) -> tuple[dict[str, tuple[float, float]],
                                                dict[str, tuple[np.ndarray, np.ndarray]]]:
    graph = model.graph
    readers = readers_of(graph)  # of the tensors below, read as the data input (the first) and nowhere else
    other_reads = {name for node in graph.node for name in node.input[1:]} | {o.name for o in graph.output}
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants.update({n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
                      if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    found: dict[str, tuple[float, float]] = {}
    for tensor, users in readers.items():
        if tensor in other_reads:
            continue
        intervals = [responsive_range(user, constants) for user in users]
        known = [interval for interval in intervals if interval is not None]
        if len(known) == len(intervals):
            found[tensor] = (min(i[0] for i in known), max(i[1] for i in known))
    scaled: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for tensor, users in readers.items():
        if tensor in other_reads or tensor in found:
            continue
        through = [_through_scale(user, constants, found) for user in users]
        known_scaled = [interval for interval in through if interval is not None]
        if through and len(known_scaled) == len(through):
            scaled[tensor] = (np.min([i[0] for i in known_scaled], axis=0),
                              np.max([i[1] for i in known_scaled], axis=0))
    return found, scaled


def _through_scale(node: onnx.NodeProto, constants: dict[str, np.ndarray],
                   found: dict[str, tuple[float, float]]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per channel (axis 1), the interval of a Mul's first input that maps into its output's responsive interval,
    where the Mul scales by a positive constant that is one value or one per channel."""
    if node.op_type != "Mul" or len(node.input) != 2 or node.input[1] not in constants or node.output[0] not in found:
        return None
    scale = constants[node.input[1]].astype(np.float64)
    per_channel = scale.ndim >= 2 and scale.size == scale.shape[1]
    if scale.size == 0 or not np.all(scale > 0) or (scale.size > 1 and not per_channel):
        return None
    scale = scale.reshape(-1)
    bottom, top = found[node.output[0]]
    return bottom / scale, top / scale


def narrowed_per_channel(ranges: Ranges, intervals: dict[str, tuple[np.ndarray, np.ndarray]],
                         bounds: dict[str, tuple[np.ndarray, np.ndarray]]) -> Ranges:
    """``ranges`` with each tensor of ``intervals`` (``channel_intervals``) narrowed to what its channels took
    (``bounds``: per-channel lowest and highest on the calibration data) inside their own responsive intervals.
    One bound for the whole tensor would have to reach the lowest channel's -3 g: with a carried gain's spread of
    255 that is hundreds of times the range any channel uses."""
    narrowed = dict(ranges)
    for tensor, (bottom, top) in intervals.items():
        if tensor not in ranges or tensor not in bounds:
            continue
        lowest, highest = bounds[tensor]
        low = float(np.min(np.maximum(lowest, bottom)))
        high = float(np.max(np.minimum(highest, top)))
        low, high = max(ranges[tensor][0], low), min(ranges[tensor][1], high)
        if low < high:
            narrowed[tensor] = (low, high)
    return narrowed


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
