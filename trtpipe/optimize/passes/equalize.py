"""Pass ``equalize``: cross-layer equalization (CLE) of consecutive convolutions, before INT8.

For two weighted layers joined by a positively homogeneous activation (none, Relu, LeakyRelu, PRelu, or a ReLU6
Clip), scaling output channel i of the first by 1/s_i and input channel i of the second by s_i computes the same
function. The paper's CLE (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias
Correction", ICCV 2019; AIMET, AMD Quark) picks s_i = sqrt(r1_i / r2_i) so both layers' per-channel weight
ranges end equal: the cure for depthwise-separable nets under per-tensor weight scales.

trtpipe's weights are per-channel on both targets, which are blind to a channel's scale; what is left unbalanced
is the per-tensor activation between the two layers, whose channels can span ranges far apart. The paper's
weight-range CLE moves the imbalance into that activation and lost accuracy where tried (measured:
docs/results/int8-design.md, 'Cross-layer equalization'). So this pass equalizes with the activation ranges
measured on the probe data (calibration data when given): into a depthwise layer each channel is scaled to the widest
channel's range (free for both layers' per-channel weights); into a full convolution activation and weight
ranges are balanced, s_i = sqrt(a_i / r2_i) (SmoothQuant's alpha 0.5).

A ReLU6 is a Clip at 6, which is not homogeneous: after scaling, channel i clips at 6 / s_i. AIMET and Quark
replace it with a Relu (and change the network); here it becomes Relu followed by a Min against those
per-channel bounds, so the FP32 function is unchanged (checked on the probe data, like fusion) and TensorRT fuses
both into the convolution's epilogue. ONNX Runtime has no integer Min, so for the cpu target no bound is put
below the widest channel's scaled range: the Min is then the per-tensor Q's own clamp, and the quantized file drops
it (``int8/qdq/integer_gains.py``). Run it after ``fuse`` (BatchNorm must already be folded into the
convolutions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe import console
from trtpipe.errors import VerificationFailed
from trtpipe.graph_index import readers_of
from trtpipe.inputs import Batch
from trtpipe.onnx_info import attribute, clip_bounds
from trtpipe.optimize.graph.activations import channel_ranges
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import EqualizeRecord
from trtpipe.vocab import Target

ROUNDS = 8
MIN_COSINE = 0.99999  # an exact rescaling: anything below this is a bug, not rounding
HOMOGENEOUS = ("Relu", "LeakyRelu", "PRelu")


@dataclass
class Pair:
    """Two convolutions joined through at most one activation, each with its weight initializer's name."""

    first: onnx.NodeProto
    second: onnx.NodeProto
    activation: onnx.NodeProto | None
    clip_bound: float | None = None  # a ReLU6-style Clip(0, bound) between them
    scale: np.ndarray | None = field(default=None, repr=False)  # accumulated s over the rounds


def find_pairs(model: onnx.ModelProto) -> list[Pair]:
    """Every Conv -> [activation] -> Conv where each tensor in between has exactly one reader, the first
    convolution is ungrouped or depthwise, and the second reads the first's channels one to one (ungrouped or
    depthwise)."""
    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}

    def only_reader(tensor: str) -> onnx.NodeProto | None:
        nodes = readers.get(tensor, [])
        return nodes[0] if len(nodes) == 1 and tensor not in outputs else None

    def equalizable(conv: onnx.NodeProto) -> bool:
        if conv.op_type != "Conv" or len(conv.input) < 2 or conv.input[1] not in constants:
            return False
        if any(len(readers.get(name, [])) != 1 for name in conv.input[1:3] if name):
            return False  # a weight or bias another node shares cannot be rescaled for this pair alone
        weight = constants[conv.input[1]]
        group = int(attribute(conv, "group", 1))
        return group == 1 or (weight.shape[1] == 1 and group == weight.shape[0])  # ungrouped or depthwise

    pairs = []
    for first in graph.node:
        if not equalizable(first):
            continue
        after = only_reader(first.output[0])
        activation, bound = None, None
        if after is not None and after.op_type in HOMOGENEOUS:
            activation, after = after, only_reader(after.output[0])
        elif after is not None and after.op_type == "Clip":
            clip = clip_bounds(after, constants)
            if clip is None or clip[0] != 0.0 or not np.isfinite(clip[1]):
                continue
            activation, bound, after = after, clip[1], only_reader(after.output[0])
        if after is None or not equalizable(after) or after.input[0] != (activation or first).output[0]:
            continue
        channels = constants[first.input[1]].shape[0]
        second_weight = constants[after.input[1]]
        depthwise = int(attribute(after, "group", 1)) > 1
        if (second_weight.shape[0] if depthwise else second_weight.shape[1]) != channels:
            continue
        pairs.append(Pair(first, after, activation, bound, np.ones(channels)))
    return pairs


