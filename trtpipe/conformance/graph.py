"""An index over an ONNX graph that every rule reads: producers, consumers, initializers, types, opset."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

STANDARD_DOMAINS = ("", "ai.onnx")


@dataclass
class GraphIndex:
    model: onnx.ModelProto
    producer: dict[str, onnx.NodeProto] = field(default_factory=dict)
    consumers: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)  # tensor name -> onnx elem type (where known)
    graph_outputs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, model: onnx.ModelProto) -> GraphIndex:
        index = cls(model)
        graph = model.graph
        for node in graph.node:
            for name in node.output:
                index.producer[name] = node
            for name in node.input:
                if name:
                    index.consumers.setdefault(name, []).append(node)
        index.initializers = {i.name: i for i in graph.initializer}
        for node in graph.node:  # Constant nodes are initializers in all but name
            if node.op_type == "Constant":
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                if value is not None:
                    index.initializers.setdefault(node.output[0], value)
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # a graph shape inference cannot follow still gets the types it declares
            inferred = model
        for value in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            if value.type.HasField("tensor_type"):
                index.types[value.name] = value.type.tensor_type.elem_type
        for tensor in index.initializers.values():
            index.types.setdefault(tensor.name, tensor.data_type)
        for name, tensor in index.initializers.items():
            index.types[name] = tensor.data_type
        index.graph_outputs = {o.name for o in graph.output}
        return index

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        return list(self.model.graph.node)

    @property
    def opset(self) -> int:
        return next((o.version for o in self.model.opset_import if o.domain in STANDARD_DOMAINS), 0)

    def constant(self, name: str) -> np.ndarray | None:
        tensor = self.initializers.get(name)
        return None if tensor is None else numpy_helper.to_array(tensor)

    def from_op(self, name: str) -> str | None:
        node = self.producer.get(name)
        return None if node is None else node.op_type

    def label(self, node: onnx.NodeProto) -> str:
        return f"{node.name or '(unnamed)'} ({node.op_type})"


def attribute(node: onnx.NodeProto, name: str, default: int | None = None) -> int | None:
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else onnx.helper.get_attribute_value(found)
