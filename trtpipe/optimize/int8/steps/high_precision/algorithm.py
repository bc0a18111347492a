"""INT8 with FP16 elsewhere (``--high-precision fp16``, tensorrt target): the float regions of a Q/DQ graph in FP16.

ONNX Runtime's quantizer writes FP32 scales, and a strongly typed TensorRT network takes every type from the graph:
a DequantizeLinear with an FP32 scale outputs FP32, so the INT8 convolution it feeds writes FP32 and every layer
that is not quantized (SiLU, HardSwish, an SE block's Sigmoid and Mul, Resize) runs in FP32. This module
converts those regions after quantization, as ModelOpt's ``high_precision_dtype="fp16"`` does (its ``int8.py``
runs ``convert_to_f16`` on the quantized graph: every node outside a block list goes to FP16, Q/DQ scales included,
at an opset where Q/DQ take FP16 scales):

- the compute nodes go through ONNX Runtime's float16 converter (the FP16 pass's), with every Q/DQ node held in
  FP32; the Casts it then puts between a DequantizeLinear and an FP16 reader, or between an FP16 writer and a
  QuantizeLinear, are folded into that Q/DQ node by giving it an FP16 scale. TensorRT then sees DQ -> Conv as
  before and the INT8 convolution writes FP16. QuantizeLinear and DequantizeLinear take FP16 scales from opset 19
  (T1 and T2 of QuantizeLinear-19 and DequantizeLinear-19), so the graph is raised to 19 first.
- each scale is rounded to FP16 once and every Q/DQ node reading it holds that value, the FP32 ones too (an FP32
  writer that feeds an FP16 reader through INT8 has a Q with an FP32 scale and a DQ with an FP16 one), so a pair
  still means one quantization grid. A scale below FP16's normal range (a weight channel or an activation whose
  largest magnitude is under about 0.008) is a subnormal with fewer significant bits, where rounding to the nearest
  can move it far: it is rounded up instead (never to 0, and no quantized value leaves INT8's range), and a
  weight's INT8 values are requantized to the scale it got.
- a Concat whose inputs are all dequantized stays FP32, so the Q/DQ nodes around it keep FP32 scales: ONNX Runtime's
  default session fuses DQ -> Concat -> Q into a QLinearConcat, which takes FP32 scales only (a file with FP16 ones
  there fails to load: "Type 'tensor(float16)' of input parameter ... of operator (QLinearConcat)"). Of the other
  patterns it fuses (Add, Mul, pools, Sigmoid, LeakyRelu, Relu, Transpose), none refused FP16 scales (ONNX Runtime
  1.32); optimize checks every written file in a default session all the same (``checks/loads.py``).
- nodes stay FP32 for the FP16 pass's reasons (overflow-prone operators; activations past half of FP16's range,
  measured on the calibration data on the Q/DQ graph itself) and for the caller's (``keep``): the INT8 pass keeps
  post-processing and a distribution's expectation FP32, as the placement rules keep them float, and the layers its
  accuracy budget kept FP32.

The result is judged as a GPU computes it: every FP16 tensor rounded to FP16 where it is written, an overflow an
infinity (the tensorrt profile's measurement runs with TRT_SIMULATION: runtime/onnxruntime/fp16_rounding.py). ONNX
Runtime's CPU provider alone runs a chain of FP16 operators in FP32, which would hide both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from trtpipe.errors import VerificationFailed
from trtpipe.graph_index import producers_of, readers_of
from trtpipe.inputs import Batch
from trtpipe.onnx_info import topologically_sorted
from trtpipe.optimize.graph.activations import RunningStats, float_activations, observe
from trtpipe.optimize.graph.fp16_limits import FP16_MAX, OVERFLOW_MARGIN, UNSAFE_FP16_OPS, remove_fp16_round_trips
from trtpipe.optimize.graph.opset import upgrade_opset
from trtpipe.optimize.int8.qdq.quantize import prune_unread
from trtpipe.runtime.registry import quantization_tools

# QuantizeLinear-19 and DequantizeLinear-19 are the first to accept float16 scales (and inputs/outputs).
FP16_SCALE_OPSET = 19
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
FP16_SMALLEST_NORMAL = float(np.finfo(np.float16).tiny)  # 6.1e-5: below it an FP16 keeps fewer than 11 bits
FP16_SUFFIX = "_fp16"
# Ops whose DQ -> op -> Q ONNX Runtime's default session fuses into a kernel that takes FP32 scales only: kept FP32
# with every input dequantized, so the Q/DQ around them keep FP32 scales and the file loads there.
FP32_SCALE_FUSIONS = {"Concat": "ONNX Runtime fuses its Q/DQ into a QLinearConcat, which takes FP32 scales only"}


@dataclass
class HighPrecisionReport:
    """What the conversion did, for the manifest's ``int8.high_precision``."""

    kept_fp32: list[dict[str, str]] = field(default_factory=list)  # node, op, reason
    fp16_nodes: int = 0  # compute nodes (Q/DQ and Casts aside) that run in FP16
    fp16_scales: int = 0  # Q/DQ scales written in FP16
    subnormal_scales: int = 0  # scale values below FP16's normal range: rounded up (weights requantized to them)
    requantized_weights: int = 0  # weight tensors whose INT8 values were requantized to a rounded-up scale
    opset_upgrade: str | None = None
    max_activation: float = 0.0
    calibration: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"fp16_nodes": self.fp16_nodes, "fp16_scales": self.fp16_scales,
                "subnormal_scales": self.subnormal_scales, "requantized_weights": self.requantized_weights,
                "opset_upgrade": self.opset_upgrade, "calibration": self.calibration,
                "max_activation": self.max_activation, "kept_fp32": self.kept_fp32}


