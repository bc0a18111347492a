"""Pass ``scale_depthwise``: give every channel of a depthwise convolution's input the same range, before INT8.

INT8 activations have one scale per tensor on both targets (TensorRT quantizes activations per tensor; so do ONNX
Runtime's and OpenVINO's integer kernels). Into a depthwise convolution the channels of that tensor can span ranges
hundreds of times apart, and the narrow channels then round to a handful of levels. In the depthwise-separable
nets detectors and text detectors are built on (PP-PicoDet's ESNet, MobileNetV3, PP-LCNet), the activation in
front is a HardSwish or a SiLU, which is not positively homogeneous, so cross-layer equalization (``equalize``)
cannot move the scale through it; on a real detector one such layer's input alone ruined the outputs (measured:
docs/results/int8-design.md, 'Depthwise scaling').

A depthwise convolution computes each output channel from its own input channel, and its weights are quantized
per output channel, so ``dwconv(x * g, w / g) == dwconv(x, w)`` for any per-channel gain g, and w / g quantizes
exactly as well as w. This pass multiplies each channel of the input by g_c = max_k(a_k) / a_c (a: the channel's
largest magnitude on the probe data, the calibration data when given) and divides the weights by it, so all
channels share the widest one's range. Where the tensor is made by a Mul or Div by a constant that nothing else
reads (the trailing ``/ 6`` of an exported HardSwish), or by an Add or Sub of a constant to such a product
(PP-LCNetV3's learnable affine ``act * w0 + w1``), the gain is folded into those constants and the graph gains
no node. Where convolutions other than the depthwise ones read that tensor too (PP-OCRv4's detector: a neck's 1x1
convolution on a backbone stage's output), the gains still fold, and each such convolution's weights are divided by
them along its input channels, which undoes them exactly; those layers then read the tensor's narrow channels at a
finer step as well. Otherwise one Mul by a per-channel constant goes before the depthwise convolution, which TensorRT
fuses into the producer's pointwise epilogue and the INT8 pass leaves in float (placement rule ``channel-gain``);
where the tensor is quantized for its other readers as well, that Mul requantizes it on the way (OpenVINO: a
Convert, a Reorder and a FakeQuantize on PP-OCRv4's detector, which the fold removed and NNCF's graph did not have).
The function is unchanged, which is checked on the probe data. Run it after ``fuse`` (BatchNorm folded).

On the cpu target a HardSwish's gain is carried back into the convolution that writes its input, where only the
HardSwish reads that input and only depthwise convolutions its output: ``g*hardswish(x)`` equals
``g*hardswish(x'/g)``, with ``x' = g*x`` the convolution's output once its weights and bias are scaled per output
channel (per-channel weight quantization is blind to that). ONNX Runtime runs that convolution in integer only if
its output (the pre-activation) is uint8 with one scale, and the pre-activation's channels span ranges as far apart
as the activation's (PP-PicoDet's stem: median channel 3 of 8 bits); ``x'`` has them level (7 of 8). The gains come
from the pre-activation's per-channel interval that HardSwish responds to ([-3, max]), and the same gains serve the
depthwise input: with both tensors in uint8, the activation's median per-channel SQNR on PP-PicoDet was higher with
them than with gains made for the activation alone at 26 of its 33 sites. They are snapped to 255 / k (k a whole
number, at most 255), so that 1 / (6 g), which the INT8 pass's integer HardSwish multiplies by, is exact in uint8
(``int8/qdq/integer_hardswish.py``). The float graph is ``conv' -> Mul(1/g) -> HardSwish -> Mul(g) -> depthwise``, both
Muls named as gains (placement rule ``channel-gain`` keeps them float until that rewrite).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from trtpipe import console
from trtpipe.errors import VerificationFailed
from trtpipe.graph_index import GraphIndex, producers_of, readers_of
from trtpipe.onnx_info import attribute
from trtpipe.optimize.graph.activations import channel_bounds, channel_ranges
from trtpipe.optimize.graph.gains import EXACT_LEVELS, GAIN, GAIN_SUFFIX, INVERSE_GAIN, INVERSE_SUFFIX, gain_kind, mark
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import ScaleDepthwiseRecord
from trtpipe.vocab import Target

HARDSWISH_BOTTOM = -3.0  # HardSwish is 0 at and below it: the pre-activation's responsive interval starts there
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


@dataclass
class Carry:
    """A site made by ``hardswish`` from ``preactivation``, which ``conv`` writes and only the HardSwish reads:
    the site's gain can be carried into ``conv`` (cpu target)."""

    site: Site
    hardswish: onnx.NodeProto
    conv: onnx.NodeProto

    @property
    def preactivation(self) -> str:
        return self.hardswish.input[0]


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
    readers = {name: len(nodes) for name, nodes in readers_of(graph).items()}
    inputs = {i.name for i in graph.input}
    sites: dict[str, Site] = {}
    for node in graph.node:
        if depthwise(node, constants) and node.input[0] not in inputs and node.input[0] not in constants \
                and readers.get(node.input[1]) == 1:
            sites.setdefault(node.input[0], Site(node.input[0], [])).convs.append(node)
    return list(sites.values())


