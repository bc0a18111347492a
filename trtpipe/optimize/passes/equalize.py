"""Pass ``equalize``: cross-layer equalization (CLE) of consecutive convolutions, before INT8.

Depthwise-separable nets quantize badly per tensor and even per channel because one layer's output channels span
ranges 100x apart while the next layer could take them at any scale. For two weighted layers joined by a
positively homogeneous activation (none, Relu, LeakyRelu, PRelu, or a ReLU6 Clip), scaling output channel i of
the first by 1/s_i and input channel i of the second by s_i computes the same function; with
s_i = sqrt(r1_i / r2_i) (r: the channel's weight range in each layer) both layers end with the same per-channel
ranges (Nagel et al., "Data-Free Quantization Through Weight Equalization and Bias Correction", ICCV 2019).
Chains (expand -> depthwise -> project) are equalized pair by pair for a few rounds, as the paper does.

A ReLU6 is a Clip at 6, which is not homogeneous: after scaling, channel i clips at 6 / s_i. AIMET replaces it
with a Relu (and changes the network); here it becomes Relu followed by a Min against those per-channel bounds,
so the FP32 function is unchanged (checked on the probe data, like fusion) and TensorRT fuses both into the
convolution's epilogue. Run it after ``fuse`` (BatchNorm must already be folded into the convolutions).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe import console
from trtpipe.errors import VerificationFailed
from trtpipe.optimize.passes.context import PassContext

DESCRIPTION = "cross-layer equalization of consecutive convolutions (for depthwise-separable nets; INT8)"
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


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(helper.get_attribute_value(attribute))
    return default


def _clip_bounds(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """(min, max) of a Clip whose bounds are constants (attributes before opset 11, inputs since)."""
    low, high = -np.inf, np.inf
    for attribute in node.attribute:
        if attribute.name == "min":
            low = float(helper.get_attribute_value(attribute))
        elif attribute.name == "max":
            high = float(helper.get_attribute_value(attribute))
    for index, name in enumerate(node.input[1:3], start=1):
        if not name:
            continue
        if name not in constants or constants[name].size != 1:
            return None
        value = float(constants[name].reshape(()))
        low, high = (value, high) if index == 1 else (low, value)
    return low, high


def find_pairs(model: onnx.ModelProto) -> list[Pair]:
    """Every Conv -> [activation] -> Conv where each tensor in between has exactly one reader, the first
    convolution is ungrouped or depthwise, and the second reads the first's channels one to one (ungrouped or
    depthwise)."""
    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}

    def only_reader(tensor: str) -> onnx.NodeProto | None:
        nodes = readers.get(tensor, [])
        return nodes[0] if len(nodes) == 1 and tensor not in outputs else None

    def equalizable(conv: onnx.NodeProto) -> bool:
        if conv.op_type != "Conv" or len(conv.input) < 2 or conv.input[1] not in constants:
            return False
        weight = constants[conv.input[1]]
        group = _attribute(conv, "group", 1)
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
            clip = _clip_bounds(after, constants)
            if clip is None or clip[0] != 0.0 or not np.isfinite(clip[1]):
                continue
            activation, bound, after = after, clip[1], only_reader(after.output[0])
        if after is None or not equalizable(after) or after.input[0] != (activation or first).output[0]:
            continue
        channels = constants[first.input[1]].shape[0]
        second_weight = constants[after.input[1]]
        depthwise = _attribute(after, "group", 1) > 1
        if (second_weight.shape[0] if depthwise else second_weight.shape[1]) != channels:
            continue
        pairs.append(Pair(first, after, activation, bound, np.ones(channels)))
    return pairs


def equalize(model: onnx.ModelProto, rounds: int = ROUNDS) -> tuple[onnx.ModelProto, list[Pair]]:
    """A copy of ``model`` with every pair equalized, and the pairs (with their accumulated scales)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    pairs = find_pairs(result)
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in result.graph.initializer}
    for _ in range(rounds):
        for pair in pairs:
            w1, w2 = weights[pair.first.input[1]], weights[pair.second.input[1]]
            depthwise = _attribute(pair.second, "group", 1) > 1
            r1 = np.abs(w1).reshape(w1.shape[0], -1).max(axis=1)
            r2 = np.abs(w2).reshape(w2.shape[0], -1).max(axis=1) if depthwise else \
                np.abs(np.moveaxis(w2, 1, 0)).reshape(w2.shape[1], -1).max(axis=1)
            s = np.where((r1 > 0) & (r2 > 0), np.sqrt(r1 / np.where(r2 > 0, r2, 1.0)), 1.0)
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
        bounds = (pair.clip_bound / pair.scale).astype(np.float32).reshape(1, -1, 1, 1)
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


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """Equalize every pair and prove on the probe data that the network still computes the same outputs."""
    with console.step("Cross-layer equalization..."):
        equalized, pairs = equalize(model)
    if not pairs:
        console.note("Cross-layer equalization: no Conv -> activation -> Conv pair to equalize; graph unchanged")
        context.details["equalize"] = {"pairs": 0}
        return model
    check = context.compare(model, equalized, context.probe)
    spread = [float(np.max(p.scale) / np.min(p.scale)) for p in pairs if p.scale is not None]
    console.success(f"Cross-layer equalization: {len(pairs)} pairs ({sum(p.clip_bound is not None for p in pairs)} "
                    f"through a ReLU6); vs input: max error {check.max_abs_err:.2e}, cosine {check.cosine:.7f}")
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"Cross-layer equalization changed the network's outputs (cosine "
                                 f"{check.cosine:.6f}): rerun without the equalize pass and report the model.")
    context.details["equalize"] = {"pairs": len(pairs), "rounds": ROUNDS,
                                   "relu6_pairs": sum(p.clip_bound is not None for p in pairs),
                                   "max_scale_spread": max(spread), "verification": check.to_dict()}
    return equalized
