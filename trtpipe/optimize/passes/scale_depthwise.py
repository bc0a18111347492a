"""Pass ``scale_depthwise``: give every channel of a depthwise convolution's input the same range, before INT8.

INT8 activations have one scale per tensor on both targets (TensorRT quantizes activations per tensor; so do ONNX
Runtime's and OpenVINO's integer kernels). Into a depthwise convolution the channels of that tensor can span ranges
hundreds of times apart, and the narrow channels then round to a handful of levels. In the depthwise-separable
nets detectors and text detectors are built on (PP-PicoDet's ESNet, MobileNetV3, PP-LCNet), the activation in
front is a HardSwish or a SiLU, which is not positively homogeneous, so cross-layer equalization (``equalize``)
cannot move the scale through it. Measured on the real PP-PicoDet layout detector (tensorrt target, MSE ranges):
quantizing the input of one such depthwise layer alone (range 78, most channels below 1) dropped the outputs'
cosine to 0.77, and the whole model kept 70 % mAP@0.5 of FP32's detections.

A depthwise convolution computes each output channel from its own input channel, and its weights are quantized
per output channel, so ``dwconv(x * g, w / g) == dwconv(x, w)`` for any per-channel gain g, and w / g quantizes
exactly as well as w. This pass multiplies each channel of the input by g_c = max_k(a_k) / a_c (a: the channel's
largest magnitude on the probe data, the calibration data when given) and divides the weights by it, so all
channels share the widest one's range. Where the tensor is made by a Mul or Div by a constant that nothing else
reads (the trailing ``/ 6`` of an exported HardSwish), the gain is folded into that constant and the graph gains
no node; otherwise one Mul by a per-channel constant goes before the convolution, which TensorRT fuses into the
producer's pointwise epilogue and the INT8 pass leaves in float (placement rule ``channel-gain``). The function is
unchanged, which is checked on the probe data. Run it after ``fuse`` (BatchNorm folded).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe import console
from trtpipe.errors import VerificationFailed
from trtpipe.onnx_info import attribute, producers_of, readers_of
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.passes.equalize import channel_ranges
from trtpipe.optimize.passes.registry import GraphPass

PASS = GraphPass("per-channel input gains for depthwise convolutions, folded into their weights (INT8)")
GAIN_SUFFIX = "_channel_gain"  # the Mul nodes this pass adds carry it: the INT8 pass keeps them in float
MAX_GAIN = 1024.0  # a channel 1000x narrower than the widest is all but dead: lifting it further gains nothing
MIN_SPREAD = 2.0  # channels within 2x of each other lose at most one bit: not worth changing anything
# A gain that cannot fold costs a Mul, and on the cpu target that float Mul splits ONNX Runtime's integer chain
# (DQ -> Mul -> Q); only a spread this wide (4 bits and more lost by the narrowest channel) pays for it.
MIN_SPREAD_FOR_MUL = 16.0
MIN_COSINE = 0.99999  # an exact rescaling: anything below this is a bug, not rounding


@dataclass
class Site:
    """One activation tensor read by depthwise convolutions, and those convolutions."""

    tensor: str
    convs: list[onnx.NodeProto]


def depthwise(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> bool:
    """A Conv whose groups equal its input channels (each output channel reads one input channel), with a
    constant weight."""
    if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in constants:
        return False
    weight = constants[node.input[1]]
    group = int(attribute(node, "group", 1))
    return group > 1 and weight.ndim >= 3 and weight.shape[1] == 1 and weight.shape[0] % group == 0


def find_sites(model: onnx.ModelProto) -> list[Site]:
    """Activation tensors (not graph inputs) that depthwise convolutions read, with weights no other node reads."""
    graph = model.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    inputs = {i.name for i in graph.input}
    sites: dict[str, Site] = {}
    for node in graph.node:
        if depthwise(node, constants) and node.input[0] not in inputs and node.input[0] not in constants \
                and readers.get(node.input[1]) == 1:
            sites.setdefault(node.input[0], Site(node.input[0], [])).convs.append(node)
    return list(sites.values())


def gains(peaks: np.ndarray) -> np.ndarray | None:
    """Per-channel gains that lift every channel to the widest one's range (capped; a dead channel keeps 1); None
    where the channels are already within ``MIN_SPREAD`` of each other."""
    peaks = np.asarray(peaks, dtype=np.float64)
    widest = float(peaks.max()) if peaks.size else 0.0
    if widest <= 0:
        return None
    gain = np.where(peaks > 0, widest / np.maximum(peaks, widest / MAX_GAIN), 1.0)
    return gain if float(gain.max()) >= MIN_SPREAD else None


def scale_depthwise(model: onnx.ModelProto, peaks: dict[str, np.ndarray]) -> tuple[onnx.ModelProto, dict[str, float]]:
    """A copy of ``model`` with each site's channels lifted to a common range (``peaks``: per-channel largest
    magnitude of each site's tensor), and the gain spread (max / min) applied per tensor."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = producers_of(graph)
    readers = readers_of(graph)
    outputs = {o.name for o in graph.output}
    initializer = {t.name: t for t in graph.initializer}
    applied: dict[str, float] = {}
    for site in find_sites(result):
        gain = gains(peaks[site.tensor]) if site.tensor in peaks else None
        if gain is None:
            continue
        for conv in site.convs:
            weight = constants[conv.input[1]]
            per_output = np.repeat(gain, weight.shape[0] // gain.size).reshape(-1, *([1] * (weight.ndim - 1)))
            initializer[conv.input[1]].CopyFrom(numpy_helper.from_array(
                (weight.astype(np.float64) / per_output).astype(weight.dtype), conv.input[1]))
        rank = len(constants[site.convs[0].input[1]].shape)  # the convolution's input has the weight's rank
        shape = (1, -1, *([1] * (rank - 2)))
        source = producer.get(site.tensor)
        only_convs = all(r in site.convs for r in readers.get(site.tensor, [])) and site.tensor not in outputs
        if source is not None and only_convs and _fold(graph, source, gain, shape, constants, readers):
            applied[site.tensor] = float(gain.max() / gain.min())
            continue
        if float(gain.max() / gain.min()) < MIN_SPREAD_FOR_MUL:
            _restore(initializer, constants, site)
            continue
        name = f"{site.tensor}{GAIN_SUFFIX}"
        graph.initializer.append(numpy_helper.from_array(gain.astype(np.float32).reshape(shape), f"{name}_value"))
        for conv in site.convs:
            conv.input[0] = name
        position = list(graph.node).index(site.convs[0])
        graph.node.insert(position, helper.make_node("Mul", [site.tensor, f"{name}_value"], [name], name=name))
        applied[site.tensor] = float(gain.max() / gain.min())
    return result, applied


def _restore(initializer: dict[str, onnx.TensorProto], constants: dict[str, np.ndarray], site: Site) -> None:
    """Put back the weights of a site that is left as it was."""
    for conv in site.convs:
        initializer[conv.input[1]].CopyFrom(numpy_helper.from_array(constants[conv.input[1]], conv.input[1]))


def _fold(graph: onnx.GraphProto, node: onnx.NodeProto, gain: np.ndarray, shape: tuple[int, ...],
          constants: dict[str, np.ndarray], readers: dict[str, list[onnx.NodeProto]]) -> bool:
    """Fold the gains into ``node`` when it multiplies or divides by a scalar constant: the node gets a per-channel
    constant of its own (simplifiers share one ``6`` among every HardSwish of a network), and the scalar goes
    once no node reads it."""
    if node.op_type not in ("Mul", "Div") or len(node.input) != 2:
        return False
    index = 1 if node.input[1] in constants else 0 if node.op_type == "Mul" and node.input[0] in constants else None
    if index is None or constants[node.input[index]].size != 1:
        return False
    original = node.input[index]
    value = constants[original].astype(np.float64).reshape(())
    folded = value * gain if node.op_type == "Mul" else value / gain
    name = f"{node.output[0]}{GAIN_SUFFIX}"
    graph.initializer.append(numpy_helper.from_array(folded.astype(constants[original].dtype).reshape(shape), name))
    node.input[index] = name
    readers[original] = [r for r in readers.get(original, []) if r is not node]
    if not readers[original]:
        graph.initializer.remove(next(t for t in graph.initializer if t.name == original))
    return True


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """Lift each depthwise input's channels to one range and prove on the probe data that nothing else changed."""
    sites = find_sites(model)
    if not sites:
        console.note("Depthwise scaling: no depthwise convolution reads an activation; graph unchanged")
        context.details["scale_depthwise"] = {"tensors": 0}
        return model
    with console.step(f"Depthwise scaling: measuring {len(sites)} input(s) per channel on the probe data..."):
        peaks = channel_ranges(model, [s.tensor for s in sites], context.batches(context.probe))
        scaled, applied = scale_depthwise(model, peaks)
    if not applied:
        console.note(f"Depthwise scaling: no depthwise input needs a gain (channels within {MIN_SPREAD:g}x of each "
                     f"other, or within {MIN_SPREAD_FOR_MUL:g}x where the gain would cost a Mul); unchanged")
        context.details["scale_depthwise"] = {"tensors": 0}
        return model
    check = context.compare(model, scaled, context.probe)
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"Depthwise scaling changed the network's outputs (cosine {check.cosine:.6f}): "
                                 "rerun without the scale_depthwise pass and report the model.")
    added = sum(n.op_type == "Mul" and n.name.endswith(GAIN_SUFFIX) for n in scaled.graph.node)
    console.success(f"Depthwise scaling: {len(applied)} input(s) lifted to one range per tensor (widest spread "
                    f"{max(applied.values()):.0f}x; {len(applied) - added} folded into a constant, {added} Mul "
                    f"added); vs input: cosine {check.cosine:.7f}")
    context.details["scale_depthwise"] = {"tensors": len(applied), "folded": len(applied) - added, "muls": added,
                                          "spread": applied, "probe": context.probe.source,
                                          "verification": check.to_dict()}
    return scaled