def find_carries(model: onnx.ModelProto, sites: list[Site]) -> list[Carry]:
    """The sites whose gain can go back into a convolution: the tensor is a HardSwish's output that only the site's
    depthwise convolutions read, and its input a convolution's output (constant weight and bias that nothing else
    reads) that only the HardSwish reads; graph outputs excluded. (Where other layers read the HardSwish too, its
    gains would have to come from the pre-activation for those layers as well, and carrying them lost accuracy:
    docs/results/int8-design.md, 'Depthwise scaling'.)"""
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    producer, readers = producers_of(graph), readers_of(graph)
    outputs = {o.name for o in graph.output}
    found = []
    for site in sites:
        hardswish = producer.get(site.tensor)
        if hardswish is None or hardswish.op_type != "HardSwish" or site.tensor in outputs \
                or any(r not in site.convs for r in readers.get(site.tensor, [])):
            continue
        conv = producer.get(hardswish.input[0])
        if conv is None or conv.op_type != "Conv" or hardswish.input[0] in outputs \
                or readers.get(hardswish.input[0]) != [hardswish] or len(conv.output) != 1:
            continue
        parameters = list(conv.input[1:])
        if not parameters or any(p not in constants or len(readers.get(p, [])) != 1 for p in parameters):
            continue
        found.append(Carry(site, hardswish, conv))
    return found


def carried_gains(low: np.ndarray, high: np.ndarray) -> np.ndarray | None:
    """Gains for a pre-activation that HardSwish reads, from its per-channel bounds: each channel's responsive
    interval (with 0, which uint8 must hold) lifted to the widest one's, snapped to 255 / k; None where the
    channels are within ``MIN_SPREAD`` of each other."""
    width = np.maximum(high, 0.0) - np.maximum(np.minimum(low, 0.0), HARDSWISH_BOTTOM)
    gain = gains(width)
    if gain is None:
        return None
    steps = np.clip(np.round(EXACT_LEVELS / gain), 1, EXACT_LEVELS)
    return EXACT_LEVELS / steps


def gains(peaks: np.ndarray) -> np.ndarray | None:
    """Per-channel gains that lift every channel to the widest one's range (capped; a dead channel keeps 1); None
    where the channels are already within ``MIN_SPREAD`` of each other."""
    peaks = np.asarray(peaks, dtype=np.float64)
    widest = float(peaks.max()) if peaks.size else 0.0
    if widest <= 0:
        return None
    gain = np.where(peaks > 0, widest / np.maximum(peaks, widest / MAX_GAIN), 1.0)
    return gain if float(gain.max()) >= MIN_SPREAD else None


