"""Activation chains: the elementwise float ops that compute a function of one tensor, found and evaluated.

Exporters spell one activation many ways: a HardSwish is ``x * clip(x + 3, 0, 6) / 6``, ``x * relu6(x + 3) *
(1/6)`` or ``x * hardsigmoid(x)``; a SiLU is ``x * sigmoid(x)``. Fusion needs to know what such a chain computes
rather than how it is spelled, to replace it by the one operator that computes the same function; it asks the
chain itself, by evaluating it with numpy on the ops' ONNX definitions, so any composition of the ops below is
understood and no list of spellings has to be kept up to date.

A chain is the set of elementwise nodes that read the tensor (or each other) and otherwise only scalar constants,
with exactly one tensor leaving it: what the rest of the graph reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import readers_of


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _attr(node: onnx.NodeProto, name: str, default: float) -> float:
    for attribute in node.attribute:
        if attribute.name == name:
            return float(onnx.helper.get_attribute_value(attribute))
    return default


def hard_sigmoid(x: np.ndarray, alpha: float = 0.2, beta: float = 0.5) -> np.ndarray:
    return np.clip(alpha * x + beta, 0.0, 1.0)


def hard_swish(x: np.ndarray) -> np.ndarray:
    return x * hard_sigmoid(x, 1.0 / 6.0, 0.5)


UNARY: dict[str, Callable[[np.ndarray, onnx.NodeProto], np.ndarray]] = {
    "Relu": lambda x, n: np.maximum(x, 0.0),
    "Sigmoid": lambda x, n: _sigmoid(x),
    "Tanh": lambda x, n: np.tanh(x),
    "HardSigmoid": lambda x, n: hard_sigmoid(x, _attr(n, "alpha", 0.2), _attr(n, "beta", 0.5)),
    "HardSwish": lambda x, n: hard_swish(x),
    "LeakyRelu": lambda x, n: np.where(x >= 0, x, _attr(n, "alpha", 0.01) * x),
    "Elu": lambda x, n: np.where(x >= 0, x, _attr(n, "alpha", 1.0) * np.expm1(np.minimum(x, 0.0))),
    "Softplus": lambda x, n: np.logaddexp(0.0, x),
    "Neg": lambda x, n: -x,
    "Identity": lambda x, n: x,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Max": np.maximum, "Min": np.minimum,
}
ELEMENTWISE = frozenset((*UNARY, *BINARY, "Clip"))


@dataclass(frozen=True)
class Chain:
    """The elementwise nodes computing ``output`` from ``source`` (in graph order) and the scalars they read."""

    source: str
    output: str
    nodes: tuple[onnx.NodeProto, ...]
    scalars: dict[str, float]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The chain's output for inputs ``x`` (float64), by the ops' ONNX definitions."""
        return self.values(x)[self.output]

    def values(self, x: np.ndarray) -> dict[str, np.ndarray]:
        values: dict[str, np.ndarray] = {self.source: x}

        def value(name: str) -> np.ndarray:
            return values[name] if name in values else np.asarray(self.scalars[name], np.float64)

        low: np.ndarray | float
        high: np.ndarray | float
        for node in self.nodes:
            if node.op_type == "Clip":
                if len(node.input) == 1:  # opset < 11: bounds are attributes
                    low, high = _attr(node, "min", -np.inf), _attr(node, "max", np.inf)
                else:
                    low = value(node.input[1]) if len(node.input) > 1 and node.input[1] else -np.inf
                    high = value(node.input[2]) if len(node.input) > 2 and node.input[2] else np.inf
                result = np.clip(value(node.input[0]), low, high)
            elif node.op_type in UNARY:
                result = UNARY[node.op_type](value(node.input[0]), node)
            else:
                result = BINARY[node.op_type](value(node.input[0]), value(node.input[1]))
            values[node.output[0]] = np.broadcast_to(np.asarray(result, np.float64), x.shape)
        return values


class Chains:
    """Finds activation chains in one graph (its readers and scalar constants indexed once)."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.scalars = scalar_constants(model)
        self.readers = {name: nodes for name, nodes in readers_of(graph).items() if name}
        self.outputs = {o.name for o in graph.output}
        self.position = {id(node): index for index, node in enumerate(graph.node)}

    def of(self, tensor: str) -> Chain | None:
        """The chain that reads ``tensor``; None where its readers are anything else (a residual join, a Concat,
        a tensor read both by the chain and by something outside it, a graph output halfway)."""
        nodes: list[onnx.NodeProto] = []
        inside = {tensor}
        grew = True
        while grew:  # to a fixed point: HardSwish's Mul reads x and the Clip after it, so it joins last
            grew = False
            for name in list(inside):
                for node in self.readers.get(name, []):
                    if (node.op_type in ELEMENTWISE and len(node.output) == 1 and node.domain in ("", "ai.onnx")
                            and not any(node is member for member in nodes)
                            and all(i in inside or i in self.scalars for i in node.input if i)):
                        nodes.append(node)
                        inside.add(node.output[0])
                        grew = True
        if not nodes:
            return None
        members = {id(node) for node in nodes}
        leaving = [name for name in inside if name in self.outputs
                   or any(id(node) not in members for node in self.readers.get(name, []))]
        if len(leaving) != 1 or leaving[0] == tensor:
            return None
        nodes.sort(key=lambda node: self.position[id(node)])
        used = {i for node in nodes for i in node.input}
        return Chain(tensor, leaving[0], tuple(nodes), {k: v for k, v in self.scalars.items() if k in used})


def scalar_constants(model: onnx.ModelProto) -> dict[str, float]:
    """Initializers and Constant nodes holding one float value (what an activation's arithmetic reads)."""
    values: dict[str, float] = {}
    for tensor in model.graph.initializer:
        if int(np.prod(tensor.dims)) == 1 and tensor.data_type in _FLOATS:
            values[tensor.name] = float(numpy_helper.to_array(tensor).reshape(()))
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            array = numpy_helper.to_array(node.attribute[0].t)
            if array.size == 1 and array.dtype.kind == "f":
                values[node.output[0]] = float(array.reshape(()))
    return values


_FLOATS = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
