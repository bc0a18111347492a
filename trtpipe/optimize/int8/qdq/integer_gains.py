"""Integer channel gains for ONNX Runtime (cpu target): ``scale_depthwise``'s per-channel Mul folded into the integer
convolution that writes its input.

Where ``scale_depthwise`` could not fold a depthwise convolution's input gain into the op before it (a ReLU6
writes the tensor: ``g * clip(x, 0, 6)`` is no convolution's output), it leaves ``Mul(g)`` in front of the
depthwise convolution, and the placement keeps it float (one per-tensor scale on gains up to 1024x apart would undo
them). ONNX Runtime then dequantizes the tensor, multiplies it and quantizes it again: three passes over a feature
map at the network's widest resolutions, once per block (on MobileNetV2 at 224x224 its ten gains took the file from
about quantize_static's speed to 0.7x of it, issue 57).

After quantization the ReLU6 is gone too: the quantizer folds it into the Q after the convolution, whose range
clamps it. So ``Conv -> Q_x -> DQ_x -> Mul(g) -> Q_y`` becomes ``Conv' -> Q_y``, the convolution's per-channel
weight and bias scales times g (its int8 weights and int32 bias unchanged). That is exact where clamping by Q_y
alone is what clamping by both did: g times Q_x's range covers Q_y's in every channel, to half a step of Q_y. It
holds for scale_depthwise's gains: the widest channel has gain 1, so Q_y's top is Q_x's (a ReLU6's 6.0, or the
calibrated top below it), and Q_y already clamped every narrower channel at its own calibrated top. The result:
one rounding instead of two, and no op (MobileNetV2's ten gains all fold; MobileNetV3's ReLU blocks' three).

A gain that reads a float tensor (a SiLU's output: the gain exists because one per-tensor scale could not hold
that tensor's channels, so quantizing it first would undo the gain) stays a float Mul.

A gain that reads a quantized tensor no convolution writes (a Concat's or a channel shuffle's output: ShuffleNetV2's
stage ends, GhostNet's ghost modules; a MaxPool's) goes the other way, into the depthwise convolutions that read it
(:func:`reader_gains`): ``Q_x -> DQ_x -> Mul(g) -> Q_y -> DQ_y -> DWConv(w / g)`` becomes ``Q_x -> DQ_x -> DWConv(w)``,
the depthwise weights' per-channel scales times g (their int8 values unchanged) and the bias requantized on the new
input scale. The gain there bought nothing: ``Q_x`` had already rounded every channel on one per-tensor step, and
``Q_y`` only rounded again. One rounding instead of two, and no float op (ShuffleNetV2's file ran 0.93x
quantize_static's, 95 % 0.90-0.97x, with its two such gains in float: the model-zoo sweep of 2026-12-04, AVX2).

``equalize``'s per-channel ReLU6 bounds go the same way (:func:`integer_bounds`). Equalizing through a ReLU6 turns
it into ``Relu -> Min(b)``, b_i = 6 / s_i, so the FP32 network is unchanged; ONNX Runtime has no integer Min, so
``Q_x -> DQ_x -> Min(b) -> Q_y`` ran in float between two roundings (MobileNetV2 at 224x224: its 34 bounds took the
INT8 file from 1.8x FP32 to 0.7x, issue 57). Where ``Q_y``'s range lies inside ``Q_x``'s and its top is at or below
every b_i (to half a step of ``Q_y``), clamping by ``Q_y`` alone is what the Min and both clamps did, so the chain
becomes ``-> Q_y``: one rounding, no float op. Equalization on the cpu target measures each ReLU6 channel's range
after its clip and puts no b_i below the widest scaled channel's range, the top of ``Q_y`` on the data it measured;
a Min whose bound still lies below its Q's top (calibration data wider than that) is kept.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.graph_index import producers_of, readers_of
from trtpipe.onnx_info import attribute
from trtpipe.optimize.graph.gains import GAIN, gain_kind


def integer_gains(model: onnx.ModelProto) -> int:
    """Fold every channel-gain Mul of ``model`` that reads an integer convolution's output through its Q/DQ into
    that convolution, and every other one that reads a quantized tensor into the depthwise convolutions that read
    it (see the module), in place; how many it folded (the Mul and the Q/DQ it leaves unread are for the caller to
    prune)."""
    return _rewrite_each(model, _fold_into_writer) + reader_gains(model)


def reader_gains(model: onnx.ModelProto) -> int:
    """Fold every channel-gain Mul that reads a quantized tensor and is read, through ``Q_y -> DQ_y``, by depthwise
    convolutions only into those convolutions (see the module), in place; how many it folded."""
    return _rewrite_each(model, _fold_into_readers)


def _rewrite_each(model: onnx.ModelProto, rewrite: Callable[..., bool]) -> int:
    """``rewrite(node, graph, producer, readers, weights, outputs)`` on every node of ``model``, in place; each node
    it rewrote (its readers now read elsewhere) gets an unread output for the caller to prune. How many it did."""
    graph = model.graph
    producer = producers_of(graph)
    readers = readers_of(graph)
    weights = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    rewritten = 0
    for node in list(graph.node):
        if rewrite(node, graph, producer, readers, weights, outputs):
            rewritten += 1
            node.output[0] = f"{node.output[0]}_folded"  # unread now: the caller prunes it
    return rewritten


def _scale(tensor: onnx.TensorProto, gains: np.ndarray) -> np.ndarray:
    values = numpy_helper.to_array(tensor).astype(np.float32).reshape(-1)
    return (np.broadcast_to(values, gains.shape) * gains).astype(np.float32)


def _channel_gains(gain: onnx.TensorProto | None) -> np.ndarray | None:
    """The positive per-channel gains of a ``[1, C, 1, ...]`` constant, flat; None for any other constant."""
    if gain is None:
        return None
    gains = numpy_helper.to_array(gain).astype(np.float32)
    if gains.ndim < 3 or gains.shape[0] != 1 or any(d != 1 for d in gains.shape[2:]) or not np.all(gains > 0):
        return None
    return gains.reshape(-1)


def _constant_dequantize(dq: onnx.NodeProto | None, weights: dict[str, onnx.TensorProto]) -> bool:
    """Whether ``dq`` is a DequantizeLinear whose values, scale and zero point (if any) are all initializers."""
    return dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in weights \
        and dq.input[1] in weights and not (len(dq.input) > 2 and dq.input[2] and dq.input[2] not in weights)


def _rescaled_dequantize(dq: onnx.NodeProto, gains: np.ndarray, name: str, graph: onnx.GraphProto,
                         before: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> np.ndarray:
    """A copy of the constant ``dq`` named ``name``, inserted before ``before``, its per-channel scales times
    ``gains`` (its integer values unchanged, its zero point made per-channel as the scale is); the new scales."""
    scales = _scale(weights[dq.input[1]], gains)
    scale = numpy_helper.from_array(scales, f"{name}_scale")
    zero = dq.input[2] if len(dq.input) > 2 and dq.input[2] else ""
    if zero:
        values = numpy_helper.to_array(weights[zero]).reshape(-1)
        zero_tensor = numpy_helper.from_array(np.broadcast_to(values, gains.shape).copy(), f"{name}_zero")
        graph.initializer.append(zero_tensor)
        zero = zero_tensor.name
    graph.initializer.append(scale)
    graph.node.insert(list(graph.node).index(before), helper.make_node(
        "DequantizeLinear", [dq.input[0], scale.name, *([zero] if zero else [])], [name], name=name, axis=0))
    return scales


def _fold_into_writer(node: onnx.NodeProto, graph: onnx.GraphProto, producer: dict[str, onnx.NodeProto],
                      readers: dict[str, list[onnx.NodeProto]], weights: dict[str, onnx.TensorProto],
                      outputs: set[str]) -> bool:
    """Fold the gain ``node`` into the per-channel scales of the integer convolution that writes its input,
    ``Conv -> Q_x -> DQ_x -> Mul(g) -> Q_y`` becoming ``Conv' -> Q_y`` (weight and bias scales times g: the int8
    weights and int32 bias are unchanged), where the clamp the two Qs make equals Q_y's alone: ``g * Q_x``'s
    range covers ``Q_y``'s in every channel. One rounding instead of two, and no op. True where it folded."""
    if gain_kind(node) != GAIN or len(node.input) != 2 or node.output[0] in outputs:
        return False
    chain = _writer_chain(node, producer)
    users = readers.get(node.output[0], [])
    if chain is None or not users or any(user.op_type != "QuantizeLinear" for user in users):
        return False
    conv, q_x, dq_x = chain
    if [r.name for r in readers.get(conv.output[0], [])] != [q_x.name] \
            or [r.name for r in readers.get(q_x.output[0], [])] != [dq_x.name] \
            or [r.name for r in readers.get(dq_x.output[0], [])] != [node.name] \
            or {conv.output[0], q_x.output[0], dq_x.output[0]} & outputs:
        return False  # the convolution's output, as it is, is read elsewhere too
    gains = _channel_gains(weights.get(node.input[1]))
    if gains is None:
        return False
    scaled = [dq for dq in (producer.get(name) for name in conv.input[1:3]) if dq is not None]
    if len(scaled) != len(conv.input[1:3]) or not all(_constant_dequantize(dq, weights) for dq in scaled) \
            or weights[scaled[0].input[0]].dims[0] != gains.size:
        return False
    if not all(_clamp_kept(q_x, user, gains, weights) for user in users):
        return False
    for index, dq in enumerate(scaled, start=1):
        name = f"{dq.output[0]}_gained"
        _rescaled_dequantize(dq, gains, name, graph, conv, weights)
        conv.input[index] = name
    for user in users:
        user.input[0] = conv.output[0]
    return True