def _positive_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator where both are positive, else 1 (a dead channel keeps its scale)."""
    valid = (numerator > 0) & (denominator > 0)
    return np.where(valid, numerator / np.where(valid, denominator, 1.0), 1.0)


def equalize(model: onnx.ModelProto, rounds: int = ROUNDS, activation_ranges: dict[str, np.ndarray] | None = None,
             *, bounds_above_top: bool = False) -> tuple[onnx.ModelProto, list[Pair]]:
    """A copy of ``model`` with every pair equalized, and the pairs (with their accumulated scales).

    Without ``activation_ranges``: the paper's CLE, weight ranges made equal (for per-tensor weight scales).
    With them ({tensor a pair's second layer reads: per-channel max |value|}, measured in FP32): equalization for
    per-channel weight scales, which are blind to a channel's scale, so what is left to balance is the
    per-tensor activation between the layers. Into a depthwise layer every channel is scaled to the widest
    channel's range (s_i = a_i / max a: free for both layers' weights); into a full convolution the activation
    and that layer's input-channel weight ranges are balanced (s_i = sqrt(a_i / r2_i), SmoothQuant's alpha 0.5).

    ``bounds_above_top`` (cpu; ``activation_ranges`` capped at each ReLU6's bound): no s_i above b / T, where T is
    the widest channel's range after scaling, so every bound b / s_i lies at or above T. A channel the ReLU6 clips
    then ends at T, the others below their bounds, and the per-channel Min is the per-tensor Q's own clamp.
    """
    result = onnx.ModelProto()
    result.CopyFrom(model)
    pairs = find_pairs(result)
    # Only the pairs' weights and biases, in float64: every other initializer (a Slice's int64 ends of INT64_MAX
    # among them) is left as it is, since INT64_MAX has no float64 and came back as INT64_MIN.
    scaled = {name for pair in pairs for name in (pair.first.input[1], pair.second.input[1], *pair.first.input[2:3])}
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in result.graph.initializer
               if t.name in scaled}
    for _ in range(1 if activation_ranges is not None else rounds):
        for pair in pairs:
            w1, w2 = weights[pair.first.input[1]], weights[pair.second.input[1]]
            depthwise = int(attribute(pair.second, "group", 1)) > 1
            r1 = np.abs(w1).reshape(w1.shape[0], -1).max(axis=1)
            r2 = np.abs(w2).reshape(w2.shape[0], -1).max(axis=1) if depthwise else \
                np.abs(np.moveaxis(w2, 1, 0)).reshape(w2.shape[1], -1).max(axis=1)
            if activation_ranges is None:
                s = np.sqrt(_positive_ratio(r1, r2))
            else:
                a = activation_ranges[pair.first.output[0]].astype(np.float64)
                if depthwise:
                    s = _positive_ratio(a, np.full_like(a, a.max()))
                else:
                    s = np.sqrt(_positive_ratio(a, r2))
                    s = s / s.max()
                if bounds_above_top and pair.clip_bound is not None:
                    s = np.minimum(s, pair.clip_bound / np.max(a / s))
            weights[pair.first.input[1]] = w1 / s.reshape(-1, *([1] * (w1.ndim - 1)))
            if len(pair.first.input) > 2 and pair.first.input[2] in weights:
                weights[pair.first.input[2]] = weights[pair.first.input[2]] / s
            shape = (-1, *([1] * (w2.ndim - 1))) if depthwise else (1, -1, *([1] * (w2.ndim - 2)))
            weights[pair.second.input[1]] = w2 * s.reshape(shape)
            assert pair.scale is not None
            pair.scale = pair.scale * s
    for index, tensor in enumerate(result.graph.initializer):
        if tensor.name in weights:
            dtype = numpy_helper.to_array(tensor).dtype
            result.graph.initializer[index].CopyFrom(
                numpy_helper.from_array(weights[tensor.name].astype(dtype), tensor.name))
    _rewrite_clips(result, pairs)
    return result, pairs


def _rewrite_clips(model: onnx.ModelProto, pairs: list[Pair]) -> None:
    """Clip(0, b) between a rescaled pair becomes Relu then Min(b / s_i per channel): the same function."""
    graph = model.graph
    replacements: dict[str, list[onnx.NodeProto]] = {}
    for pair in pairs:
        if pair.activation is None or pair.clip_bound is None:
            continue
        assert pair.scale is not None
        clip, name = pair.activation, pair.activation.name or pair.activation.output[0]
        bound_name = f"{name}_equalized_bound"
        spatial = len(next(t.dims for t in graph.initializer if t.name == pair.first.input[1])) - 2
        bounds = (pair.clip_bound / pair.scale).astype(np.float32).reshape(1, -1, *([1] * spatial))
        graph.initializer.append(numpy_helper.from_array(bounds, bound_name))
        relu_out = f"{clip.output[0]}_relu"
        replacements[clip.output[0]] = [
            helper.make_node("Relu", [clip.input[0]], [relu_out], name=f"{name}_relu"),
            helper.make_node("Min", [relu_out, bound_name], [clip.output[0]], name=f"{name}_min"),
        ]
    nodes = []
    for node in graph.node:
        nodes += replacements.get(node.output[0], [node]) if node.op_type == "Clip" else [node]
    del graph.node[:]
    graph.node.extend(nodes)


def pair_ranges(model: onnx.ModelProto, batches: list[Batch], *, after_activation: bool,
                capped: bool = False) -> dict[str, np.ndarray]:
    """Per channel, the range of the tensor between each pair that the target quantizes, keyed by the first
    layer's output: ``after_activation`` (tensorrt: Q/DQ sits on the second layer's input, after the ReLU6) its
    largest magnitude there; otherwise (cpu: ONNX Runtime quantizes the convolution's own output and folds the
    Relu/ReLU6 into that range) the first layer's output before the clip, its positive part when a Relu or ReLU6
    follows; ``capped`` (cpu), no more than a ReLU6's bound: the range the Q after it holds, which lets
    :func:`equalize` keep every bound above the tensor's top (``bounds_above_top``). Each equalizes exactly the
    tensor its target quantizes; the other target's ranges lost accuracy (measured: docs/results/int8-design.md,
    'Cross-layer equalization')."""
    pairs = find_pairs(model)
    if after_activation:
        ranges = channel_ranges(model, [p.second.input[0] for p in pairs], batches)
        return {p.first.output[0]: ranges[p.second.input[0]] for p in pairs}
    positive = {p.first.output[0] for p in pairs if p.activation is not None and p.activation.op_type in
                ("Relu", "Clip")}
    ranges = channel_ranges(model, [p.first.output[0] for p in pairs], batches, positive=positive)
    for pair in pairs if capped else []:
        if pair.clip_bound is not None:
            ranges[pair.first.output[0]] = np.minimum(ranges[pair.first.output[0]], pair.clip_bound)
    return ranges


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """Equalize every pair and prove on the probe data that the network still computes the same outputs."""
    with console.step("Cross-layer equalization (activation ranges measured on the probe data)..."):
        in_range = context.target is Target.CPU  # ONNX Runtime has no integer Min: the Q's clamp must be the bound
        ranges = pair_ranges(model, context.batches(context.probe), after_activation=context.target is Target.TENSORRT,
                             capped=in_range)
        equalized, pairs = equalize(model, activation_ranges=ranges, bounds_above_top=in_range)
    if not pairs:
        console.note("Cross-layer equalization: no Conv -> activation -> Conv pair to equalize; graph unchanged")
        context.record(EqualizeRecord(pairs=0))
        return model
    check = context.compare(model, equalized, context.probe)
    spread = [float(np.max(p.scale) / np.min(p.scale)) for p in pairs if p.scale is not None]
    console.success(f"Cross-layer equalization: {len(pairs)} pairs ({sum(p.clip_bound is not None for p in pairs)} "
                    f"through a ReLU6); vs input: max error {check.max_abs_err:.2e}, cosine {check.cosine:.7f}")
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"Cross-layer equalization changed the network's outputs (cosine "
                                 f"{check.cosine:.6f}): rerun without the equalize pass and report the model.")
    context.record(EqualizeRecord(len(pairs), context.probe.source, str(context.target),
                                  sum(p.clip_bound is not None for p in pairs), max(spread), check))
    return equalized
