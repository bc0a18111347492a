"""Take some nodes of a quantized model back to FP32 without quantizing again.

The accuracy budget tries many mixes of INT8 and FP32 nodes. Re-running the quantizer for each costs seconds
and throws away whatever was learned on top of its output (AdaRound's rounding, bias correction). Here a node
goes back to FP32 by surgery on the quantized graph instead: it reads every input as the FP32 model names it,
at full precision. Its weights and bias come from the FP32 model; an activation input is read from before its
Q/DQ. Where the quantizer folded an activation into the layer before it (ONNX Runtime drops a Relu or ReLU6
whose output is quantized, because the quantization clamps), the activation is restored for the FP32 reader.
Everything else in the model, learned rounding included, stays as it is. Q/DQ pairs nobody reads any more are
removed.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import producers_of, taken_names
from trtpipe.onnx_info import fresh_name
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.int8.qdq.quantize import prune_unread
from trtpipe.optimize.int8.qdq.quantize import quantized_op_types as quantized_op_types_of


def keep_in_fp32(quantized: onnx.ModelProto, fp32: onnx.ModelProto, nodes: Iterable[str],
                 profile: QuantProfile) -> onnx.ModelProto:
    """``quantized`` with ``nodes`` computing in FP32; ``fp32`` is the model it was quantized from with
    ``profile`` (same node names). Names that are not quantized nodes of ``quantized`` change nothing."""
    result = copy.deepcopy(quantized)
    graph = result.graph
    twins = {node.name: node for node in graph.node}
    reference = {node.name: node for node in fp32.graph.node}
    kept = {name for name in nodes if name in twins and name in reference
            and twins[name].op_type == reference[name].op_type}
    quantized_op_types = set(quantized_op_types_of(profile))
    restore = _Restorer(result, fp32, profile.int8_outputs, kept, quantized_op_types)
    for name in kept:
        for index, tensor in enumerate(reference[name].input):
            twins[name].input[index] = restore.tensor(tensor)
    for name in kept:
        _unquantize_output(graph, twins[name], restore, reference,
                           lambda n: n.op_type in quantized_op_types and n.name not in kept)
    prune_unread(graph)
    _sort_topologically(graph)
    return result


def reading_dequantized(quantized: onnx.ModelProto) -> set[str]:
    """Names of the nodes of ``quantized`` that read a dequantized tensor: only those can go back to FP32."""
    dequantized = {o for n in quantized.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return {node.name for node in quantized.graph.node if any(i in dequantized for i in node.input)}


class _Restorer:
    """Finds (or rebuilds) the tensor of a quantized graph that holds an FP32-model tensor's float value."""

    def __init__(self, result: onnx.ModelProto, fp32: onnx.ModelProto, int8_outputs: bool, kept: set[str],
                 quantized_op_types: set[str]) -> None:
        self.graph = result.graph
        self.int8_outputs, self.kept, self.quantized_op_types = int8_outputs, kept, quantized_op_types
        self.twins = {node.name: node for node in self.graph.node}
        self.initializers = {t.name: t for t in self.graph.initializer}
        self.fp32_initializers = {t.name: t for t in fp32.graph.initializer}
        self.fp32_producer = producers_of(fp32.graph)
        self.inputs = {i.name for i in fp32.graph.input}
        self.taken = taken_names(self.graph)
        self.found: dict[str, str] = {}
        self.reading_dequantized = reading_dequantized(result)  # restoring adds no DQ and removes none

    def _fresh(self, name: str) -> str:
        return fresh_name(f"{name}_fp32", self.taken)

    def tensor(self, name: str) -> str:
        if not name or name in self.inputs:
            return name
        if name not in self.found:
            self.found[name] = self._initializer(name) if name in self.fp32_initializers else self._activation(name)
        return self.found[name]

    def _initializer(self, name: str) -> str:
        original = self.fp32_initializers[name]
        present = self.initializers.get(name)
        if present is not None and _same(present, original):
            return name
        restored = copy.deepcopy(original)
        restored.name = name if present is None and name not in self.taken else self._fresh(name)
        self.taken.add(restored.name)
        self.graph.initializer.append(restored)
        self.initializers[restored.name] = restored
        return restored.name

    def _quantized(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` stays INT8: a quantized op type reading a dequantized tensor, not going back to FP32."""
        return (node.name not in self.kept and node.op_type in self.quantized_op_types
                and node.name in self.reading_dequantized)

    def _dequantized(self, tensor: str) -> str | None:
        """The output of the Q/DQ pair that reads ``tensor``, if there is one."""
        for q in self.graph.node:
            if q.op_type == "QuantizeLinear" and q.input[0] == tensor:
                for dq in self.graph.node:
                    if dq.op_type == "DequantizeLinear" and dq.input[0] == q.output[0]:
                        return dq.output[0]
        return None

    def _activation(self, name: str) -> str:
        producer = self.fp32_producer.get(name)
        if producer is None:
            raise ValueError(f"tensor {name!r} is neither an input, an initializer nor a node output of the FP32 model")
        index = list(producer.output).index(name)
        twin = self.twins.get(producer.name)
        if twin is not None and twin.op_type == producer.op_type:
            # The same node in the quantized graph computes this value; the quantizer may have renamed its output
            # (to the name of an activation it folded), so read it by position. Where INT8 kernels write INT8
            # (ONNX Runtime's QLinearConv), a quantized producer keeps its output Q/DQ: read after it, or the
            # producer would fall out of its INT8 kernel.
            value = twin.output[index]
            return (self._dequantized(value) or value) if self.int8_outputs and self._quantized(twin) else value
        # The quantizer removed the node (a folded activation): rebuild it for the FP32 reader.
        rebuilt = copy.deepcopy(producer)
        rebuilt.name = self._fresh(producer.name or producer.op_type)
        for position, tensor in enumerate(producer.input):
            rebuilt.input[position] = self.tensor(tensor)
        for position, tensor in enumerate(producer.output):
            rebuilt.output[position] = self._fresh(tensor) if tensor else tensor
        self.graph.node.append(rebuilt)
        for original, renamed in zip(producer.output, rebuilt.output, strict=True):
            self.found[original] = renamed
        return rebuilt.output[index]


def _unquantize_output(graph: onnx.GraphProto, node: onnx.NodeProto, restore: _Restorer,
                       reference: dict[str, onnx.NodeProto], quantized: Callable[[onnx.NodeProto], bool]) -> None:
    """A quantizer that quantizes outputs (ONNX Runtime's U8S8 QDQ does, for QLinearConv) puts Q/DQ after the
    node for its own sake; once the node is FP32 that Q/DQ stays only for readers that compute in INT8. Readers
    that do not (a ReduceMean, another FP32 node) and the graph's outputs read the float value again, as the
    FP32 model names it (a folded activation comes back)."""
    outputs = {o.name for o in graph.output}
    for position in range(len(node.output)):
        tensor = node.output[position]
        for q in [n for n in graph.node if n.op_type == "QuantizeLinear" and n.input[0] == tensor]:
            for dq in [n for n in graph.node if n.op_type == "DequantizeLinear" and n.input[0] == q.output[0]]:
                for reader in [n for n in graph.node if dq.output[0] in n.input and not quantized(n)]:
                    original = reference.get(reader.name)
                    if original is None or original.op_type != reader.op_type:
                        continue
                    for index, name in enumerate(reader.input):
                        if name == dq.output[0]:
                            reader.input[index] = restore.tensor(original.input[index])
                final = dq.output[0]
                if final in outputs:  # the graph output comes from the float value again
                    value = restore.tensor(final)
                    graph.node.remove(dq)
                    for other in graph.node:
                        other.input[:] = [final if name == value else name for name in other.input]
                        other.output[:] = [final if name == value else name for name in other.output]
def _same(a: onnx.TensorProto, b: onnx.TensorProto) -> bool:
    x, y = numpy_helper.to_array(a), numpy_helper.to_array(b)
    return x.dtype == y.dtype and x.shape == y.shape and bool(np.array_equal(x, y))


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """Put rebuilt nodes before their readers, keeping the existing order otherwise (Kahn's algorithm, the
    earliest ready node first)."""
    nodes = list(graph.node)
    producer = {o: index for index, node in enumerate(nodes) for o in node.output if o}
    waiting = [len({producer[i] for i in node.input if i in producer}) for node in nodes]
    readers: dict[int, set[int]] = {}
    for index, node in enumerate(nodes):
        for tensor in node.input:
            if tensor in producer:
                readers.setdefault(producer[tensor], set()).add(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    ordered: list[onnx.NodeProto] = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(copy.deepcopy(nodes[index]))
        for reader in readers.get(index, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, reader)
    if len(ordered) != len(nodes):
        raise ValueError("the graph has a cycle")
    del graph.node[:]
    graph.node.extend(ordered)
