"""Integer HardSwish for ONNX Runtime (cpu target): the activation as three quantized elementwise ops.

ONNX Runtime has no quantized HardSwish: between a QLinearConv that writes the pre-activation in uint8 and the Q of
the next layer's input, it dequantizes, runs HardSwish in float (as HardSigmoid and Mul) and quantizes again, four
passes over a tensor at the network's widest resolutions. HardSwish is ``x * clip(x + 3, 0, 6) / 6``, and each
part has an integer kernel ONNX Runtime fuses from Q/DQ (QLinearAdd, QLinearMul), with the clip done by the
saturation of a Q whose range is exactly [0, 6]:

    h6 = Q[0, 6](DQ(x) + 3)          QLinearAdd: clip(x + 3, 0, 6), steps of 6/255
    h  = Q[0, 1](DQ(h6) * 1/6)       QLinearMul by a constant: the hard sigmoid, steps of 1/255
    y  = Q_y(DQ(x) * DQ(h))          QLinearMul into the Q the next layer already reads

Every Q and the DQ that reads it hold one scale (conformance rule ``qdq-scale-type``): folding the 1/6 into a
rescaling DQ would save the middle op but make the integers mean something else than where they were written.
What it adds to the error: the hard sigmoid rounds to 1/255 (at most 0.2 % of y), where the float version
rounded nothing; y itself was rounded by Q_y either way. Measured: docs/results/int8-design.md, 'Integer HardSwish'.

Only the pattern ``DQ(uint8 x) -> HardSwish -> Q`` (every reader a Q) is rewritten: a float pre-activation or a
float reader would put the float pass back anyway.

A HardSwish whose gain scale_depthwise carried into the convolution before it
(``conv' -> x' = g x -> Mul(1/g) -> HardSwish -> Mul(g) -> Q``, uint8 Q/DQ between the Mul and the HardSwish) is
``g * hardswish(x) = x' * clip(x' / (6 g) + 1/2, 0, 1)``, and becomes

    x'   = Q[range of x'](x')         the convolution's output: ONNX Runtime runs it as QLinearConv
    u    = Q[-1/2, 1/2](DQ(x') * c)   QLinearMul by c = 1 / (6 g), exact in uint8 (g = 255 / k: c = k / (6 * 255))
    gate = Q[0, 1](DQ(u) + 1/2)       QLinearAdd: the hard sigmoid, clipped by the Q's saturation
    y'   = Q_y(DQ(x') * DQ(gate))     QLinearMul into the Q the depthwise convolution reads

with no float op left; the range of x' is its calibrated range narrowed to where the HardSwish responds
(saturation.py, through the Mul(1/g)). The Q/DQ the quantizer put on x itself goes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.graph_index import GraphIndex, producers_of, readers_of, tensor_names
from trtpipe.optimize.graph.gains import EXACT_LEVELS, GAIN, INVERSE_GAIN, gain_kind

if TYPE_CHECKING:
    from trtpipe.optimize.int8.calibration.calibrate import Ranges

PREFIX = "trtpipe_hardswish"
LEVELS = 255.0
HALF_LEVELS = 254.0  # u in [-1/2, 1/2] as uint8 around zero point 127: 1/2 itself is 127 steps


@dataclass
class Gained:
    """A carried gain's HardSwish in the quantized graph, with the nodes the rewrite replaces."""

    inverse: onnx.NodeProto  # Mul(x', 1/g)
    quantize: onnx.NodeProto  # the Q and DQ the quantizer put on x
    dequantize: onnx.NodeProto
    hardswish: onnx.NodeProto
    gain: onnx.NodeProto  # Mul(h, g), which Qs read
    steps: np.ndarray  # k = 255 / g per channel, shaped as g


def integer_hardswish(model: onnx.ModelProto, ranges: Ranges | None = None) -> int:
    """Rewrite every ``DequantizeLinear(uint8) -> HardSwish -> QuantizeLinear`` in ``model`` into QLinearAdd and
    QLinearMul-shaped Q/DQ, and with ``ranges`` (the quantizer's, narrowed) every carried gain's HardSwish (module
    docstring); returns how many it rewrote."""
    gained = _gained(model, ranges) if ranges else 0
    return gained + _plain(model)


