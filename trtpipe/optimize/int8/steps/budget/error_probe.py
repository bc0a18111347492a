"""Each fallback unit's own INT8 error, all units in one run (the first stage of the ranking, :mod:`ranking`).

A probe model computes the FP32 graph and, beside every quantised node, its INT8 twin (the same Q/DQ, scales and
learned weights) fed with the FP32 values, plus, where an input would stay quantised after the fallback, an FP32
twin reading it through that Q/DQ; the graph itself reduces each twin's squared error against the FP32 node's
output, channel by channel. Building that graph is graph surgery of its own, kept apart from the ranking that
reads its figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from trtpipe.graph_index import producers_of, taken_names
from trtpipe.inputs import Batch, count, take
from trtpipe.onnx_info import fresh_name
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.int8.steps.budget.fallback_units import Writers
from trtpipe.optimize.judging.evaluate import run_settings
from trtpipe.runtime.registry import open_model


class _ProbeBuilder:
    """The FP32 graph plus twins of chosen nodes, all reading the FP32 model's values: an INT8 twin per node
    (its Q/DQ, scales and learned weights, from the quantized graph), and where an input would stay quantised
    after a unit's fallback (an INT8 writer outside the unit), an FP32 twin reading that input through its Q/DQ.
    Each twin adds one output, its squared error against the FP32 node's outputs; each node one more, their
    energy."""

    def __init__(self, fp32: onnx.ModelProto, quantized: onnx.ModelProto, writers: Writers | None) -> None:
        self.model = onnx.ModelProto()
        self.model.CopyFrom(fp32)
        del self.model.graph.output[:]
        domains = {o.domain: o for o in self.model.opset_import}
        for opset in quantized.opset_import:
            if opset.domain not in domains:
                self.model.opset_import.append(opset)
            elif domains[opset.domain].version < opset.version:
                domains[opset.domain].version = opset.version
        self.graph = self.model.graph
        self.writers = writers
        self.fp32 = {node.name: node for node in fp32.graph.node}
        self.twins = {node.name: node for node in quantized.graph.node}
        self.producer = {name: node for name, node in producers_of(quantized.graph).items() if name}
        self.q_initializers = {t.name: t for t in quantized.graph.initializer}
        self.constant = set(self.q_initializers)
        for node in quantized.graph.node:  # topological: a node of constants is a constant
            if all(not name or name in self.constant for name in node.input):
                self.constant.update(o for o in node.output if o)
        self.taken = taken_names(self.graph)
        self.copied: dict[str, str] = {}  # quantized-graph tensor -> its copy in the probe
        self.shape_one = self._fresh("probe_shape_one")
        self.graph.initializer.append(helper.make_tensor(self.shape_one, TensorProto.INT64, [1], [1]))
        self.ranks = _ranks(fp32)
        self.axes_as_input = next((o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")), 0) >= 18
        self.outputs: list[str] = []
        # Indices into ``outputs``, one per output of the node (None for an unnamed one): each output's energy,
        # its INT8 twin's error, and for (unit, node) its FP32 twin's error.
        self.energy: dict[str, list[int | None]] = {}
        self.int8: dict[str, list[int | None]] = {}
        self.after: dict[tuple[tuple[str, ...], str], list[int | None]] = {}

    def _fresh(self, name: str) -> str:
        return fresh_name(f"{name}__probe", self.taken)

    def _constant(self, name: str) -> str:
        """A copy of the quantized graph's constant ``name`` (an initializer, or nodes computing one)."""
        if name not in self.copied:
            if name in self.q_initializers:
                tensor = TensorProto()
                tensor.CopyFrom(self.q_initializers[name])
                tensor.name = self._fresh(name)
                self.graph.initializer.append(tensor)
                self.copied[name] = tensor.name
            else:
                node = self.producer[name]
                twin = self._append(node, [self._constant(i) if i else i for i in node.input])
                for original, copy in zip(node.output, twin.output, strict=True):
                    if original:
                        self.copied.setdefault(original, copy)
        return self.copied[name]

    def _append(self, node: onnx.NodeProto, inputs: list[str]) -> onnx.NodeProto:
        twin = onnx.NodeProto()
        twin.CopyFrom(node)
        twin.name = self._fresh(node.name or node.op_type)
        twin.input[:] = inputs
        twin.output[:] = [self._fresh(o) if o else o for o in node.output]
        self.graph.node.append(twin)
        return twin

    def _activation_qdq(self, name: str) -> tuple[onnx.NodeProto, onnx.NodeProto] | None:
        """The QuantizeLinear and DequantizeLinear that make ``name`` from an activation, if that is how."""
        dq = self.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or name in self.constant:
            return None
        q = self.producer.get(dq.input[0])
        return (q, dq) if q is not None and q.op_type == "QuantizeLinear" else None

    def _quantized(self, float_value: str, tensor: str) -> str:
        """The FP32 value ``float_value`` through the Q/DQ that makes ``tensor`` in the quantized graph."""
        if tensor not in self.copied:
            qdq = self._activation_qdq(tensor)
            assert qdq is not None
            q, dq = qdq
            q_copy = self._append(q, [float_value, *(self._constant(i) if i else i for i in q.input[1:])])
            dq_copy = self._append(dq, [q_copy.output[0], *(self._constant(i) if i else i for i in dq.input[1:])])
            self.copied[tensor] = dq_copy.output[0]
        return self.copied[tensor]

    def add(self, name: str) -> bool:
        """Give node ``name`` its INT8 twin; False where the two graphs do not hold it alike."""
        reference, twin = self.fp32.get(name), self.twins.get(name)
        if (reference is None or twin is None or twin.op_type != reference.op_type
                or len(twin.input) != len(reference.input) or len(twin.output) != len(reference.output)):
            return False
        inputs = []
        for float_value, tensor in zip(reference.input, twin.input, strict=True):
            if not tensor:
                inputs.append(tensor)
            elif tensor in self.constant:
                inputs.append(self._constant(tensor))
            elif self._activation_qdq(tensor) is not None:
                inputs.append(self._quantized(float_value, tensor))
            else:
                inputs.append(float_value)  # read in float in the INT8 model too
        copy = self._append(twin, inputs)
        self.energy[name] = [self._energy(o) if o else None for o in reference.output]
        self.int8[name] = [self._error(a, b) if a and b else None
                           for a, b in zip(copy.output, reference.output, strict=True)]
        return True

    def add_after(self, unit: tuple[str, ...], name: str) -> None:
        """The FP32 twin of ``name`` as it computes once ``unit`` is in FP32: inputs written by an INT8 node
        outside the unit are still read through that node's output Q/DQ (none where nothing is)."""
        if self.writers is None or name not in self.int8:
            return
        reference, twin = self.fp32[name], self.twins[name]
        inputs, quantized = [], False
        for float_value, tensor in zip(reference.input, twin.input, strict=True):
            writer = self.writers.of(float_value) if tensor and self._activation_qdq(tensor) else None
            if writer is not None and writer not in unit:
                inputs.append(self._quantized(float_value, tensor))
                quantized = True
            else:
                inputs.append(float_value)
        if quantized:
            copy = self._append(reference, inputs)
            self.after[unit, name] = [self._error(a, b) if a and b else None
                                      for a, b in zip(copy.output, reference.output, strict=True)]

    def _node(self, op_type: str, inputs: list[str], **attributes: Any) -> str:
        output = self._fresh(f"probe_{op_type.lower()}")
        self.graph.node.append(helper.make_node(op_type, inputs, [output], name=self._fresh(op_type), **attributes))
        return output

    def _output(self, tensor: str) -> int:
        """``tensor`` as a graph output; its index among the outputs."""
        self.graph.output.append(helper.make_tensor_value_info(tensor, TensorProto.FLOAT, None))
        self.outputs.append(tensor)
        return len(self.outputs) - 1

    def _float(self, tensor: str) -> str:
        return self._node("Cast", [tensor], to=TensorProto.FLOAT)

    def _sum_of_squares(self, tensor: str, like: str) -> int:
        """Per channel (axis 1) where ``like``'s rank is known and at least 2, else over the whole tensor (shaped
        [1] then): sums of ``tensor``'s squares over the batch and every other axis."""
        rank = self.ranks.get(like)
        if rank is None or rank < 2:
            total = self._node("ReduceSumSquare", [tensor], keepdims=0)
            return self._output(self._node("Reshape", [total, self.shape_one]))
        axes = [0, *range(2, rank)]
        if self.axes_as_input:
            name = self._fresh("probe_axes")
            self.graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(axes)], axes))
            return self._output(self._node("ReduceSumSquare", [tensor, name], keepdims=0))
        return self._output(self._node("ReduceSumSquare", [tensor], keepdims=0, axes=axes))

    def _error(self, twin: str, fp32: str) -> int:
        return self._sum_of_squares(self._node("Sub", [self._float(twin), self._float(fp32)]), fp32)

    def _energy(self, fp32: str) -> int:
        return self._sum_of_squares(self._float(fp32), fp32)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    """The rank of every tensor shape inference can tell (none where it fails: a model over 2 GB, say)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises several types, and the ranks are only a refinement
        return {}
    return {v.name: len(v.type.tensor_type.shape.dim) for v in (*inferred.graph.value_info, *inferred.graph.output,
                                                                 *inferred.graph.input)
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}


CHANNEL_ENERGY_FLOOR = 1e-3  # a channel's energy counts as at least this share of the mean channel's


def _relative(error: np.ndarray, energy: np.ndarray) -> float:
    """The mean over channels of each one's error relative to its energy: a later layer may scale any channel
    up or down (a folded BatchNorm, the next convolution's weights), so a channel that carries little energy
    here can matter as much as one that carries most of it (an outlier channel that takes a per-tensor scale
    wipes out all the others: by energy they are nothing, channel by channel they are everything)."""
    floor = CHANNEL_ENERGY_FLOOR * float(np.mean(energy)) if energy.size else 0.0
    if floor <= 0:
        return 0.0 if not np.any(error) else math.inf
    return float(np.mean(error / np.maximum(energy, floor)))


def removed_errors(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile,
                   units: Sequence[tuple[str, ...]], probe: Batch, batch: int | None,
                   on_chunk: Callable[[int], None] | None = None) -> list[float]:
    """For each unit, the INT8 error that keeping it in FP32 removes where it is computed, on ``probe``: for
    each of its nodes, the squared error of its INT8 twin (fed with FP32 values) against the FP32 node's
    outputs, less that of its FP32 twin where some input stays quantised after the fallback, relative to the
    outputs' energy. All units in one run of one model (``on_chunk`` is told the samples each step covered).
    Nodes the two graphs do not hold alike count for nothing."""
    nodes = list(dict.fromkeys(n for unit in units for n in unit))
    writers = Writers(fp32, quantized, set(nodes)) if profile.int8_outputs else None
    builder = _ProbeBuilder(fp32, quantized, writers)
    for name in nodes:
        builder.add(name)
    for unit in units:
        for name in unit:
            builder.add_after(unit, name)
    if not builder.outputs:
        return [0.0] * len(units)
    sums: list[np.ndarray] | None = None
    with open_model(builder.model, run_settings(profile.measured_as_written)) as backend:
        total = count(probe)
        size = batch or 1  # one sample a step: a large input's probe stays small in memory, and the bar moves
        for start in range(0, total - total % size, size):
            values = [np.asarray(v, np.float64) for v in backend.run(take(probe, start, start + size))]
            sums = values if sums is None else [a + b for a, b in zip(sums, values, strict=True)]
            if on_chunk is not None:
                on_chunk(size)
    if sums is None:
        return [0.0] * len(units)

    def relative(errors: list[int | None], node: str) -> float:
        return sum(_relative(sums[e], sums[n]) for e, n in zip(errors, builder.energy[node], strict=True)
                   if e is not None and n is not None)

    removed = []
    for unit in units:
        total_removed = 0.0
        for name in unit:
            if name in builder.int8:
                left = relative(builder.after[unit, name], name) if (unit, name) in builder.after else 0.0
                total_removed += max(0.0, relative(builder.int8[name], name) - left)
        removed.append(total_removed)
    return removed