def _fold_into_readers(node: onnx.NodeProto, graph: onnx.GraphProto, producer: dict[str, onnx.NodeProto],
                       readers: dict[str, list[onnx.NodeProto]], weights: dict[str, onnx.TensorProto],
                       outputs: set[str]) -> bool:
    """Fold the gain ``node`` back into the depthwise convolutions that read it, ``Q_x -> DQ_x -> Mul(g) -> Q_y ->
    DQ_y -> DWConv(w / g)`` becoming ``Q_x -> DQ_x -> DWConv(w)``: each one's weight scales times g (int8 weights
    unchanged) and its int32 bias requantized on ``Q_x``'s scale. True where it folded."""
    if gain_kind(node) != GAIN or len(node.input) != 2 or node.output[0] in outputs:
        return False
    gains, dq_x = _channel_gains(weights.get(node.input[1])), producer.get(node.input[0])
    if gains is None or dq_x is None or dq_x.op_type != "DequantizeLinear" or _uint8_range(dq_x, weights) is None:
        return False
    q_ys = readers.get(node.output[0], [])
    dq_ys = [dq for q in q_ys for dq in readers.get(q.output[0], [])]
    convs = [conv for dq in dq_ys for conv in readers.get(dq.output[0], [])]
    if not q_ys or any(q.op_type != "QuantizeLinear" for q in q_ys) \
            or any(dq.op_type != "DequantizeLinear" for dq in dq_ys) \
            or {t for n in (*q_ys, *dq_ys) for t in n.output} & outputs \
            or not convs or not all(_depthwise_reader(conv, dq_ys, gains.size, producer, weights) for conv in convs):
        return False
    x_scale = float(numpy_helper.to_array(weights[dq_x.input[1]]).reshape(-1)[0])
    for conv in convs:
        name = f"{producer[conv.input[1]].output[0]}_regained"
        weight_scale = _rescaled_dequantize(producer[conv.input[1]], gains, name, graph, conv, weights)
        conv.input[1] = name
        if len(conv.input) > 2 and conv.input[2]:
            conv.input[2] = _requantized_bias(producer[conv.input[2]], x_scale * weight_scale, graph, weights)
        conv.input[0] = dq_x.output[0]
    return True


