"""Zero-point-free quantization of the activations no weighted op reads (the openvino target).

ONNX Runtime's U8S8 scheme gives every activation a uint8 zero point, which its QLinearConv needs (on x86 it fuses
Q/DQ into integer kernels only where input and output are uint8; otherwise the convolution runs in float, which is
why the cpu target keeps the scheme as it is). OpenVINO's
low-precision transformations run a zero point as a Subtract, and where the dequantized value goes to an
elementwise join, an upsampling or a pool instead of a convolution, they first Convert the uint8 tensor to float
with a reference (unvectorised) kernel, which cost a real text detector a large share of its run, while NNCF's graph,
whose zero points are all 0, has none (measured: docs/results/int8-design.md, 'Zero points and Concats in place'). A
convolution folds its input's zero point into its kernel on both runtimes, so only the tensors no weighted op reads are
rewritten: there the uint8 range [lo, hi] becomes int8 with zero point 0 and scale max(|lo|, |hi|) / 127, which both
runtimes run without a Subtract.

A nearest Resize (or a pool, a reshape) writes its input's values, so ONNX Runtime's quantizer gives its input and
output the same scale and zero point, and OpenVINO drops that requantization only while they stay equal: the pairs
linked through such an op are rewritten together, or not at all where one of them has a weighted reader.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import GraphIndex
from trtpipe.optimize.int8.qdq.profiles import WEIGHTED_OPS

# Ops that hand on their input's values (a subset of them, rearranged or repeated): quantized alike on both sides.
VALUE_PRESERVING = ("Resize", "Upsample", "MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                    "Slice", "Split", "Identity")


Pairs = dict[str, tuple[onnx.NodeProto, list[onnx.NodeProto]]]  # Q output -> (that Q, its DQs)


def zero_point_free_joins(model: onnx.ModelProto) -> int:
    """Rewrite each activation Q/DQ pair (uint8, zero point not 0) that no weighted op reads to int8 with zero
    point 0 over the same range; returns how many pairs it rewrote."""
    graph = model.graph
    index = GraphIndex.of(model)
    readers, outputs = index.readers, index.graph_outputs
    pairs = _uint8_activation_pairs(graph, index)
    groups = _linked_groups(pairs, index)

    def weighted_or_output(name: str) -> bool:
        return any(dq.output[0] in outputs or any(r.op_type in WEIGHTED_OPS for r in readers.get(dq.output[0], []))
                   for dq in pairs[name][1])

    kept = {groups[name] for name in pairs if weighted_or_output(name)}
    rewritten = 0
    for name, (q, dqs) in pairs.items():
        if groups[name] in kept:
            continue
        _make_symmetric(graph, name, q, dqs, index.initializers)
        rewritten += 1
    read = {i for node in graph.node for i in node.input}
    for tensor in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(tensor)
    return rewritten


def _uint8_activation_pairs(graph: onnx.GraphProto, index: GraphIndex) -> Pairs:
    """Each activation Q with a constant uint8 scalar zero point other than 0 whose readers are all DQs, by its
    output: the Q and its DQs (what :func:`zero_point_free_joins` may rewrite)."""
    constants, readers = index.initializers, index.readers
    pairs: Pairs = {}
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.input[0] in constants or len(q.input) < 3 \
                or q.input[1] not in constants or q.input[2] not in constants:
            continue
        zero_point = numpy_helper.to_array(constants[q.input[2]])
        dqs = [r for r in readers.get(q.output[0], []) if r.op_type == "DequantizeLinear"]
        if zero_point.dtype != np.uint8 or zero_point.size != 1 or int(zero_point) == 0 or not dqs \
                or len(dqs) != len(readers[q.output[0]]):
            continue
        pairs[q.output[0]] = (q, dqs)
    return pairs


def _linked_groups(pairs: Pairs, index: GraphIndex) -> dict[str, str]:
    """Each pair's group, named by one of its members: pairs linked through a value-preserving op (the pair a
    Resize reads and the one after it) share one, so they are rewritten together or not at all."""
    group = {name: name for name in pairs}

    def root(name: str) -> str:
        while group[name] != name:
            name = group[name]
        return name

    dequantized = {dq.output[0]: name for name, (_, dqs) in pairs.items() for dq in dqs}
    for name, (q, _) in pairs.items():
        source = index.producer.get(q.input[0])
        if source is not None and source.op_type in VALUE_PRESERVING and source.input[0] in dequantized:
            group[root(name)] = root(dequantized[source.input[0]])
    return {name: root(name) for name in pairs}


def _make_symmetric(graph: onnx.GraphProto, name: str, q: onnx.NodeProto, dqs: list[onnx.NodeProto],
                    constants: dict[str, onnx.TensorProto]) -> None:
    """Point ``q`` and its ``dqs`` at new int8 parameters with zero point 0 whose scale covers the uint8 range they
    had: its larger side over 127."""
    scale = float(numpy_helper.to_array(constants[q.input[1]]))
    zero = int(numpy_helper.to_array(constants[q.input[2]]))
    symmetric = max(zero, 255 - zero) * scale / 127  # the larger side of [-zero*scale, (255-zero)*scale]
    scale_name, zero_name = f"{name}_symmetric_scale", f"{name}_symmetric_zero_point"
    graph.initializer.extend([numpy_helper.from_array(np.array(symmetric, np.float32), scale_name),
                              numpy_helper.from_array(np.array(0, np.int8), zero_name)])
    for node in (q, *dqs):
        node.input[1], node.input[2] = scale_name, zero_name
