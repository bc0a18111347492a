"""A depthwise input's channel gain carried into the convolution before its HardSwish (cpu target): the float graph
computes what it did, the pre-activation's channels come out level, its range is narrowed per channel, and the
quantized HardSwish with its gain runs as integer ops within one output step of the reference computation."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import constant, cpu_optimized_ops, x_to_y
from tests.optimize.conftest import run
from trtpipe.conformance.check import check_model
from trtpipe.optimize.graph.activations import channel_bounds, channel_ranges
from trtpipe.optimize.graph.gains import EXACT_LEVELS, GAIN_SUFFIX, INVERSE_SUFFIX
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.calibration.saturation import channel_intervals, narrowed_per_channel, responsive_intervals
from trtpipe.optimize.int8.qdq.integer_hardswish import integer_hardswish
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.preactivations.algorithm import gained, integer_preactivations
from trtpipe.optimize.passes.scale_depthwise import carried_gains, find_carries, find_sites, scale_depthwise
from trtpipe.vocab import CalibMethod, Target

RNG = np.random.default_rng(23)
CHANNELS = 8


def _conv_hardswish_depthwise(project: bool = True) -> onnx.ModelProto:
    """Conv 3->8 (output channels scaled 0.1x to 16x, as BatchNorm folding leaves PP-PicoDet's stem) -> HardSwish
    -> depthwise 3x3 [-> Conv 1x1 8->4]."""
    spread = np.logspace(-1, 1.2, CHANNELS).astype(np.float32)
    inits = [constant(RNG.standard_normal((CHANNELS, 3, 3, 3)) * spread[:, None, None, None], "w1"),
             constant(RNG.standard_normal(CHANNELS) * spread * 0.5, "b1"),
             constant(RNG.standard_normal((CHANNELS, 1, 3, 3)), "w2"),
             constant(RNG.standard_normal((4, CHANNELS, 1, 1)), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["pre"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["pre"], ["act"], name="hswish"),
             helper.make_node("Conv", ["act", "w2"], ["dw" if project else "y"], name="depthwise", pads=[1, 1, 1, 1],
                              group=CHANNELS)]
    if project:
        nodes.append(helper.make_node("Conv", ["dw", "w3"], ["y"], name="project"))
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4 if project else CHANNELS, 8, 8], name="carry")


def _batches(count: int = 4) -> list[np.ndarray]:
    return [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(count)]


def _carried(model: onnx.ModelProto, batches: list[np.ndarray]) -> onnx.ModelProto:
    sites = find_sites(model)
    carries = find_carries(model, sites)
    bounds = channel_bounds(model, [c.preactivation for c in carries], batches)
    carried = {c.site.tensor: carried_gains(*bounds[c.preactivation]) for c in carries}
    scaled, _ = scale_depthwise(model, channel_ranges(model, [s.tensor for s in sites], batches), carried)
    return scaled


def test_the_gain_goes_into_the_convolution_and_the_function_stays() -> None:
    model, batches = _conv_hardswish_depthwise(), _batches()
    assert [c.conv.name for c in find_carries(model, find_sites(model))] == ["conv1"]
    low, high = channel_bounds(model, ["pre"], batches)["pre"]
    gains = carried_gains(low, high)
    assert gains is not None and gains.max() / gains.min() > 50
    np.testing.assert_allclose(EXACT_LEVELS / gains, np.round(EXACT_LEVELS / gains), atol=1e-9)  # 255 / k
    scaled = _carried(model, batches)
    inverse = [n for n in scaled.graph.node if n.name.endswith(INVERSE_SUFFIX)]
    assert len(inverse) == 1 and inverse[0].output[0] == "pre"
    weights = {t.name: numpy_helper.to_array(t) for t in scaled.graph.initializer}
    original = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    np.testing.assert_allclose(weights["w1"], original["w1"] * gains[:, None, None, None].astype(np.float32),
                               rtol=1e-6)
    x = RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(scaled, x), run(model, x), rtol=1e-4, atol=1e-4)
    # the convolution's output: each channel's interval HardSwish responds to ([-3, max]) now has about one width
    carried_low, carried_high = channel_bounds(scaled, [inverse[0].input[0]], batches)[inverse[0].input[0]]
    widths = np.maximum(carried_high, 0) - np.maximum(np.minimum(carried_low, 0), -3 * gains)
    assert widths.max() / widths.min() < 2.5, widths


def test_other_targets_and_shared_activations_are_not_carried() -> None:
    model = _conv_hardswish_depthwise()
    model.graph.node.append(helper.make_node("Relu", ["act"], ["side"], name="other_reader"))
    model.graph.output.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, ["n", CHANNELS, 8, 8]))
    assert find_carries(model, find_sites(model)) == []


def test_the_carried_preactivation_is_narrowed_channel_by_channel() -> None:
    """Through Mul(1/g) HardSwish responds on [-3 g_c, inf) per channel: one bound for the tensor would have to
    reach the widest -3 g; the per-channel bounds of the calibration data give the interval that is used."""
    model, batches = _conv_hardswish_depthwise(), _batches()
    scaled = _carried(model, batches)
    carried = next(n.input[0] for n in scaled.graph.node if n.name.endswith(INVERSE_SUFFIX))
    gains = 1.0 / next(numpy_helper.to_array(t) for t in scaled.graph.initializer
                       if t.name.endswith(f"{INVERSE_SUFFIX}_value")).ravel()
    intervals = channel_intervals(scaled)
    np.testing.assert_allclose(intervals[carried][0], -3.0 * gains, rtol=1e-6)
    assert responsive_intervals(scaled)[carried][0] == -3.0 * gains.max()
    ranges = calibrate(scaled, batches, CalibMethod.MINMAX, symmetric=False)
    bounds = channel_bounds(scaled, [carried], batches)
    narrowed = narrowed_per_channel(ranges, intervals, bounds)[carried]
    low, _ = bounds[carried]
    expected_low = max(float(np.min(np.maximum(low, -3.0 * gains))), ranges[carried][0])
    np.testing.assert_allclose(narrowed, (expected_low, ranges[carried][1]), rtol=1e-6)
    assert narrowed[0] > ranges[carried][0]  # some channel went below its own -3 g
    negative = onnx.ModelProto()
    negative.CopyFrom(scaled)
    for tensor in negative.graph.initializer:
        if tensor.name.endswith(f"{INVERSE_SUFFIX}_value"):
            tensor.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(tensor), tensor.name))
    assert carried not in channel_intervals(negative)  # a negative scale flips the interval: not narrowed


def _cpu_int8(model: onnx.ModelProto, batches: list[np.ndarray]) -> onnx.ModelProto:
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    intervals = channel_intervals(model)
    ranges = narrowed_per_channel(ranges, intervals, channel_bounds(model, list(intervals), batches))
    return quantize(model, ranges, profile_for(Target.CPU))


def test_cpu_runs_the_carried_block_in_integer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Every op of Conv -> HardSwish -> gain -> depthwise -> Conv in integer (no float Mul, HardSwish or HardSigmoid
    left), and conformant."""
    model, batches = _conv_hardswish_depthwise(), _batches()
    scaled = _carried(model, batches)
    profile = profile_for(Target.CPU)
    assert integer_preactivations(scaled, profile) == ["hswish"] and gained(scaled, ["hswish"]) == []
    quantized = _cpu_int8(scaled, batches)
    assert "HardSwish" not in {n.op_type for n in quantized.graph.node}
    assert not [n.name for n in quantized.graph.node if n.name.endswith(GAIN_SUFFIX)]  # both gains are folded in
    assert check_model(quantized, Target.CPU).errors == []
    ops = cpu_optimized_ops(quantized, tmp_path)
    assert ops.count("QLinearConv") == 2 and ops.count("QLinearMul") == 2 and "QLinearAdd" in ops, ops
    assert not {"HardSwish", "HardSigmoid", "Mul"} & set(ops), ops


def test_the_carried_preactivation_brings_each_depthwise_channel_closer_to_fp32() -> None:
    """Each depthwise channel is its own answer: against FP32, closer with the gain carried than with the gain after
    the HardSwish only, whose pre-activation keeps the 160x channel spread in one uint8 scale."""
    model, batches = _conv_hardswish_depthwise(project=False), _batches()
    carried = _cpu_int8(_carried(model, batches), batches)
    uncarried, _ = scale_depthwise(model, channel_ranges(model, ["act"], batches))
    assert gained(uncarried, ["hswish"]) == ["hswish"]
    before = _cpu_int8(uncarried, batches)
    x = RNG.standard_normal((8, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)

    def per_channel_error(candidate: onnx.ModelProto) -> float:
        error = np.abs(run(candidate, x) - reference)
        return float((error.mean(axis=(0, 2, 3)) / np.abs(reference).mean(axis=(0, 2, 3))).mean())

    assert per_channel_error(carried) < per_channel_error(before) / 2, (per_channel_error(carried),
                                                                      per_channel_error(before))


def _quantized_carried(gains: np.ndarray, x_range: tuple[float, float]) -> onnx.ModelProto:
    """x' -> Identity -> Mul(1/g) -> Q/DQ (uint8) -> HardSwish -> Mul(g) -> Q/DQ: a carried gain as the cpu
    quantizer leaves it, on a [1, C, 256] tensor (one uint8 level of x' per position)."""
    channels = gains.size
    shape = (1, channels, 1)
    inits = [constant((1.0 / gains).reshape(shape), "inverse"), constant(gains.reshape(shape), "gain"),
             constant(np.array(0.02), "xs"), numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             constant(np.array(Y_SCALE), "ys"), numpy_helper.from_array(np.array(Y_ZERO, np.uint8), "yz")]
    nodes = [helper.make_node("Identity", ["x"], ["scaled"], name="writer"),
             helper.make_node("Mul", ["scaled", "inverse"], ["pre"], name=f"pre{INVERSE_SUFFIX}"),
             helper.make_node("QuantizeLinear", ["pre", "xs", "xz"], ["pre_q"], name="q_pre"),
             helper.make_node("DequantizeLinear", ["pre_q", "xs", "xz"], ["pre_dq"], name="dq_pre"),
             helper.make_node("HardSwish", ["pre_dq"], ["act"], name="hswish"),
             helper.make_node("Mul", ["act", "gain"], ["lifted"], name="act_channel_gain"),
             helper.make_node("QuantizeLinear", ["lifted", "ys", "yz"], ["lifted_q"], name="q_y"),
             helper.make_node("DequantizeLinear", ["lifted_q", "ys", "yz"], ["y"], name="dq_y")]
    return x_to_y(nodes, inits, [1, channels, 256], [1, channels, 256], name="carried")


Y_SCALE, Y_ZERO = 0.05, 20  # the lifted activation covers [-1, 11.75]


def test_every_level_of_the_carried_preactivation_lands_near_the_lifted_hardswish() -> None:
    """All 256 uint8 levels of x' for gains 1 to 255 through ONNX Runtime's integer kernels, against
    ``g * hardswish(x' / g)`` quantized by the same output Q (numpy): within one output step, plus the gate's own
    step (1/255 of x') where the gate is neither 0 nor 1."""
    gains = EXACT_LEVELS / np.array([255, 128, 51, 17, 5, 2, 1], np.float64)
    x_range = (-4.0, 6.0)
    model = _quantized_carried(gains.astype(np.float32), x_range)
    assert integer_hardswish(model, {"scaled": x_range}) == 1
    assert not {"HardSwish", "HardSigmoid"} & {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    scale = (x_range[1] - x_range[0]) / 255
    zero = np.round(-x_range[0] / scale)
    levels = ((np.arange(256) - zero) * scale).astype(np.float32)
    x = np.broadcast_to(levels, (1, gains.size, 256)).copy()
    got = run(model, x)[0]
    g = gains[:, None]
    exact = g * (levels / g) * np.clip(levels / g + 3, 0, 6) / 6
    reference = (np.clip(np.round(exact / Y_SCALE) + Y_ZERO, 0, 255) - Y_ZERO) * Y_SCALE
    gate_step = np.abs(levels)[None] / 255 + 1e-6
    assert np.all(np.abs(got - reference) <= Y_SCALE * 1.001 + gate_step), np.abs(got - reference).max()
    assert np.all(got[:, levels <= -3 * gains.min()][0] == 0.0)  # g = 1: at and below -3 the gate is exactly 0


def test_a_gain_that_is_not_255_over_k_keeps_its_hardswish() -> None:
    """1 / (6 g) would round in uint8: the rewrite leaves such a graph alone."""
    model = _quantized_carried(np.array([1.0, 3.3, 7.7], np.float32), (-4.0, 6.0))
    assert integer_hardswish(model, {"scaled": (-4.0, 6.0)}) == 0
    assert "HardSwish" in {n.op_type for n in model.graph.node}