def _depthwise_reader(conv: onnx.NodeProto, dq_ys: list[onnx.NodeProto], channels: int,
                      producer: dict[str, onnx.NodeProto], weights: dict[str, onnx.TensorProto]) -> bool:
    """Whether ``conv`` is a depthwise convolution over ``channels`` that reads one of ``dq_ys`` as its input only,
    its weights per-channel int8 through a DequantizeLinear of initializers, its bias (if any) int32 so too."""
    if conv.op_type != "Conv" or attribute(conv, "group", 1) != channels or len(conv.input) < 2:
        return False
    names = {dq.output[0] for dq in dq_ys}
    if conv.input[0] not in names or any(name in names for name in conv.input[1:]):
        return False
    found = [producer.get(name) for name in conv.input[1:3] if name]
    quantized = [dq for dq in found if dq is not None]
    if len(quantized) != len(found) or not all(_constant_dequantize(dq, weights) for dq in quantized):
        return False
    weight = weights[quantized[0].input[0]]
    return list(weight.dims[:2]) == [channels, 1] and attribute(quantized[0], "axis", 1) == 0 \
        and (len(quantized) < 2 or weights[quantized[1].input[0]].data_type == onnx.TensorProto.INT32)


def _requantized_bias(dq: onnx.NodeProto, scale: np.ndarray, graph: onnx.GraphProto,
                      weights: dict[str, onnx.TensorProto]) -> str:
    """A DequantizeLinear of the int32 bias ``dq`` reads, requantized on ``scale`` (input scale times each channel's
    weight scale, as the integer kernel reads its bias); its output's name."""
    old_scale = numpy_helper.to_array(weights[dq.input[1]]).astype(np.float64).reshape(-1)
    values = numpy_helper.to_array(weights[dq.input[0]]).astype(np.float64).reshape(-1) * old_scale
    info = np.iinfo(np.int32)
    name = f"{dq.output[0]}_regained"
    quantized = np.clip(np.round(values / scale.astype(np.float64)), info.min, info.max).astype(np.int32)
    graph.initializer.extend([numpy_helper.from_array(quantized, f"{name}_int32"),
                              numpy_helper.from_array(scale.astype(np.float32), f"{name}_scale")])
    graph.node.insert(list(graph.node).index(dq) + 1, helper.make_node(
        "DequantizeLinear", [f"{name}_int32", f"{name}_scale"], [name], name=name, axis=0))
    return name


