"""FP16 as a GPU computes it, on ONNX Runtime's CPU provider: every FP16 tensor rounded to FP16 where it is written.

ONNX Runtime's CPU provider has FP16 kernels for few operators. For the others it computes in FP32: it puts a Cast
to FP32 in front of the node and a Cast back to FP16 after it, then removes each Cast pair that meets between two
such nodes, so a chain of FP16 convolutions, activations and joins runs in FP32 from end to end, and even an
explicit Cast to FP16 in front of the chain can vanish. A value that overflows FP16 (an Add of two large
activations) stays finite there, and nothing is rounded to FP16's 11 bits between the chain's operators. A GPU
(TensorRT, ONNX Runtime CUDA) writes every FP16 tensor in FP16: rounded to the nearest FP16, infinity past 65504.
A TensorRT-target file's accuracy measured on the CPU provider as it is would be an optimistic figure.

:func:`round_fp16_tensors` rewrites a graph so the CPU provider computes what the GPU does: every node that writes
an FP16 tensor computes in FP32 (each of its FP16 inputs is an FP32 tensor holding FP16 values, so nothing is lost
on the way in) and its output goes through an explicit Cast to FP16 and back, which ONNX Runtime keeps since no
FP16 operator is left around it to merge with. Each operator's arithmetic is FP32 with the result rounded once,
what a GPU kernel that accumulates in FP32 writes (TensorRT's and cuDNN's FP16 convolutions do; a kernel that
accumulated in FP16 would round more). Weights dequantized from constants are folded to their FP16 values once.
Tensor names stay as they were, each holding the rounded value, and graph inputs and outputs keep their types, so
a caller (bench, ``trtpipe debug``) sees the same graph interface. Subgraphs (If, Loop) are left as they are.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.graph_index import read_names
from trtpipe.onnx_info import graph_inputs
from trtpipe.runtime.onnxruntime.float_weights import dequantize_constant

FP16, FP32 = TensorProto.FLOAT16, TensorProto.FLOAT
_UNROUNDED, _HALF, _FLOAT = "__fp32", "__fp16", "__float"
# Operators whose output type an attribute sets (the others take it from their inputs).
_TYPE_ATTRIBUTES = ("to", "dtype")


def has_fp16(model: onnx.ModelProto) -> bool:
    """Whether ``model`` computes anything in FP16: a cheap look at its initializers, inputs, Casts and constants
    (no shape inference), so a graph without FP16 is passed by untouched."""
    graph = model.graph
    if any(t.data_type == FP16 for t in graph.initializer):
        return True
    if any(v.type.tensor_type.elem_type == FP16 for v in graph.input):
        return True
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name in _TYPE_ATTRIBUTES and attribute.i == FP16:
                return True
            if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == FP16:
                return True
    return False


def round_fp16_tensors(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """``model`` rewritten so that ONNX Runtime's CPU provider rounds every FP16 tensor as a GPU does (see the
    module's docstring), and how many tensors are rounded; ``model`` itself, and 0, where nothing is FP16. The
    argument is not changed."""
    if not has_fp16(model):
        return model, 0
    types = _types(model)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    initializers = {t.name: t for t in graph.initializer}
    nodes = _fp16_inputs_read_as_fp32(graph)
    renamed = {n.input[0]: n.output[0] for n in nodes}  # an FP16 input -> its FP32 copy
    _fp16_initializers_as_fp32(graph)
    rounded, folded_from = 0, set()
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        half = [o for o in node.output if o and types.get(o) == FP16]
        if not half:
            nodes.append(node)
            continue
        folded = _folded_weight(node, initializers)
        if folded is not None:
            graph.initializer.append(folded)
            initializers[folded.name] = folded
            folded_from.update(node.input)
            continue
        nodes.extend(_rounded_where_written(node, half))
        rounded += len(half)
    del graph.node[:]
    graph.node.extend(nodes)
    _fp16_outputs_kept(graph)
    _drop_unread_initializers(graph, folded_from)
    kept = [v for v in graph.value_info if v.type.tensor_type.elem_type != FP16]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return rewritten, rounded


def _fp16_inputs_read_as_fp32(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """A Cast to FP32 for each FP16 graph input (--no-keep-io-fp32): read once into FP32, exactly, so the nodes
    that read it compute in FP32; the input keeps its FP16 type."""
    nodes: list[onnx.NodeProto] = []
    for value in graph_inputs(graph):
        if value.type.tensor_type.elem_type == FP16:
            nodes.append(helper.make_node("Cast", [value.name], [value.name + _FLOAT], to=FP32,
                                          name=value.name + _FLOAT))
    return nodes


def _fp16_initializers_as_fp32(graph: onnx.GraphProto) -> None:
    """Every FP16 initializer replaced by an FP32 one holding the same values (exact: FP32 holds every FP16)."""
    for tensor in graph.initializer:
        if tensor.data_type == FP16:
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float32), tensor.name))


def _rounded_where_written(node: onnx.NodeProto, half: list[str]) -> list[onnx.NodeProto]:
    """``node``, changed to compute in FP32 and write its FP16 outputs (``half``) under other names, followed by the
    Casts that round each such output to FP16 and back to FP32 under its own name. A Cast to FP16 rounds (and
    overflows) itself, so it only needs the Cast back."""
    native = node.op_type == "Cast"
    if not native:
        _float_attributes(node)
    for index, name in enumerate(node.output):
        if name not in half:
            continue
        if native:
            node.output[index] = name + _HALF
        else:
            node.output[index] = name + _UNROUNDED
    nodes = [node]
    for name in half:
        if not native:
            nodes.append(helper.make_node("Cast", [name + _UNROUNDED], [name + _HALF], to=FP16, name=name + _HALF))
        nodes.append(helper.make_node("Cast", [name + _HALF], [name], to=FP32, name=name + _FLOAT))
    return nodes


def _drop_unread_initializers(graph: onnx.GraphProto, folded_from: set[str]) -> None:
    """The integer weights and scales a folded weight was computed from, removed where nothing reads them now."""
    read = read_names(graph) | {i.name for i in graph.input}
    unread = [t for t in graph.initializer if t.name in folded_from and t.name not in read]
    for tensor in unread:
        graph.initializer.remove(tensor)


def _types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor shape inference can type, initializers and graph IO included (an output declared
    without a type, as a caller exposing intermediate tensors adds it, keeps the type inferred for it)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
             if v.type.tensor_type.elem_type}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return types


def _folded_weight(node: onnx.NodeProto, initializers: dict[str, onnx.TensorProto]) -> onnx.TensorProto | None:
    """A DequantizeLinear of constants writing FP16 (a weight), as the FP32 initializer holding its FP16 value;
    None for any other node."""
    if node.op_type != "DequantizeLinear":
        return None
    value = dequantize_constant(node, initializers)
    if value is None:
        return None  # not all constants, or blocked quantization: left to the rewrite's general rule
    half = value.astype(np.float16)
    return numpy_helper.from_array(half.astype(np.float32), node.output[0])


def _float_attributes(node: onnx.NodeProto) -> None:
    """FP16 the node's attributes ask for (a Constant's value, ConstantOfShape's, an EyeLike's dtype) in FP32."""
    for attribute in node.attribute:
        if attribute.name in _TYPE_ATTRIBUTES and attribute.i == FP16:
            attribute.i = FP32
        elif attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type == FP16:
            value = numpy_helper.to_array(attribute.t).astype(np.float32)
            attribute.t.CopyFrom(numpy_helper.from_array(value, attribute.t.name))


def _fp16_outputs_kept(graph: onnx.GraphProto) -> None:
    """An FP16 graph output is the FP16 value itself: the rounding Cast writes it under its name, and the graph's
    own readers read the FP32 copy."""
    for value in graph.output:
        if value.type.tensor_type.elem_type != FP16:
            continue
        name = value.name
        back = next((n for n in graph.node if n.op_type == "Cast" and list(n.output) == [name]
                     and n.input[0] == name + _HALF), None)
        if back is None:
            continue
        back.output[0] = name + _FLOAT
        for node in graph.node:
            if node is back:
                continue
            node.input[:] = [name + _FLOAT if i == name else i for i in node.input]
            node.output[:] = [name if o == name + _HALF else o for o in node.output]
        back.input[0] = name
