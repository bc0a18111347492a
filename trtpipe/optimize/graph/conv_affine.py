"""A convolution's output scaled and shifted by constants, folded into its weights and bias (part of ``fuse``).

MobileOne-style blocks (PP-LCNetV3, the backbone of PP-OCRv4's detector) follow each convolution with learned
scalars, ``w0 * conv(x) + w1``, ahead of the activation. onnxslim folds a Mul or Add into a convolution only when
the constant is the second operand and holds one value per channel, so these stay as two elementwise ops over the
whole feature map, and in an INT8 graph they also stand between the convolution and its activation: ONNX
Runtime's QLinearConv can then not take the activation, and OpenVINO and TensorRT fuse them only as extra
epilogue work. Folding is exact up to float rounding: ``a * (W * x + b) + c == (a W) * x + (a b + c)`` for a
constant ``a``, ``c`` per output channel.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import readers_of

FOLDABLE = ("Mul", "Add", "Sub", "Div")


def _channel_vector(value: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """``value`` as one number per output channel, when it broadcasts against an [N, C, spatial...] tensor of
    ``rank`` dimensions without touching any dimension but C; else None."""
    if value.ndim > rank or value.dtype.kind != "f":
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(size != 1 for axis, size in enumerate(shape) if axis != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,)).astype(np.float64)


def fold_conv_affine(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` with every Mul, Add, Sub (``conv - c``) or Div (``conv / c``) by a per-channel or scalar constant
    that is a Conv's only reader folded into that Conv, repeatedly (a Mul then an Add both fold); and how many
    nodes it removed (the initializers they read stay, for the caller to drop). A Conv whose weights or bias
    are computed at run time, or whose output a graph output or a second reader needs, is left alone."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    folded = 0
    while (found := _next_foldable(graph, initializers, outputs)) is not None:
        _fold(graph, *found, initializers)
        folded += 1
    return model, folded


def _next_foldable(graph: onnx.GraphProto, initializers: dict[str, onnx.TensorProto],
                   outputs: set[str]) -> tuple[onnx.NodeProto, onnx.NodeProto, np.ndarray] | None:
    """The first Conv in graph order that can take its only reader in (see :func:`fold_conv_affine`): the Conv,
    that Mul, Add, Sub or Div, and its constant as one number per output channel; None when none can."""
    readers = readers_of(graph)
    for conv in graph.node:
        if conv.op_type != "Conv" or conv.output[0] in outputs or conv.input[1] not in initializers:
            continue
        users = readers.get(conv.output[0], [])
        if len(users) != 1 or users[0].op_type not in FOLDABLE:
            continue
        op = users[0]
        constant = op.input[1] if op.input[0] == conv.output[0] else op.input[0]
        if constant not in initializers or constant == conv.output[0] \
                or (op.op_type in ("Sub", "Div") and op.input[0] != conv.output[0]):
            continue
        weight = numpy_helper.to_array(initializers[conv.input[1]])
        bias_name = _bias_name(conv)
        if bias_name and bias_name not in initializers:
            continue
        vector = _channel_vector(numpy_helper.to_array(initializers[constant]), weight.ndim, weight.shape[0])
        if vector is None or (op.op_type == "Div" and not np.all(vector)):
            continue
        return conv, op, vector
    return None


def _bias_name(conv: onnx.NodeProto) -> str:
    """The Conv's bias input, or "" when it has none."""
    return conv.input[2] if len(conv.input) > 2 and conv.input[2] else ""


def _fold(graph: onnx.GraphProto, conv: onnx.NodeProto, op: onnx.NodeProto, vector: np.ndarray,
          initializers: dict[str, onnx.TensorProto]) -> None:
    """Fold ``op`` (by the per-channel ``vector``) into ``conv``: new weight and bias initializers named after
    ``op``'s output (in the weights' dtype, computed in float64), the Conv writing that output, ``op`` and the
    shape information on its inputs gone."""
    weight = numpy_helper.to_array(initializers[conv.input[1]])
    bias_name = _bias_name(conv)
    bias = numpy_helper.to_array(initializers[bias_name]).astype(np.float64) if bias_name \
        else np.zeros(weight.shape[0])
    scale = {"Mul": vector, "Div": 1.0 / vector}.get(op.op_type)
    if scale is not None:
        weight = weight * scale.reshape((-1,) + (1,) * (weight.ndim - 1))
        bias = bias * scale
    else:
        bias = bias + (vector if op.op_type == "Add" else -vector)
    dtype = numpy_helper.to_array(initializers[conv.input[1]]).dtype
    new_weight = numpy_helper.from_array(weight.astype(dtype), f"{op.output[0]}_weight")
    new_bias = numpy_helper.from_array(bias.astype(dtype), f"{op.output[0]}_bias")
    graph.initializer.extend([new_weight, new_bias])
    initializers[new_weight.name], initializers[new_bias.name] = new_weight, new_bias
    del conv.input[1:]
    conv.input.extend([new_weight.name, new_bias.name])
    conv.output[0] = op.output[0]
    stale = [info for info in graph.value_info if info.name == op.input[0] or info.name == op.input[1]]
    for info in stale:
        if info.name not in initializers:
            graph.value_info.remove(info)
    graph.node.remove(op)
