"""Write Q/DQ nodes with the reference runtime's QDQ quantiser (ONNX Runtime's, asked through the registry:
runtime/onnxruntime/quantization.py), from ranges computed (or cached) beforehand.

Ranges are computed once; the quantiser then runs as often as the accuracy budget needs (with some nodes
excluded), which is why this gives ONNX Runtime's QDQQuantizer explicit ranges rather than calling
quantize_static, which would recalibrate on every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from trtpipe.graph_index import producers_of, read_names, readers_of
from trtpipe.optimize.int8.calibration.calibrate import Ranges
from trtpipe.optimize.int8.calibration.saturation import saturated_ranges
from trtpipe.optimize.int8.qdq.concat_in_place import concatenate_in_place
from trtpipe.optimize.int8.qdq.integer_gains import integer_bounds, integer_gains
from trtpipe.optimize.int8.qdq.integer_hardswish import integer_hardswish
from trtpipe.optimize.int8.qdq.placement import float_nodes, share_concat_scales
from trtpipe.optimize.int8.qdq.profiles import CPU_TARGETS, WEIGHTED_OPS, QuantProfile
from trtpipe.optimize.int8.qdq.zero_points import zero_point_free_joins
from trtpipe.runtime.registry import quantization_tools


def quantize(
    model: onnx.ModelProto,
    ranges: Ranges,
    profile: QuantProfile,
    *,
    exclude: Sequence[str] = (),
    only: Sequence[str] = (),
) -> onnx.ModelProto:
    """Return ``model`` with Q/DQ nodes for ``profile``; ``exclude`` stays FP32, ``only`` limits what is quantised.
    The placement rules (:mod:`placement`) keep their nodes in float and tie Concat inputs to one range."""
    placed = float_nodes(model, profile)
    exclude = [*exclude, *placed]
    op_types = quantized_op_types(profile)
    ranges = saturated_ranges(model, ranges)
    if profile.shared_concat_scales:
        kept = set(exclude)
        share_concat_scales(model, ranges, [n.name for n in model.graph.node if n.op_type in op_types
                                            and n.name not in kept and (not only or n.name in only)])
    quantized = _qdq_quantizer(model, ranges, profile, op_types, only=only, exclude=exclude)
    _rewrite_for_profile(quantized, model, ranges, profile, op_types, only=only, exclude=exclude)
    return quantized


def _qdq_quantizer(model: onnx.ModelProto, ranges: Ranges, profile: QuantProfile, op_types: list[str], *,
                   only: Sequence[str], exclude: Sequence[str]) -> onnx.ModelProto:
    """What the reference runtime's QDQ quantizer writes for ``model`` with the given ranges (so it does not
    recalibrate): per-channel weights, the profile's types and options, and full-range weights in depthwise
    convolutions where a CPU profile reduces the range of the others."""
    extra = dict(profile.extra_options)
    return quantization_tools().qdq_quantize(
        model, ranges, reduce_range=profile.reduce_range, signed_activations=profile.signed_activations,
        only=only, exclude=exclude, op_types=op_types,
        extra_options=full_range_depthwise(model, extra) if profile.reduce_range and profile.target in CPU_TARGETS
        else extra)


def _rewrite_for_profile(quantized: onnx.ModelProto, model: onnx.ModelProto, ranges: Ranges, profile: QuantProfile,
                         op_types: list[str], *, only: Sequence[str], exclude: Sequence[str]) -> None:
    """The quantiser's output rewritten in place as the profile asks: Q/DQ only on residual branches, graph
    outputs and tensors only float nodes read left float, then the profile's integer rewrites (zero-point-free
    joins, Concat in place, integer HardSwish, integer channel gains and bounds), each pruning what it leaves
    unread."""
    if profile.residual_branch_only:
        keep_residual_branch_only(quantized)
    float_graph_outputs(quantized)
    kept, chosen = set(exclude), set(only)
    float_reads(quantized, model, {n.name for n in model.graph.node if n.op_type not in op_types or n.name in kept
                                   or (chosen and n.name not in chosen)})
    if profile.zero_point_free_joins:
        zero_point_free_joins(quantized)
    if profile.concat_in_place and concatenate_in_place(quantized):
        prune_unread(quantized.graph)
    if profile.integer_hardswish and integer_hardswish(quantized, ranges):
        prune_unread(quantized.graph)
    if profile.integer_gains and integer_gains(quantized) + integer_bounds(quantized):
        prune_unread(quantized.graph)


def float_reads(model: onnx.ModelProto, fp32: onnx.ModelProto, float_nodes: set[str]) -> int:
    """Remove each Q/DQ pair whose every reader is one of ``float_nodes`` (not quantized): the readers get the
    float value it rounded. ONNX Runtime's U8S8 quantizer writes a convolution's output through Q/DQ for its
    QLinearConv, which is free where the next op quantizes that tensor anyway (a folded Relu or ReLU6, a residual
    Add, another convolution) and costly where a float op reads it: before an exported HardSwish the output is the
    pre-activation, whose range is hundreds of times the activation's (measured: docs/results/int8-design.md,
    'Graph outputs and float reads'). ONNX Runtime then runs such a convolution in float. A pair that holds an
    activation the quantizer folded into it (a Relu or ReLU6 after a convolution is removed, its clamp left to
    the quantization) stays: without it the reader would get the unclamped value.
    Returns how many pairs it removed."""
    graph = model.graph
    fp32_producer = {name: node.op_type for name, node in producers_of(fp32.graph).items()}
    producer = producers_of(graph)
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    weights = {t.name for t in graph.initializer}
    freed = 0
    for dq in [n for n in graph.node if n.op_type == "DequantizeLinear"]:
        q = producer.get(dq.input[0])
        users = readers.get(dq.output[0], [])
        if q is None or q.op_type != "QuantizeLinear" or not users or dq.output[0] in outputs \
                or any(user.name not in float_nodes for user in users) or q.input[0] in weights:
            continue
        source = producer.get(q.input[0])
        if source is None or fp32_producer.get(q.input[0]) != source.op_type:
            continue  # a graph input, or an activation folded into this Q/DQ
        for user in users:
            user.input[:] = [q.input[0] if name == dq.output[0] else name for name in user.input]
        freed += 1
    prune_unread(graph)
    return freed


def quantized_op_types(profile: QuantProfile) -> list[str]:
    """The operator types Q/DQ is written for: the profile's, or all that the reference runtime's quantizer can."""
    return list(profile.op_types or quantization_tools().quantizable_op_types())


def quantizable_nodes(model: onnx.ModelProto, profile: QuantProfile) -> list[str]:
    """Nodes the quantiser touches: the candidates for keeping in FP32. Residual Adds and pools count as much
    as convolutions: a per-tensor scale on an Add output can destroy accuracy on its own."""
    op_types = set(quantized_op_types(profile))
    return [node.name for node in model.graph.node if node.op_type in op_types]


def float_graph_outputs(model: onnx.ModelProto) -> int:
    """Remove the Q/DQ pair ONNX Runtime's quantizer puts on a graph output (the logits, after the classifier's
    QGemm), so the model hands back the float value its last op computed.

    Quantizing the output rounds every logit to one of 256 levels for no kernel's sake: ONNX Runtime's QGemm and
    QLinearConv write float when no Q follows (measured: docs/results/int8-design.md, 'Graph outputs and float reads'),
    and OpenVINO otherwise runs the final dequantization as two extra ops. Returns how many outputs it freed.
    """
    graph = model.graph
    producer = producers_of(graph)
    readers = {name: len(nodes) for name, nodes in readers_of(graph).items()}
    outputs = {o.name for o in graph.output}
    freed = 0
    for output in graph.output:
        dq = producer.get(output.name)
        if dq is None or dq.op_type != "DequantizeLinear":
            continue
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear" or readers.get(dq.output[0]) or readers[q.output[0]] != 1:
            continue
        value = q.input[0]
        source = producer.get(value)
        if source is None or value in outputs:
            continue  # a graph input, or a value handed out under its own name too
        graph.node.remove(dq)
        source.output[list(source.output).index(value)] = output.name
        for node in graph.node:  # the Q, now unread, goes with prune_unread
            node.input[:] = [output.name if name == value else name for name in node.input]
        freed += 1
    prune_unread(graph)
    return freed


def prune_unread(graph: onnx.GraphProto) -> None:
    """Remove nodes whose outputs nobody reads (Q/DQ pairs that surgery left without a reader), then unread
    initializers."""
    while True:
        read = read_names(graph)
        dead = [node for node in graph.node if not any(o in read for o in node.output if o)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    read = read_names(graph)
    for tensor in [t for t in graph.initializer if t.name not in read]:
        graph.initializer.remove(tensor)


def keep_residual_branch_only(model: onnx.ModelProto) -> int:
    """On each Add whose inputs are both quantized, remove the Q/DQ from the input a weighted op produced.

    TensorRT fuses such an Add into the convolution that produced that input (its epilogue adds the dequantized
    residual), which it can only do when the convolution's own output is not quantized. ONNX Runtime's quantizer
    puts Q/DQ on both inputs of an Add; this rewires the weighted op's output straight into the Add. When both
    inputs come from weighted ops (a projection shortcut), the later one in the graph (the main branch) is fused
    and the shortcut keeps its Q/DQ as the residual input. Returns how many inputs it rewired.
    """
    graph = model.graph
    producer = producers_of(graph)
    position = {id(node): index for index, node in enumerate(graph.node)}
    consumers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    rewired, dead = 0, set()
    for add in [n for n in graph.node if n.op_type == "Add"]:
        sources = []
        for index, name in enumerate(add.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                break
            q = producer.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                break
            sources.append((index, dq, q, producer.get(q.input[0])))
        if len(sources) != 2:
            continue
        weighted = [s for s in sources if s[3] is not None and s[3].op_type in WEIGHTED_OPS]
        if not weighted:  # no convolution to fuse the Add into
            continue
        index, dq, q, _ = max(weighted, key=lambda s: position[id(s[3])])
        add.input[index] = q.input[0]
        rewired += 1
        if len(consumers.get(dq.output[0], [])) == 1 and dq.output[0] not in outputs:
            dead.add(id(dq))
            if len(consumers.get(q.output[0], [])) == 1:
                dead.add(id(q))
    kept = [n for n in graph.node if id(n) not in dead]
    del graph.node[:]
    graph.node.extend(kept)
    return rewired


def full_range_depthwise(model: onnx.ModelProto, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with full 8-bit weights for every depthwise convolution where the profile asks for 7 bits.

    7-bit weights (reduce_range) exist because x86's int8 dot product without VNNI adds pairs of uint8 x int8
    products in int16 and saturates (saturation_emulation.py). Depthwise convolutions never take that path: ONNX
    Runtime's and oneDNN's depthwise kernels widen both operands to 16 bits, subtract the zero point and accumulate
    each product in 32 bits, so halving their weights' resolution there buys nothing and costs accuracy (a depthwise
    output sums nine products, too few for rounding errors to average out). Both CPU flavours (cpu for ONNX Runtime,
    openvino for OpenVINO): measured under oneDNN's AVX2 kernels (docs/results/accuracy-by-cpu-class.md)."""
    constants = {t.name: t for t in model.graph.initializer}
    overrides = dict(options.get("TensorQuantOverrides") or {})
    for node in model.graph.node:
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in constants:
            continue
        group = next((a.i for a in node.attribute if a.name == "group"), 1)
        weight = constants[node.input[1]]
        if group > 1 and len(weight.dims) == 4 and weight.dims[1] == 1 and weight.dims[0] % group == 0 \
                and node.input[1] not in overrides:
            overrides[node.input[1]] = [{"axis": 0, "reduce_range": False}]
    return {**options, "TensorQuantOverrides": overrides} if overrides else options