def _plain(model: onnx.ModelProto) -> int:
    graph = model.graph
    found = GraphIndex.of(model)
    constants, producer, readers, outputs = found.initializers, found.producer, found.readers, found.graph_outputs

    def rewritable(node: onnx.NodeProto) -> onnx.NodeProto | None:
        dq = producer.get(node.input[0]) if node.op_type == "HardSwish" else None
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 3 or dq.input[2] not in constants:
            return None
        if numpy_helper.to_array(constants[dq.input[2]]).dtype != np.uint8:
            return None
        users = readers.get(node.output[0], [])
        if not users or node.output[0] in outputs or any(u.op_type != "QuantizeLinear" for u in users):
            return None
        return dq

    sites = {node.name or node.output[0]: dq for node in graph.node if (dq := rewritable(node)) is not None}
    if not sites:
        return 0
    names = tensor_names(graph)  # fresh names join it as they are taken
    const = _constants(graph, names)
    rewritten: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        dq = sites.get(node.name or node.output[0])
        if dq is None:
            rewritten.append(node)
            continue
        stem = _unique(f"{PREFIX}_{index}", names)
        zero = const["zero"]
        rewritten += [
            _dequantize(const["three_q"], const["three_scale"], zero, f"{stem}_three"),
            *_quantized("Add", [node.input[0], f"{stem}_three"], f"{stem}_clipped", const["six_scale"], zero),
            _dequantize(const["sixth_q"], const["sixth_scale"], zero, f"{stem}_sixth"),
            *_quantized("Mul", [f"{stem}_clipped", f"{stem}_sixth"], f"{stem}_gate", const["one_scale"], zero),
            # A DQ of its own for each reader: ONNX Runtime fuses a node unit from the DQ nodes only it reads.
            _dequantize(dq.input[0], dq.input[1], dq.input[2], f"{stem}_x"),
            helper.make_node("Mul", [f"{stem}_x", f"{stem}_gate"], [node.output[0]],
                             name=node.name or f"{stem}_mul"),
        ]
    del graph.node[:]
    graph.node.extend(rewritten)
    return len(sites)


def _gained_sites(graph: onnx.GraphProto, ranges: Ranges) -> list[Gained]:
    """The carried gains' HardSwish nodes whose pre-activation is uint8 and whose every reader of ``g h`` is a Q."""
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer, readers = producers_of(graph), readers_of(graph)
    outputs = {o.name for o in graph.output}

    def only(tensor: str) -> onnx.NodeProto | None:
        users = readers.get(tensor, [])
        return users[0] if len(users) == 1 and tensor not in outputs else None

    found = []
    for node in graph.node:
        hardswish = node  # (the identity checks below narrow `node` to what only() returns)
        dq = producer.get(node.input[0]) if node.op_type == "HardSwish" else None
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            continue
        inverse = producer.get(q.input[0])
        gain = only(node.output[0])
        if inverse is None or gain is None or gain_kind(inverse) != INVERSE_GAIN or gain_kind(gain) != GAIN:
            continue
        if only(dq.output[0]) is not node or only(q.output[0]) is not dq or only(inverse.output[0]) is not q \
                or only(inverse.input[0]) is not inverse or inverse.input[0] not in producer \
                or inverse.input[0] not in ranges or len(dq.input) < 3 or dq.input[2] not in constants \
                or constants[dq.input[2]].dtype != np.uint8:
            continue
        scaled_users = readers.get(gain.output[0], [])
        if not scaled_users or gain.output[0] in outputs or any(u.op_type != "QuantizeLinear" for u in scaled_users):
            continue
        g, inverse_g = constants.get(gain.input[1]), constants.get(inverse.input[1])
        if g is None or inverse_g is None or g.shape != inverse_g.shape \
                or not np.allclose(g.astype(np.float64) * inverse_g, 1.0, rtol=1e-5):
            continue
        steps = EXACT_LEVELS / g.astype(np.float64)
        if np.any(np.abs(steps - np.round(steps)) > 1e-3) or steps.min() < 0.5 or steps.max() > EXACT_LEVELS + 0.5:
            continue  # not a gain snapped to 255 / k: 1 / (6 g) would not be exact in uint8
        found.append(Gained(inverse, q, dq, hardswish, gain, np.round(steps)))
    return found


def _gained(model: onnx.ModelProto, ranges: Ranges) -> int:
    """Rewrite each carried gain's HardSwish (``_gained_sites``) into integer ops (module docstring)."""
    graph = model.graph
    sites = _gained_sites(graph, ranges)
    if not sites:
        return 0
    names = tensor_names(graph)
    shared = _gained_constants(graph, names)
    replaced = {id(n) for site in sites for n in (site.inverse, site.quantize, site.dequantize, site.hardswish)}
    at = {id(site.gain): site for site in sites}
    rewritten: list[onnx.NodeProto] = []
    for index, node in enumerate(graph.node):
        if id(node) in replaced:
            continue
        site = at.get(id(node))
        if site is None:
            rewritten.append(node)
            continue
        rewritten += _gained_nodes(graph, site, _unique(f"{PREFIX}_gained_{index}", names), shared, ranges)
    del graph.node[:]
    graph.node.extend(rewritten)  # the gains' constants, now unread, go with the caller's prune_unread
    return len(sites)