def scale_depthwise(model: onnx.ModelProto, peaks: dict[str, np.ndarray],
                    carried: dict[str, np.ndarray] | None = None) -> tuple[onnx.ModelProto, dict[str, float]]:
    """A copy of ``model`` with each site's channels lifted to a common range (``peaks``: per-channel largest
    magnitude of each site's tensor), and the gain spread (max / min) applied per tensor. ``carried``: gains
    (``carried_gains``) per site tensor to carry into the convolution before its HardSwish (``find_carries``)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    index = GraphIndex.of(result)
    producer, readers, outputs, initializer = index.producer, index.readers, index.graph_outputs, index.initializers
    constants = {name: numpy_helper.to_array(t) for name, t in initializer.items()}
    applied: dict[str, float] = {}
    sites = find_sites(result)
    carries = {c.site.tensor: c for c in find_carries(result, sites)} if carried else {}
    for site in sites:
        carry = carries.get(site.tensor)
        gain = carried.get(site.tensor) if carry is not None and carried else None
        if gain is None:
            carry = None
            gain = gains(peaks[site.tensor]) if site.tensor in peaks else None
        if gain is None:
            continue
        _divide_weights(site, gain, constants, initializer)
        rank = len(constants[site.convs[0].input[1]].shape)  # the convolution's input has the weight's rank
        shape = (1, -1, *([1] * (rank - 2)))
        source = producer.get(site.tensor)
        others = [r for r in readers.get(site.tensor, []) if r not in site.convs]
        undoable = site.tensor not in outputs and all(_compensable(r, site.tensor, constants, readers)
                                                     for r in others)
        if source is not None and undoable and _fold(graph, source, gain, shape, constants, readers, producer):
            _compensate(others, gain, constants, initializer)
            applied[site.tensor] = float(gain.max() / gain.min())
            continue
        if carry is None and float(gain.max() / gain.min()) < MIN_SPREAD_FOR_MUL:
            _restore(initializer, constants, site)
            continue
        if carry is not None:
            _carry(graph, carry, gain, shape, constants, initializer)
        _insert_gain(graph, site, gain, shape)
        applied[site.tensor] = float(gain.max() / gain.min())
    return result, applied


def _divide_weights(site: Site, gain: np.ndarray, constants: dict[str, np.ndarray],
                    initializer: dict[str, onnx.TensorProto]) -> None:
    """Divide each of the site's depthwise convolutions' weights by ``gain`` per channel (computed in float64,
    written in the weights' dtype), so that a ``gain`` times larger input gives the same output."""
    for conv in site.convs:
        weight = constants[conv.input[1]]
        per_output = np.repeat(gain, weight.shape[0] // gain.size).reshape(-1, *([1] * (weight.ndim - 1)))
        initializer[conv.input[1]].CopyFrom(numpy_helper.from_array(
            (weight.astype(np.float64) / per_output).astype(weight.dtype), conv.input[1]))


def _insert_gain(graph: onnx.GraphProto, site: Site, gain: np.ndarray, shape: tuple[int, ...]) -> None:
    """Put ``Mul(gain)`` (marked as a GAIN) in front of the site's convolutions, which read its output instead of
    the site's tensor, where nothing before the tensor could take the gain in."""
    name = f"{site.tensor}{GAIN_SUFFIX}"
    graph.initializer.append(numpy_helper.from_array(gain.astype(np.float32).reshape(shape), f"{name}_value"))
    for conv in site.convs:
        conv.input[0] = name
    position = list(graph.node).index(site.convs[0])
    graph.node.insert(position, mark(helper.make_node("Mul", [site.tensor, f"{name}_value"], [name], name=name),
                                     GAIN))


def _carry(graph: onnx.GraphProto, carry: Carry, gain: np.ndarray, shape: tuple[int, ...],
           constants: dict[str, np.ndarray], initializer: dict[str, onnx.TensorProto]) -> None:
    """Scale ``carry``'s convolution by ``gain`` per output channel and put ``Mul(1 / gain)`` between it and the
    HardSwish, which then reads the same values as before."""
    conv = carry.conv
    for name in conv.input[1:]:  # the weight [C_out, ...] and the bias [C_out]
        value = constants[name]
        scale = gain.reshape(-1, *([1] * (value.ndim - 1)))
        initializer[name].CopyFrom(numpy_helper.from_array((value.astype(np.float64) * scale).astype(value.dtype),
                                                           name))
    preactivation = carry.preactivation
    scaled = f"{preactivation}_carried"
    conv.output[0] = scaled
    name = f"{preactivation}{INVERSE_SUFFIX}"
    graph.initializer.append(numpy_helper.from_array((1.0 / gain).astype(np.float32).reshape(shape),
                                                     f"{name}_value"))
    position = list(graph.node).index(carry.hardswish)
    graph.node.insert(position, mark(helper.make_node("Mul", [scaled, f"{name}_value"], [preactivation], name=name),
                                     INVERSE_GAIN))


def _compensable(node: onnx.NodeProto, tensor: str, constants: dict[str, np.ndarray],
                 readers: dict[str, list[onnx.NodeProto]]) -> bool:
    """A convolution (one group) that reads ``tensor`` as its data input through a constant weight only it reads:
    dividing the weight's input channels by the gains undoes them exactly (zero padding stays zero)."""
    return (node.op_type == "Conv" and len(node.input) >= 2 and node.input[0] == tensor
            and node.input[1] in constants and readers.get(node.input[1]) == [node]
            and int(attribute(node, "group", 1)) == 1)


def _compensate(convs: list[onnx.NodeProto], gain: np.ndarray, constants: dict[str, np.ndarray],
                initializer: dict[str, onnx.TensorProto]) -> None:
    """Divide each convolution's weight [C_out, C_in, ...] by the gains along its input channels."""
    for conv in convs:
        weight = constants[conv.input[1]]
        per_input = gain.reshape(1, -1, *([1] * (weight.ndim - 2)))
        initializer[conv.input[1]].CopyFrom(numpy_helper.from_array(
            (weight.astype(np.float64) / per_input).astype(weight.dtype), conv.input[1]))


def _restore(initializer: dict[str, onnx.TensorProto], constants: dict[str, np.ndarray], site: Site) -> None:
    """Put back the weights of a site that is left as it was."""
    for conv in site.convs:
        initializer[conv.input[1]].CopyFrom(numpy_helper.from_array(constants[conv.input[1]], conv.input[1]))


def _fold(graph: onnx.GraphProto, node: onnx.NodeProto, gain: np.ndarray, shape: tuple[int, ...],
          constants: dict[str, np.ndarray], readers: dict[str, list[onnx.NodeProto]],
          producer: dict[str, onnx.NodeProto]) -> bool:
    """Fold the gains into ``node`` when it multiplies or divides by a scalar constant, or adds or subtracts one
    to such a product that nothing else reads (PP-LCNetV3's learnable affine ``act * w0 + w1``: both constants
    are scaled): each node gets a per-channel constant of its own (simplifiers share one ``6`` among every
    HardSwish of a network), and a scalar goes once no node reads it."""
    scaled = [(node, _scalar_operand(node, constants))]
    if node.op_type in ("Add", "Sub"):
        index = scaled[0][1]
        product = producer.get(node.input[1 - index]) if index is not None else None
        if product is None or readers.get(product.output[0]) != [node] or product.op_type not in ("Mul", "Div"):
            return False
        scaled.append((product, _scalar_operand(product, constants)))
    operands = [(target, index) for target, index in scaled if index is not None]
    if len(operands) != len(scaled):
        return False
    for target, index in operands:
        _scale_operand(graph, target, index, gain, shape, constants, readers)
    return True


def _scalar_operand(node: onnx.NodeProto, constants: dict[str, np.ndarray]) -> int | None:
    """Which input of a two-input Mul, Div, Add or Sub is a scalar constant the gains can scale (a divisor or a
    term, or either factor); None where none is."""
    if node.op_type not in ("Mul", "Div", "Add", "Sub") or len(node.input) != 2:
        return None
    either = node.op_type in ("Mul", "Add", "Sub")
    index = 1 if node.input[1] in constants else 0 if either and node.input[0] in constants else None
    return index if index is not None and constants[node.input[index]].size == 1 else None


def _scale_operand(graph: onnx.GraphProto, node: onnx.NodeProto, index: int, gain: np.ndarray,
                   shape: tuple[int, ...], constants: dict[str, np.ndarray],
                   readers: dict[str, list[onnx.NodeProto]]) -> None:
    """Give ``node`` its own per-channel constant: its scalar operand times the gains (divided, for a divisor)."""
    original = node.input[index]
    value = constants[original].astype(np.float64).reshape(())
    folded = value / gain if node.op_type == "Div" else value * gain
    name = f"{node.output[0]}{GAIN_SUFFIX}"
    graph.initializer.append(numpy_helper.from_array(folded.astype(constants[original].dtype).reshape(shape), name))
    node.input[index] = name
    readers[original] = [r for r in readers.get(original, []) if r is not node]
    if not readers[original]:
        graph.initializer.remove(next(t for t in graph.initializer if t.name == original))


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """Lift each depthwise input's channels to one range and prove on the probe data that nothing else changed."""
    sites = find_sites(model)
    if not sites:
        console.note("Depthwise scaling: no depthwise convolution reads an activation; graph unchanged")
        context.record(ScaleDepthwiseRecord(tensors=0))
        return model
    carries = find_carries(model, sites) if context.target is Target.CPU else []
    with console.step(f"Depthwise scaling: measuring {len(sites)} input(s) per channel on the probe data..."):
        batches = context.batches(context.probe)
        peaks = channel_ranges(model, [s.tensor for s in sites], batches)
        bounds = channel_bounds(model, [c.preactivation for c in carries], batches)
        carried = {c.site.tensor: gain for c in carries
                   if (gain := carried_gains(*bounds[c.preactivation])) is not None}
        scaled, applied = scale_depthwise(model, peaks, carried)
    if not applied:
        console.note(f"Depthwise scaling: no depthwise input needs a gain (channels within {MIN_SPREAD:g}x of each "
                     f"other, or within {MIN_SPREAD_FOR_MUL:g}x where the gain would cost a Mul); unchanged")
        context.record(ScaleDepthwiseRecord(tensors=0))
        return model
    check = context.compare(model, scaled, context.probe)
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"Depthwise scaling changed the network's outputs (cosine {check.cosine:.6f}): "
                                 "rerun without the scale_depthwise pass and report the model.")
    inverse = sum(gain_kind(n) == INVERSE_GAIN for n in scaled.graph.node)
    added = sum(gain_kind(n) == GAIN for n in scaled.graph.node)
    carried_text = f", {inverse} carried into the convolution before their HardSwish" if inverse else ""
    console.success(f"Depthwise scaling: {len(applied)} input(s) lifted to one range per tensor (widest spread "
                    f"{max(applied.values()):.0f}x; {len(applied) - added} folded into a constant, {added} Mul "
                    f"added{carried_text}); vs input: cosine {check.cosine:.7f}")
    context.record(ScaleDepthwiseRecord(len(applied), len(applied) - added, added, inverse, dict(applied),
                                        context.probe.source, check))
    return scaled
