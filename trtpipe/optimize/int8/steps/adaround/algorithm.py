"""AdaRound: learn, layer by layer, whether each INT8 weight rounds up or down (Nagel et al., "Up or Down?
Adaptive Rounding for Post-Training Quantization", ICML 2020).

Rounding each weight to its nearest integer minimises the error of each weight, not of the layer's output; the
best rounding for the output is found by optimising a soft rounding offset h(V) in [0, 1] per weight so that the
layer's output on quantized inputs matches the FP32 layer's output on FP32 inputs, with a regulariser that
drives every h to 0 or 1 as its temperature anneals. The result is still ordinary INT8 weights behind the same
DequantizeLinear (same scales, same zero points), so every Q/DQ rule the target needs still holds: only the
integers change, by at most one step each.

Layers are done in graph order, each one's input taken from the model as rounded so far (Q/DQ run as float ops),
so a layer corrects what the layers before it left. ONNX's quantizers do not offer it; AMD Quark has it inside
its own quantizer flow (measured as a peer in `make peers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe.graph_index import GraphIndex, producers_of
from trtpipe.inputs import Batch
from trtpipe.onnx_info import attribute, clip_bounds
from trtpipe.optimize.graph.activations import feeds
from trtpipe.runtime.registry import probe_session

ITERATIONS = 100
BATCH = 8
LEARNING_RATE = 1e-2
REGULARIZATION = 0.01
BETA = (20.0, 2.0)  # regulariser temperature, annealed after the warm start
WARM_START = 0.2  # share of iterations spent on reconstruction alone
ZETA, GAMMA = 1.1, -0.1  # the rectified sigmoid's stretch


@dataclass
class RoundedLayer:
    """A weighted node whose weights come from DequantizeLinear(int8 initializer, scale, zero point)."""

    node: onnx.NodeProto
    integers: str  # initializer names
    scale: str
    zero_point: str | None
    axis: int


def rounded_layers(model: onnx.ModelProto) -> list[RoundedLayer]:
    """Conv and Gemm nodes whose weight is an INT8 initializer behind a DequantizeLinear, in graph order."""
    graph = model.graph
    index = GraphIndex.of(model)
    initializers, producer = index.initializers, index.producer
    layers = []
    for node in graph.node:
        if node.op_type not in ("Conv", "Gemm") or len(node.input) < 2:
            continue
        dq = producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in initializers \
                or dq.input[1] not in initializers:
            continue
        zero_point = dq.input[2] if len(dq.input) > 2 and dq.input[2] else None
        layers.append(RoundedLayer(node, dq.input[0], dq.input[1], zero_point, int(attribute(dq, "axis", 1))))
    return layers


def upstream(model: onnx.ModelProto, tensor: str) -> onnx.ModelProto:
    """The part of ``model`` that computes ``tensor``, with ``tensor`` as its only output: a layer's input needs
    only the layers before it, so the early layers (the largest activations) cost a fraction of a full run."""
    graph = model.graph
    producer = producers_of(graph)
    needed, stack, seen = set(), [tensor], set()
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        needed.add(id(node))
        stack.extend(i for i in node.input if i)
    inputs = {i for n in graph.node if id(n) in needed for i in n.input}
    sub = helper.make_graph(
        [n for n in graph.node if id(n) in needed], graph.name, list(graph.input),
        [helper.make_empty_tensor_value_info(tensor)], [t for t in graph.initializer if t.name in inputs])
    return helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)


def _tensors(model: onnx.ModelProto, names: list[str], batches: list[Batch]) -> list[np.ndarray]:
    if len(names) == 1:
        model = upstream(model, names[0])
    session = probe_session(model, exposing=names)  # Q/DQ as float ops: the target's arithmetic
    runs = [session.run(names, feeds(session, batch)) for batch in batches]
    return [np.concatenate([run[i] for run in runs]) for i in range(len(names))]


def _layer_function(node: onnx.NodeProto, activation: onnx.NodeProto | None,
                    constants: dict[str, np.ndarray]) -> Callable:
    """The node (and the activation after it) as a torch function of (input, weight, bias)."""
    import torch
    import torch.nn.functional as F

    if node.op_type == "Conv":
        pads = list(attribute(node, "pads", []) or [])
        strides = list(attribute(node, "strides", []) or [1])
        dilations = list(attribute(node, "dilations", []) or [1])
        group = int(attribute(node, "group", 1))
        if str(attribute(node, "auto_pad", b"NOTSET")) not in ("NOTSET", "b'NOTSET'"):
            raise ValueError("auto_pad")
        half = len(pads) // 2
        symmetric = pads[:half] == pads[half:]

        def linear(x, w, b):
            if pads and not symmetric:  # F.pad takes (last dim begin, end, ...)
                x = F.pad(x, [p for i in reversed(range(half)) for p in (pads[i], pads[i + half])])
            padding = pads[:half] if pads and symmetric else 0
            convolve = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[w.ndim - 2]
            return convolve(x, w, b, stride=strides, padding=padding, dilation=dilations, groups=group)
    else:
        alpha, beta = float(attribute(node, "alpha", 1.0)), float(attribute(node, "beta", 1.0))
        trans_a, trans_b = int(attribute(node, "transA", 0)), int(attribute(node, "transB", 0))

        def linear(x, w, b):
            y = alpha * ((x.T if trans_a else x) @ (w.T if trans_b else w))
            return y if b is None else y + beta * b

    if activation is None:
        return linear
    if activation.op_type == "Relu":
        return lambda x, w, b: torch.relu(linear(x, w, b))
    bounds = clip_bounds(activation, constants)
    if bounds is None:
        raise ValueError("the Clip's bounds are computed at run time")
    low, high = bounds
    return lambda x, w, b: torch.clamp(linear(x, w, b), min=low, max=high)


def _optimise_rounding(fn: Callable, weight: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, axis: int,
                       bounds: tuple[int, int], bias: np.ndarray | None, inputs: np.ndarray, target: np.ndarray,
                       iterations: int, seed: int) -> np.ndarray:
    """The integer weights whose rounding, learned on (inputs -> target), best reproduces the target."""
    import torch

    shape = [1] * weight.ndim
    shape[axis] = -1
    s = torch.from_numpy(scale.reshape(shape).astype(np.float32))
    zp = torch.from_numpy(zero_point.reshape(shape).astype(np.float32))
    w = torch.from_numpy(weight.astype(np.float32))
    floor = torch.floor(w / s)
    rest = (w / s - floor).clamp(1e-4, 1 - 1e-4)
    # h(V) starts at the fractional part: the soft rounding begins as the weights themselves.
    v = torch.log((rest - GAMMA) / (ZETA - rest) + 1e-12).clone().requires_grad_(True)  # inverse rectified sigmoid
    b = None if bias is None else torch.from_numpy(bias.astype(np.float32))
    x_all, y_all = torch.from_numpy(inputs), torch.from_numpy(target)
    optimiser = torch.optim.Adam([v], lr=LEARNING_RATE)
    generator = torch.Generator().manual_seed(seed)
    warm = int(WARM_START * iterations)

    def soft(v: torch.Tensor) -> torch.Tensor:
        return torch.clamp(torch.sigmoid(v) * (ZETA - GAMMA) + GAMMA, 0, 1)

    for step in range(iterations):
        pick = torch.randint(0, len(x_all), (min(BATCH, len(x_all)),), generator=generator)
        quantized = torch.clamp(floor + soft(v) + zp, bounds[0], bounds[1])
        out = fn(x_all[pick], (quantized - zp) * s, b)
        error = (out - y_all[pick]).pow(2)
        loss = error.sum(dim=1).mean() if out.ndim > 1 else error.mean()  # per position: summed over channels
        if step >= warm:
            progress = (step - warm) / max(1, iterations - warm)
            beta = BETA[1] + 0.5 * (BETA[0] - BETA[1]) * (1 + np.cos(progress * np.pi))
            loss = loss + REGULARIZATION * (1 - (2 * soft(v) - 1).abs().pow(beta)).sum()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    with torch.no_grad():
        hard = (soft(v) >= 0.5).float()
        return torch.clamp(floor + hard + zp, bounds[0], bounds[1]).numpy()


def adaround(fp32: onnx.ModelProto, quantized: onnx.ModelProto, batches: list[Batch], *,
             iterations: int = ITERATIONS, on_layer: Callable[[], None] | None = None,
             ) -> tuple[onnx.ModelProto, dict[str, float]]:
    """``quantized`` with every eligible layer's weight rounding learned; {layer: share of weights that round the
    other way than nearest}."""
    result = onnx.ModelProto()
    result.CopyFrom(quantized)
    fp32_nodes = {n.name: n for n in fp32.graph.node}
    fp32_index = GraphIndex.of(fp32)
    fp32_weights, fp32_producer, fp32_readers = fp32_index.initializers, fp32_index.producer, fp32_index.readers
    fp32_constants = {name: numpy_helper.to_array(t) for name, t in fp32_weights.items()}
    flipped: dict[str, float] = {}
    for seed, layer in enumerate(rounded_layers(result)):
        original = fp32_nodes.get(layer.node.name)
        if original is None:
            continue
        weight = _fp32_constant(original.input[1], fp32_weights, fp32_producer)
        bias = _fp32_constant(original.input[2], fp32_weights, fp32_producer) if len(original.input) > 2 and \
            original.input[2] else None
        if weight is None:
            continue
        # The activation after the layer belongs in the loss (errors it clips away do not count); it is read
        # from the FP32 graph because the cpu target's quantizer folds Relu/Clip into the output's Q range.
        after = fp32_readers.get(original.output[0], [])
        activation = after[0] if len(after) == 1 and after[0].op_type in ("Relu", "Clip") else None
        try:
            fn = _layer_function(original, activation, fp32_constants)
        except ValueError:
            continue
        (inputs,) = _tensors(result, [layer.node.input[0]], batches)
        (target,) = _tensors(fp32, [(activation or original).output[0]], batches)
        constants = {t.name: numpy_helper.to_array(t) for t in result.graph.initializer}
        integers = constants[layer.integers]
        # Stay within the integers the quantizer used: 7-bit weights (reduce_range, CPUs without VNNI) must
        # not grow an eighth bit, or int8 dot products saturate again.
        limit = int(np.abs(integers.astype(np.int64)).max())
        zero_point = constants[layer.zero_point] if layer.zero_point else np.zeros(1, integers.dtype)
        scale = constants[layer.scale]
        learned = _optimise_rounding(fn, weight, scale, zero_point.astype(np.float32), layer.axis,
                                     (-limit, limit), bias, inputs, target, iterations, seed)
        learned = learned.astype(integers.dtype)
        flipped[layer.node.name] = float(np.mean(learned != integers))
        _replace(result, layer.integers, learned)
        if on_layer:
            on_layer()
    return result, flipped


def _fp32_constant(name: str, initializers: dict[str, onnx.TensorProto],
                   producer: dict[str, onnx.NodeProto]) -> np.ndarray | None:
    if name in initializers:
        return numpy_helper.to_array(initializers[name]).astype(np.float32)
    node = producer.get(name)
    if node is not None and node.op_type == "Constant":
        return numpy_helper.to_array(node.attribute[0].t).astype(np.float32)
    return None


def _replace(model: onnx.ModelProto, name: str, values: np.ndarray) -> None:
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.name == name:
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(values, name))
            return