def _gained_constants(graph: onnx.GraphProto, names: set[str]) -> dict[str, str]:
    """The scalar initializers every carried gain's rewrite shares, added to ``graph`` under names it does not use
    yet: the scale of the exact uint8 steps 1 / (6 g), the half-range scale and zero point the gate's product is
    written in, the half that product is shifted by, zero point 0, and the gate's scale 1/255."""
    add = graph.initializer.append
    shared = {key: _unique(f"{PREFIX}_{key}", names) for key in ("c_scale", "u_scale", "u_zero", "half_q", "zero",
                                                                    "gate_scale")}
    add(numpy_helper.from_array(np.array(1.0 / (6.0 * EXACT_LEVELS), np.float32), shared["c_scale"]))
    add(numpy_helper.from_array(np.array(1.0 / HALF_LEVELS, np.float32), shared["u_scale"]))
    add(numpy_helper.from_array(np.array(HALF_LEVELS // 2, np.uint8), shared["u_zero"]))
    add(numpy_helper.from_array(np.array(HALF_LEVELS // 2, np.uint8), shared["half_q"]))
    add(numpy_helper.from_array(np.array(0, np.uint8), shared["zero"]))
    add(numpy_helper.from_array(np.array(1.0 / LEVELS, np.float32), shared["gate_scale"]))
    return shared


def _gained_nodes(graph: onnx.GraphProto, site: Gained, stem: str, shared: dict[str, str],
                  ranges: Ranges) -> list[onnx.NodeProto]:
    """The integer ops that replace one carried gain's HardSwish (module docstring), named from ``stem``: its
    pre-activation quantized on its calibrated range, with that site's own initializers added to ``graph``."""
    from trtpipe.runtime.registry import quantization_tools

    add = graph.initializer.append
    scaled = site.inverse.input[0]
    low, high = ranges[scaled]
    x_zero, x_scale = quantization_tools().scale_zero_point(np.array(low, np.float32), np.array(high, np.float32),
                                       np.array(0, np.uint8), np.array(255, np.uint8))
    add(numpy_helper.from_array(np.array(x_scale, np.float32), f"{stem}_x_scale"))
    add(numpy_helper.from_array(np.array(x_zero, np.uint8), f"{stem}_x_zero"))
    add(numpy_helper.from_array(site.steps.astype(np.uint8), f"{stem}_c_q"))
    x_scale_name, x_zero_name = x_params = [f"{stem}_x_scale", f"{stem}_x_zero"]
    zero = shared["zero"]
    return [
        helper.make_node("QuantizeLinear", [scaled, *x_params], [f"{stem}_x_q"], name=f"{stem}_x_q"),
        # A DQ of its own for each reader: ONNX Runtime fuses a node unit from the DQ nodes only it reads.
        _dequantize(f"{stem}_x_q", x_scale_name, x_zero_name, f"{stem}_x_u"),
        _dequantize(f"{stem}_c_q", shared["c_scale"], zero, f"{stem}_c"),
        *_quantized("Mul", [f"{stem}_x_u", f"{stem}_c"], f"{stem}_u", shared["u_scale"], shared["u_zero"]),
        _dequantize(shared["half_q"], shared["u_scale"], zero, f"{stem}_half"),
        *_quantized("Add", [f"{stem}_u", f"{stem}_half"], f"{stem}_gate", shared["gate_scale"], zero),
        _dequantize(f"{stem}_x_q", x_scale_name, x_zero_name, f"{stem}_x_y"),
        helper.make_node("Mul", [f"{stem}_x_y", f"{stem}_gate"], [site.gain.output[0]], name=f"{stem}_mul"),
    ]


def _dequantize(quantized: str, scale: str, zero: str, output: str) -> onnx.NodeProto:
    return helper.make_node("DequantizeLinear", [quantized, scale, zero], [output], name=f"{output}_dq")


def _quantized(op: str, inputs: list[str], output: str, scale: str, zero: str) -> list[onnx.NodeProto]:
    """``op`` on dequantized inputs with its result through Q/DQ on (``scale``, ``zero``), which ONNX Runtime fuses
    into QLinear<op>; ``output`` names the dequantized result."""
    return [helper.make_node(op, inputs, [f"{output}_float"], name=f"{output}_{op.lower()}"),
            helper.make_node("QuantizeLinear", [f"{output}_float", scale, zero], [f"{output}_q"], name=f"{output}_q"),
            _dequantize(f"{output}_q", scale, zero, output)]


def _constants(graph: onnx.GraphProto, names: set[str]) -> dict[str, str]:
    """The scalar initializers every rewrite shares, added to ``graph`` under names it does not use yet: 3 and 1/6
    as exact uint8 constants (255 times a scale of value/255), the scales 6/255 and 1/255, and zero point 0."""
    values: dict[str, np.ndarray] = {
        "three_q": np.array(LEVELS, np.uint8), "three_scale": np.array(3.0 / LEVELS, np.float32),
        "sixth_q": np.array(LEVELS, np.uint8), "sixth_scale": np.array(1.0 / 6.0 / LEVELS, np.float32),
        "six_scale": np.array(6.0 / LEVELS, np.float32), "one_scale": np.array(1.0 / LEVELS, np.float32),
        "zero": np.array(0, np.uint8),
    }
    named = {}
    for key, value in values.items():
        named[key] = _unique(f"{PREFIX}_{key}", names)
        graph.initializer.append(numpy_helper.from_array(value, named[key]))
    return named


def _unique(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in taken:
        candidate, suffix = f"{name}_{suffix}", suffix + 1
    taken.add(candidate)
    return candidate
