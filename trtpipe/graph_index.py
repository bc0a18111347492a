"""One index over an ONNX graph: who writes each tensor, who reads it, which tensors are constant, and their types.

Conformance rules and optimize's passes and INT8 steps all walk a graph from a tensor to its producer and its
readers; they build this index once (``GraphIndex``), or its two maps alone (``producers_of``, ``readers_of``),
instead of each counting its own. The index is a snapshot: a rewrite that
adds or removes nodes builds a new one before it reads again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
from onnx import numpy_helper

STANDARD_DOMAINS = ("", "ai.onnx")


def producers_of(graph: onnx.GraphProto) -> dict[str, onnx.NodeProto]:
    """Each tensor a node writes -> that node: what a graph rewrite looks up to walk from a tensor to its source."""
    return {output: node for node in graph.node for output in node.output}


def readers_of(graph: onnx.GraphProto) -> dict[str, list[onnx.NodeProto]]:
    """Each tensor a node reads -> the nodes that read it, in graph order (an omitted optional input is read as
    "": its key is kept, as a rewrite renaming inputs sees it)."""
    found: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def read_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor something reads: a node, or the graph's caller (its outputs)."""
    return set(readers_of(graph)) | {o.name for o in graph.output}


def tensor_names(graph: onnx.GraphProto) -> set[str]:
    """Every tensor a graph holds: its inputs, its initializers and what its nodes write."""
    return {o for node in graph.node for o in node.output} | {t.name for t in graph.initializer} | {
        i.name for i in graph.input}


def taken_names(graph: onnx.GraphProto) -> set[str]:
    """Every node and tensor name a graph uses, for a rewrite's fresh names (onnx_info.fresh_name)."""
    return {node.name for node in graph.node} | tensor_names(graph)


@dataclass
class GraphIndex:
    model: onnx.ModelProto
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)  # tensor -> the node that writes it
    readers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)  # tensor -> the nodes that read it, in order
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)  # the graph's initializers, by name
    constants: dict[str, onnx.TensorProto] = field(default_factory=dict)  # initializers and Constant nodes' values
    graph_outputs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, model: onnx.ModelProto) -> GraphIndex:
        index = cls(model)
        graph = model.graph
        index.producer = producers_of(graph)
        index.readers = {name: nodes for name, nodes in readers_of(graph).items() if name}
        index.initializers = {i.name: i for i in graph.initializer}
        index.constants = dict(index.initializers)
        for node in graph.node:  # Constant nodes are initializers in all but name
            value = _constant_value(node) if node.op_type == "Constant" else None
            if value is not None:
                index.constants.setdefault(node.output[0], value)
        index.graph_outputs = {o.name for o in graph.output}
        return index

    @cached_property
    def types(self) -> dict[str, int]:
        """Tensor name -> ONNX element type, where shape inference or the graph's declarations know it (worked out
        on first use: most readers of the index never ask)."""
        try:
            inferred = onnx.shape_inference.infer_shapes(self.model)
        except Exception:  # a graph shape inference cannot follow still gets the types it declares
            inferred = self.model
        types: dict[str, int] = {}
        for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            if value.type.HasField("tensor_type"):
                types[value.name] = value.type.tensor_type.elem_type
        for name, tensor in self.constants.items():
            types[name] = tensor.data_type
        return types

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    @property
    def opset(self) -> int:
        return next((o.version for o in self.model.opset_import if o.domain in STANDARD_DOMAINS), 0)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of the constant tensor ``name`` (an initializer or a Constant node's output); None otherwise."""
        tensor = self.constants.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def from_op(self, name: str) -> str | None:
        node = self.producer.get(name)
        return None if node is None else node.op_type

    def label(self, node: onnx.NodeProto) -> str:
        return f"{node.name or '(unnamed)'} ({node.op_type})"


def _constant_value(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """A Constant node's value as a tensor: its ``value``, or a number or list of numbers it gives as one
    (``value_float``, ``value_ints``...); None for a string or sparse one."""
    for found in node.attribute:
        if found.name == "value":
            return found.t
        if found.name in ("value_float", "value_floats", "value_int", "value_ints"):
            kind = np.float32 if "float" in found.name else np.int64
            return numpy_helper.from_array(np.array(onnx.helper.get_attribute_value(found), kind), node.output[0])
    return None