def overflow_reason(node: onnx.NodeProto, stats: Mapping[str, RunningStats]) -> str | None:
    """Why ``node`` must stay FP32 by the FP16 pass's analysis (fp16.py), or None: an overflow-prone operator,
    activations it writes past half of FP16's range, or activations it reads that far (a Cast to FP16 in front of
    it would turn them into infinity)."""
    largest_out = max((stats[o].abs_max for o in node.output if o in stats), default=0.0)
    largest_in = max((stats[i].abs_max for i in node.input if i in stats), default=0.0)
    if node.op_type in UNSAFE_FP16_OPS:
        return f"operator {node.op_type}: {UNSAFE_FP16_OPS[node.op_type]}"
    if largest_out > FP16_MAX * OVERFLOW_MARGIN:
        return f"activations reach {largest_out:.4g} on calibration data (FP16 max {FP16_MAX:g})"
    if largest_in > FP16_MAX * OVERFLOW_MARGIN:
        return f"reads activations of {largest_in:.4g} on calibration data (FP16 max {FP16_MAX:g})"
    return None


def fp16_elsewhere(model: onnx.ModelProto, calibration: list[Batch], *, keep: Mapping[str, str] | None = None,
                   keep_io_fp32: bool = True, source: str = "") -> tuple[onnx.ModelProto, HighPrecisionReport]:
    """``model`` (a Q/DQ graph as :func:`quantize.quantize` writes it) with its float regions in FP16, and what
    stayed FP32 and why. ``keep`` maps node names to the reason they stay FP32 whatever the measurement says; the
    ``calibration`` batches decide which other nodes would overflow FP16. Raises VerificationFailed when the result
    does not type-check (every node's inputs of one float type, as ONNX's type inference checks them)."""
    tools = quantization_tools()
    report = HighPrecisionReport(calibration=source)
    if any(not node.name for node in model.graph.node):  # the converter blocks by node name
        raise ValueError("every node needs a name before the FP16 conversion of a Q/DQ graph")
    activations = float_activations(model)
    stats = observe(model, activations, calibration)
    report.max_activation = max((s.abs_max for s in stats.values()), default=0.0)
    blocked_ops = set(tools.float16_block_list()) | set(UNSAFE_FP16_OPS)
    blocked = _kept_fp32(model, keep or {}, stats, blocked_ops)
    blocked |= _constants_for(model, blocked, activations)
    report.kept_fp32 = [{"node": node.name, "op": node.op_type, "reason": blocked[node.name]}
                        for node in model.graph.node if node.name in blocked]

    upgraded, report.opset_upgrade = upgrade_opset(model, FP16_SCALE_OPSET,
                                                   reason=f"FP16 Q/DQ scales need opset {FP16_SCALE_OPSET}")
    working = onnx.ModelProto()
    working.CopyFrom(upgraded)  # the converter edits its argument
    qdq = [node.name for node in working.graph.node if node.op_type in QDQ_OPS]
    converted = tools.to_float16(working, keep_io_types=keep_io_fp32, op_block_list=sorted(blocked_ops),
                                 node_block_list=[*blocked, *qdq])
    remove_fp16_round_trips(converted)
    _fold_casts_into_qdq(converted, report)
    prune_unread(converted.graph)
    remove_fp16_round_trips(converted)  # folding can leave an FP32 -> FP16 -> FP32 pair between two kept nodes
    _fp32_outputs_direct(converted)
    prune_unread(converted.graph)
    topologically_sorted(converted)  # the converter and the folding append nodes at the end
    try:
        onnx.shape_inference.infer_shapes(converted, check_type=True, strict_mode=True)
    except Exception as error:  # onnx raises InferenceError/ValidationError with the node named
        raise VerificationFailed(f"The FP16 conversion of the Q/DQ graph does not type-check: {error}") from None
    types = _types(converted)
    report.fp16_nodes = sum(node.op_type not in (*QDQ_OPS, "Cast", "Constant")
                            and any(types.get(o) == TensorProto.FLOAT16 for o in node.output)
                            for node in converted.graph.node)
    return converted, report


