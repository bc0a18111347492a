"""Empirical bias correction: quantization shifts each layer's output mean; move the bias back, layer by layer.

For every Conv, ConvTranspose and Gemm with a bias, in graph order, the per-output-channel mean of its output is
measured on calibration data in FP32 and in the quantized model as corrected so far (Q/DQ run as float ops: the
target's arithmetic), and the difference is added to that layer's bias in the quantized graph (Nagel et al.,
"Data-Free Quantization Through Weight Equalization and Bias Correction", 2019, empirical variant). One layer at
a time, because correcting a layer changes what every later layer sees; correcting all at once overshoots.
ONNX's quantizers do not offer it. A float bias (tensorrt target) is edited directly; an int32 bias (cpu target)
through its DequantizeLinear's scale.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import producers_of
from trtpipe.inputs import Batch
from trtpipe.optimize.graph.activations import feeds
from trtpipe.runtime.registry import probe_session

WEIGHTED_WITH_BIAS = ("Conv", "ConvTranspose", "Gemm")


def channel_means(model: onnx.ModelProto, names: list[str], batches: list[Batch]) -> dict[str, np.ndarray]:
    """Mean over every axis but 1 (channels) of each tensor in ``names``, over all batches, Q/DQ as float ops."""
    session = probe_session(model, exposing=names)  # Q/DQ as float ops: the target's arithmetic
    sums: dict[str, np.ndarray] = {}
    counts = dict.fromkeys(names, 0)
    for batch in batches:
        for name, value in zip(names, session.run(names, feeds(session, batch)), strict=True):
            axes = tuple(i for i in range(value.ndim) if i != 1)
            sums[name] = sums.get(name, 0) + value.astype(np.float64).sum(axis=axes)
            counts[name] += value.size // value.shape[1]
    return {name: sums[name] / counts[name] for name in names}


def _bias_editor(model: onnx.ModelProto, node: onnx.NodeProto) -> Callable[[np.ndarray], None] | None:
    """A function adding a per-channel shift to ``node``'s bias inside ``model``; None when it has none."""
    if len(node.input) < 3 or not node.input[2]:
        return None
    inits = {t.name: i for i, t in enumerate(model.graph.initializer)}
    producer = producers_of(model.graph)

    def add(index: int, shift: np.ndarray, scale: np.ndarray | None) -> None:
        tensor = model.graph.initializer[index]
        values = numpy_helper.to_array(tensor)
        if scale is None:
            new = (values.astype(np.float64) + shift).astype(values.dtype)
        else:  # an int32 bias read through DequantizeLinear: shift in its own units
            new = (values.astype(np.int64) + np.round(shift / scale).astype(np.int64)).clip(
                np.iinfo(values.dtype).min, np.iinfo(values.dtype).max).astype(values.dtype)
        model.graph.initializer[index].CopyFrom(numpy_helper.from_array(new, tensor.name))

    name = node.input[2]
    if name in inits:
        return lambda shift: add(inits[name], shift, None)
    dq = producer.get(name)
    if dq is not None and dq.op_type == "DequantizeLinear" and dq.input[0] in inits and dq.input[1] in inits:
        scale = numpy_helper.to_array(model.graph.initializer[inits[dq.input[1]]]).astype(np.float64)
        return lambda shift: add(inits[dq.input[0]], shift, scale)
    return None


def correct_biases(fp32: onnx.ModelProto, quantized: onnx.ModelProto, batches: list[Batch],
                   on_layer: Callable[[], None] | None = None) -> tuple[onnx.ModelProto, dict[str, float]]:
    """The quantized model with each biased layer's mean shift removed, in graph order, and {layer: mean |shift|}."""
    corrected = onnx.ModelProto()
    corrected.CopyFrom(quantized)
    by_name = {n.name: n for n in corrected.graph.node}
    layers = [n for n in fp32.graph.node if n.op_type in WEIGHTED_WITH_BIAS and n.name in by_name]
    reference = channel_means(fp32, [n.output[0] for n in layers], batches)
    shifts: dict[str, float] = {}
    for layer in layers:
        target = by_name[layer.name]
        edit = _bias_editor(corrected, target)
        if edit is not None:
            measured = channel_means(corrected, [target.output[0]], batches)[target.output[0]]
            shift = reference[layer.output[0]] - measured
            edit(shift)
            shifts[layer.name] = float(np.abs(shift).mean())
        if on_layer:
            on_layer()
    return corrected, shifts
