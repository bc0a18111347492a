"""Dequantized weights of float convolutions, computed once at load instead of at every run.

ONNX Runtime's CPU provider runs a Q/DQ convolution as an integer kernel (QLinearConv) only when its output goes
through one QuantizeLinear. Where a float op reads the output instead (an exported HardSwish or SiLU, whose
pre-activation trtpipe's cpu placement leaves unrounded), it keeps the DequantizeLinear of the weights in the
graph, deliberately not constant-folded, and the Conv gets a weight tensor that is recomputed at every run and that
it cannot pre-pack, which made a real INT8 detector slower than its FP32 file (measured:
docs/results/int8-design.md, 'Float weights on ONNX Runtime').

Folding is exact: the same float32 arithmetic DequantizeLinear does ((q - zero_point) * scale, per channel where the
scale is), done once (the float kernel that then runs may sum in another order than the unpacked one).
Activations keep their Q/DQ, so the model still computes what an INT8 runtime computes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import producers_of, read_names, readers_of

FLOAT_CONVOLUTIONS = ("Conv", "ConvTranspose")


def _integer_output(node: onnx.NodeProto, readers: dict[str, list[onnx.NodeProto]], outputs: set[str]) -> bool:
    """Whether ONNX Runtime can give ``node`` an integer kernel: one reader, a QuantizeLinear, and not an output."""
    users = readers.get(node.output[0], [])
    return len(users) == 1 and users[0].op_type == "QuantizeLinear" and node.output[0] not in outputs


def dequantize_constant(dq: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """What a DequantizeLinear of initializers computes, in float32 (per tensor or per channel along its ``axis``);
    None where an input is not an initializer or the quantization is blocked. Shared by the float-weight fold here
    and the FP16-rounding rewrite (fp16_rounding.py)."""
    if any(name and name not in initializers for name in dq.input):
        return None
    values = numpy_helper.to_array(initializers[dq.input[0]]).astype(np.float32)
    scale = numpy_helper.to_array(initializers[dq.input[1]]).astype(np.float32)
    zero = (numpy_helper.to_array(initializers[dq.input[2]]).astype(np.float32)
            if len(dq.input) > 2 and dq.input[2] else np.zeros_like(scale))
    if scale.ndim == 1 and scale.size > 1:  # per channel along ``axis``
        axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % values.ndim
        shape = [1] * values.ndim
        shape[axis] = -1
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    elif scale.ndim > 1 or (scale.ndim == 1 and values.ndim == 0):
        return None  # blocked quantization
    return (values - zero) * scale


def _dequantized(dq: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> np.ndarray | None:
    """What ``dq`` computes, where a float32 fold is exact: an FP16 scale makes ONNX Runtime compute in FP16."""
    scale = initializers.get(dq.input[1]) if len(dq.input) > 1 else None
    if scale is None or scale.data_type != onnx.TensorProto.FLOAT:
        return None
    return dequantize_constant(dq, initializers)


def _float_convolution_reads(model: onnx.ModelProto) -> Iterator[tuple[onnx.NodeProto, int, onnx.NodeProto]]:
    """(convolution, input index, its DequantizeLinear) for each weight or bias a convolution that ONNX Runtime runs
    in float (see the module's docstring) reads through a DequantizeLinear of an initializer."""
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    producer = producers_of(graph)
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type not in FLOAT_CONVOLUTIONS or _integer_output(node, readers, outputs):
            continue
        for index in range(1, len(node.input)):
            dq = producer.get(node.input[index])
            if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in initializers:
                yield node, index, dq


def fold_float_convolution_weights(model: onnx.ModelProto) -> int:
    """Replace, in place, the DequantizeLinear of each weight and bias read by a convolution that ONNX Runtime
    runs in float (see the module's docstring) with its float32 value; returns how many were folded."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    folded: dict[str, str] = {}  # a DequantizeLinear's output -> the initializer holding its value
    for node, index, dq in list(_float_convolution_reads(model)):
        if dq.output[0] not in folded:
            value = _dequantized(dq, initializers)
            if value is None:
                continue
            name = f"{dq.output[0]}__float"
            graph.initializer.append(numpy_helper.from_array(value, name))
            folded[dq.output[0]] = name
        node.input[index] = folded[dq.output[0]]
    if folded:
        read = read_names(graph)
        kept = [node for node in graph.node if not (node.op_type == "DequantizeLinear" and node.output[0] in folded
                                                     and node.output[0] not in read)]
        del graph.node[:]
        graph.node.extend(kept)
    return len(folded)


def needs_folding(model: onnx.ModelProto) -> bool:
    """Whether ``model`` (its graph; weights need not be loaded) has a float convolution reading a dequantized
    constant: a cheap test before loading the weights to fold them."""
    return next(_float_convolution_reads(model), None) is not None