def _writer_chain(node: onnx.NodeProto, producer: dict[str, onnx.NodeProto]) \
        -> tuple[onnx.NodeProto, onnx.NodeProto, onnx.NodeProto] | None:
    """(Conv, Q_x, DQ_x) where ``node`` reads ``Conv -> Q_x -> DQ_x``; None otherwise."""
    dq_x = producer.get(node.input[0])
    if dq_x is None or dq_x.op_type != "DequantizeLinear":
        return None
    q_x = producer.get(dq_x.input[0])
    if q_x is None or q_x.op_type != "QuantizeLinear":
        return None
    conv = producer.get(q_x.input[0])
    if conv is None or conv.op_type != "Conv":
        return None
    return conv, q_x, dq_x


def _uint8_range(q: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> tuple[float, float] | None:
    """The lowest and highest value a per-tensor uint8 QuantizeLinear represents; None for any other Q."""
    if q.input[1] not in weights or len(q.input) < 3 or q.input[2] not in weights:
        return None
    scale = numpy_helper.to_array(weights[q.input[1]]).reshape(-1)
    zero = numpy_helper.to_array(weights[q.input[2]])
    if scale.size != 1 or zero.dtype != np.uint8:
        return None
    point = float(zero.reshape(-1)[0])
    return (0 - point) * float(scale[0]), (255 - point) * float(scale[0])


def _clamp_kept(q_x: onnx.NodeProto, q_y: onnx.NodeProto, gains: np.ndarray,
                weights: dict[str, onnx.TensorProto]) -> bool:
    """Whether ``g`` times the range ``q_x`` represents covers ``q_y``'s in every channel (to half a step of
    ``q_y``): then clamping once by ``q_y`` reaches the levels clamping by both did."""
    x, y = _uint8_range(q_x, weights), _uint8_range(q_y, weights)
    if x is None or y is None:
        return False
    # Within half a step of q_y, the clamp of both reaches q_y's end level just as q_y's alone does (a ReLU6's 6.0
    # on a grid whose top level is 6.007, from calibrated ranges that agree to float precision, not exactly).
    tolerance = 0.5 * (y[1] - y[0]) / 255
    return bool(np.all(gains * x[0] <= y[0] + tolerance) and np.all(gains * x[1] >= y[1] - tolerance))


def integer_bounds(model: onnx.ModelProto) -> int:
    """Remove every per-channel ``Min(b)`` between ``Q_x -> DQ_x`` and Qs that clamp as tightly alone (see the
    module), in place: the Qs read what ``Q_x`` read. How many it removed (the Min and the Q/DQ it leaves unread are
    for the caller to prune)."""
    return _rewrite_each(model, _bound_removed)


def _bound_removed(node: onnx.NodeProto, graph: onnx.GraphProto, producer: dict[str, onnx.NodeProto],
                   readers: dict[str, list[onnx.NodeProto]], weights: dict[str, onnx.TensorProto],
                   outputs: set[str]) -> bool:
    """Where ``node`` is a Min against constant bounds that ``Q_x -> DQ_x -> Min -> Q_y`` clamps as ``Q_y`` alone
    does, make every ``Q_y`` read what ``Q_x`` read. True where it did."""
    if node.op_type != "Min" or len(node.input) != 2 or node.output[0] in outputs:
        return False
    constant = [name for name in node.input if name in weights]
    if len(constant) != 1:
        return False
    dq_x = producer.get(next(name for name in node.input if name not in weights))
    if dq_x is None or dq_x.op_type != "DequantizeLinear":
        return False
    q_x = producer.get(dq_x.input[0])
    users = readers.get(node.output[0], [])
    if q_x is None or q_x.op_type != "QuantizeLinear" or not users \
            or any(user.op_type != "QuantizeLinear" for user in users) \
            or [r.name for r in readers.get(q_x.output[0], [])] != [dq_x.name] \
            or [r.name for r in readers.get(dq_x.output[0], [])] != [node.name] \
            or {q_x.output[0], dq_x.output[0]} & outputs:
        return False
    least = float(np.min(numpy_helper.to_array(weights[constant[0]])))
    if not all(_bound_kept(q_x, user, least, weights) for user in users):
        return False
    for user in users:
        user.input[0] = q_x.input[0]
    return True


def _bound_kept(q_x: onnx.NodeProto, q_y: onnx.NodeProto, least: float, weights: dict[str, onnx.TensorProto]) -> bool:
    """Whether ``q_y`` alone clamps as ``q_x``, then ``Min(b)`` with b's smallest value ``least``, then ``q_y`` did
    (to half a step of ``q_y``): its range inside ``q_x``'s and its top at or below every bound."""
    x, y = _uint8_range(q_x, weights), _uint8_range(q_y, weights)
    if x is None or y is None:
        return False
    tolerance = 0.5 * (y[1] - y[0]) / 255
    return x[0] <= y[0] + tolerance and y[1] <= min(x[1], least) + tolerance