def _kept_fp32(model: onnx.ModelProto, keep: Mapping[str, str], stats: Mapping[str, RunningStats],
               blocked_ops: set[str]) -> dict[str, str]:
    """The float nodes that stay FP32, each with its reason: as ``keep`` asks, else where calibration shows FP16
    would overflow (:func:`overflow_reason`), else where the converter blocks the operator."""
    blocked: dict[str, str] = {}
    dequantized = {o for node in model.graph.node if node.op_type == "DequantizeLinear" for o in node.output}
    constants = {t.name for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type in QDQ_OPS:
            continue
        reason = keep.get(node.name) or overflow_reason(node, stats)
        if reason is None and node.op_type in FP32_SCALE_FUSIONS \
                and all(i in dequantized for i in node.input if i and i not in constants):
            reason = FP32_SCALE_FUSIONS[node.op_type]
        if reason is None and node.op_type in blocked_ops:
            reason = f"operator {node.op_type}: ONNX Runtime's float16 converter keeps it FP32"
        if reason is not None:
            blocked[node.name] = reason
    return blocked


def _constants_for(model: onnx.ModelProto, blocked: Mapping[str, str], activations: list[str]) -> dict[str, str]:
    """Nodes that write float data from no float input (Constant, ConstantOfShape) and that only FP32 nodes read
    (``blocked`` ones, or Q/DQ, which the conversion holds in FP32 too); ``activations`` are the float tensors
    nodes write. ONNX Runtime's converter turns every
    unblocked node's tensor attributes to FP16, so such a constant would reach its FP32 readers rounded, or clamped
    to 65504, through a Cast."""
    readers = readers_of(model.graph)
    float_inputs = set(activations) | {t.name for t in model.graph.initializer
                                                   if t.data_type == TensorProto.FLOAT}
    found = {}
    for node in model.graph.node:
        if node.name in blocked or node.op_type in QDQ_OPS or any(i in float_inputs for i in node.input):
            continue
        users = [r for output in node.output for r in readers.get(output, [])]
        if users and all(r.name in blocked or r.op_type in QDQ_OPS for r in users):
            found[node.name] = "a constant only FP32 nodes read"
    return found


def _fp32_outputs_direct(model: onnx.ModelProto) -> int:
    """Hand a graph output that an FP32 node computes straight out, without the FP32 -> FP16 -> FP32 round trip the
    converter puts between a node it kept FP32 and an output it keeps FP32 (which remove_fp16_round_trips leaves,
    since its last Cast writes the graph output): the round trip would round the output to FP16 for nothing. The
    node writes the output itself where nothing else reads its value; otherwise the last Cast reads the FP32 value.
    Returns how many outputs it freed."""
    graph = model.graph
    producer = producers_of(graph)
    readers = {name: len(nodes) for name, nodes in readers_of(graph).items()}
    outputs, inputs, types = {o.name for o in graph.output}, {i.name for i in graph.input}, _types(model)
    dead: list[onnx.NodeProto] = []
    for output in graph.output:
        up = producer.get(output.name)
        if up is None or _cast_to(up) != TensorProto.FLOAT:
            continue
        down = producer.get(up.input[0])
        if down is None or _cast_to(down) != TensorProto.FLOAT16 or readers.get(down.output[0]) != 1:
            continue
        source = down.input[0]
        writer = producer.get(source)
        if source in inputs or writer is None or types.get(source) != TensorProto.FLOAT:
            continue
        if readers.get(source) == 1 and source not in outputs:  # the Cast to FP16 is its only reader
            writer.output[list(writer.output).index(source)] = output.name
            dead += [up, down]
        else:
            up.input[0] = source
    gone = {id(node) for node in dead}
    kept = [node for node in graph.node if id(node) not in gone]
    del graph.node[:]
    graph.node.extend(kept)
    return len(dead) // 2


def _cast_to(node: onnx.NodeProto | None) -> int | None:
    if node is None or node.op_type != "Cast":
        return None
    return next((a.i for a in node.attribute if a.name == "to"), None)


def half_scale(scale: np.ndarray) -> tuple[np.ndarray, int]:
    """``scale`` in FP16, and how many of its values lie below FP16's normal range. Those are rounded up rather than
    to the nearest FP16 (never 0, and a value quantized with it still fits INT8); the others to the nearest."""
    scale = np.asarray(scale, dtype=np.float32)
    half = scale.astype(np.float16)
    small = scale < FP16_SMALLEST_NORMAL
    up = np.where(half.astype(np.float32) < scale, np.nextafter(half, np.float16(np.inf)), half).astype(np.float16)
    return np.where(small, up, half).astype(np.float16), int(np.count_nonzero(small))


class _Scales:
    """One FP16 twin per scale initializer; the FP32 original takes the twin's value, so every Q/DQ node reading
    either holds the same number."""

    def __init__(self, graph: onnx.GraphProto, report: HighPrecisionReport) -> None:
        self.graph, self.report = graph, report
        self.initializers = {t.name: t for t in graph.initializer}
        self.twins: dict[str, str] = {}

    def twin(self, dq_or_q: onnx.NodeProto) -> str | None:
        """The FP16 scale for ``dq_or_q`` (created on first use), or None when the scale is not an FP32 constant or
        does not fit FP16."""
        name = dq_or_q.input[1]
        if name in self.twins:
            return self.twins[name]
        tensor = self.initializers.get(name)
        if tensor is None or tensor.data_type != TensorProto.FLOAT:
            return None
        scale = numpy_helper.to_array(tensor)
        half, subnormal = half_scale(scale)
        if not np.all(np.isfinite(half)) or np.any(half <= 0):
            return None
        weight = self.initializers.get(dq_or_q.input[0]) if dq_or_q.op_type == "DequantizeLinear" else None
        if weight is not None and subnormal:
            self._requantize(dq_or_q, weight, scale, half)
        tensor.CopyFrom(numpy_helper.from_array(half.astype(np.float32), name))
        twin = numpy_helper.from_array(half, self._fresh(name + FP16_SUFFIX))
        self.graph.initializer.append(twin)
        self.initializers[twin.name] = twin
        self.twins[name] = twin.name
        self.report.fp16_scales += 1
        self.report.subnormal_scales += subnormal
        return twin.name

    def _requantize(self, dq: onnx.NodeProto, weight: onnx.TensorProto, scale: np.ndarray, half: np.ndarray) -> None:
        """Requantize ``weight`` to ``half``: q * scale / half keeps each weight's value to within the new step. A
        subnormal channel's half is at least its scale, so its values stay within INT8; a normal channel's ratio is
        within 2^-11 of 1, which leaves every q of INT8's range where it was."""
        integers = numpy_helper.to_array(weight)
        values = integers.astype(np.float64)
        ratio = scale.astype(np.float64) / half.astype(np.float64)
        if ratio.ndim == 1 and ratio.size > 1:  # per channel: along the DQ's axis
            axis = next((a.i for a in dq.attribute if a.name == "axis"), 1) % values.ndim
            shape = [1] * values.ndim
            shape[axis] = ratio.size
            ratio = ratio.reshape(shape)
        info = np.iinfo(integers.dtype)
        requantized = np.clip(np.round(values * ratio), info.min, info.max).astype(integers.dtype)
        weight.CopyFrom(numpy_helper.from_array(requantized, weight.name))
        self.report.requantized_weights += 1

    def _fresh(self, name: str) -> str:
        taken = set(self.initializers) | {o for n in self.graph.node for o in n.output}
        candidate, index = name, 1
        while candidate in taken:
            candidate, index = f"{name}_{index}", index + 1
        return candidate


def _fold_casts_into_qdq(model: onnx.ModelProto, report: HighPrecisionReport) -> None:
    """Give a Q/DQ node an FP16 scale where the converter put a Cast between it and FP16 arithmetic: a DQ whose
    readers cast its output to FP16 writes FP16 itself; a Q that reads an FP16 tensor through a Cast to FP32 reads it
    directly. A DQ that FP32 nodes read as well keeps an FP32 copy for them."""
    scales = _Scales(model.graph, report)
    _dequantize_in_fp16(model.graph, scales)
    _quantize_from_fp16(model, scales)


def _dequantize_in_fp16(graph: onnx.GraphProto, scales: _Scales) -> None:
    """The DQ half of :func:`_fold_casts_into_qdq`: a DQ whose readers cast its output to FP16 writes FP16 itself
    (those Casts go, and a Cast back to FP32 after them reads the DQ's own FP32 output instead); where FP32 nodes
    still read the DQ, an FP16 twin after it writes the FP16 value."""
    outputs = {o.name for o in graph.output}
    readers = readers_of(graph)

    def rewire(old: str, new: str) -> None:
        for reader in readers.pop(old, []):
            reader.input[:] = [new if name == old else name for name in reader.input]
            readers.setdefault(new, []).append(reader)

    # Keyed by id() with the node held in the value: a protobuf wrapper nothing references is freed and its id
    # reused by the next one, so the mapping itself keeps every node it names alive.
    dead: dict[int, onnx.NodeProto] = {}
    added: dict[int, tuple[onnx.NodeProto, onnx.NodeProto]] = {}  # id of a DQ -> (it, its FP16 twin after it)
    for dq in [n for n in graph.node if n.op_type == "DequantizeLinear"]:
        out = dq.output[0]
        down = [r for r in readers.get(out, []) if _cast_to(r) == TensorProto.FLOAT16 and r.output[0] not in outputs]
        scale = scales.twin(dq) if down else None
        if scale is None:
            continue
        half_out = down[0].output[0]
        for cast in down[1:]:
            rewire(cast.output[0], half_out)
        for back in [r for r in readers.get(half_out, []) if _cast_to(r) == TensorProto.FLOAT]:
            if back.output[0] not in outputs:  # an FP32 reader reads the FP32 DQ, not FP32 -> FP16 -> FP32
                rewire(back.output[0], out)
                dead[id(back)] = back
        readers[half_out] = [r for r in readers.get(half_out, []) if id(r) not in dead]
        dead.update((id(cast), cast) for cast in down)
        readers[out] = [r for r in readers.get(out, []) if id(r) not in dead]
        if not readers[out] and out not in outputs:  # no FP32 reader left: this DQ becomes the FP16 one
            dq.input[1] = scale
            dq.output[0] = half_out
        else:
            twin = helper.make_node("DequantizeLinear", [dq.input[0], scale, *dq.input[2:]], [half_out],
                                    name=dq.name + FP16_SUFFIX)
            twin.attribute.extend(dq.attribute)
            added[id(dq)] = (dq, twin)
    _replace_nodes(graph, dead, added)


def _replace_nodes(graph: onnx.GraphProto, dead: Mapping[int, onnx.NodeProto],
                   added: Mapping[int, tuple[onnx.NodeProto, onnx.NodeProto]]) -> None:
    """The graph's nodes in their order without the ``dead`` ones, each node ``added`` names followed by its new
    node (both keyed by the id() of a node in the graph)."""
    kept = []
    for node in graph.node:
        if id(node) not in dead:
            kept.append(node)
            if id(node) in added:
                kept.append(added[id(node)][1])
    del graph.node[:]
    graph.node.extend(kept)


def _quantize_from_fp16(model: onnx.ModelProto, scales: _Scales) -> None:
    """The Q half of :func:`_fold_casts_into_qdq`: a Q that reads an FP16 tensor through a Cast to FP32 reads the
    FP16 tensor directly, with an FP16 scale."""
    graph = model.graph
    types = _types(model)
    producer = producers_of(graph)
    for q in [n for n in graph.node if n.op_type == "QuantizeLinear"]:
        widening = producer.get(q.input[0])
        if widening is None or _cast_to(widening) != TensorProto.FLOAT \
                or types.get(widening.input[0]) != TensorProto.FLOAT16:
            continue
        scale = scales.twin(q)
        if scale is not None:
            q.input[0], q.input[1] = widening.input[0], scale


def _types(model: onnx.ModelProto) -> dict[str, int]:
    """Element type of every tensor shape inference can type, initializers and graph IO included."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return types

