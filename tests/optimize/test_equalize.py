"""Cross-layer equalization on tiny graphs: the network computes the same function (a ReLU6 included), each pair's
per-channel weight ranges end equal as the closed form says, and INT8 of the equalized graph is closer to FP32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.builders import x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.graph.activations import channel_ranges
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.passes.equalize import equalize, find_pairs, pair_ranges
from trtpipe.vocab import CalibMethod, Target

RNG = np.random.default_rng(1)
# Output channels of the first layer span four decades: what per-tensor activation scales cannot take.
SPREAD = np.logspace(-2, 1.5, 8).astype(np.float32)


def _spread_channels_block() -> onnx.ModelProto:
    """Conv 3->8 (channel ranges 0.01..30) -> ReLU6 -> depthwise 3x3 -> Relu -> Conv 1x1 8->4."""
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * SPREAD[:, None, None, None]
    b1 = RNG.standard_normal(8).astype(np.float32) * SPREAD
    w2 = RNG.standard_normal((8, 1, 3, 3)).astype(np.float32) / SPREAD[:, None, None, None]
    w3 = RNG.standard_normal((4, 8, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.zeros(8, np.float32), "b2"), (w3, "w3"),
              (np.array(0, np.float32), "lo"), (np.array(6, np.float32), "hi"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="depthwise", pads=[1, 1, 1, 1], group=8),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu"),
        helper.make_node("Conv", ["a2", "w3"], ["y"], name="project"),
    ]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4, 8, 8], opset=18)


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_both_pairs_found_through_relu6_and_relu() -> None:
    pairs = find_pairs(_spread_channels_block())
    assert [(p.first.name, p.second.name) for p in pairs] == [("conv1", "depthwise"), ("depthwise", "project")]
    assert pairs[0].clip_bound == 6.0 and pairs[1].clip_bound is None


def test_same_function_with_the_relu6_clipping() -> None:
    model = _spread_channels_block()
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) * 3
    before = run(model, x)
    equalized, _ = equalize(model)
    onnx.checker.check_model(equalized)
    # The ReLU6 really clips on these inputs, so a plain Relu in its place would change the result.
    activations = np.abs(_weights(model)["w1"]).sum(axis=(1, 2, 3)) * 3
    assert (activations > 6).any()
    assert "Clip" not in {n.op_type for n in equalized.graph.node}
    np.testing.assert_allclose(run(equalized, x), before, rtol=1e-4, atol=1e-4 * np.abs(before).max())


def test_one_round_matches_the_closed_form() -> None:
    """s_i = sqrt(r1_i / r2_i): after one round of the first pair, both layers' channel ranges are sqrt(r1 r2)."""
    model = _spread_channels_block()
    w = _weights(model)
    r1 = np.abs(w["w1"]).max(axis=(1, 2, 3))
    r2 = np.abs(w["w2"]).max(axis=(1, 2, 3))
    equalized, pairs = equalize(model, rounds=1)
    after = _weights(equalized)
    expected = np.sqrt(r1 * r2)
    np.testing.assert_allclose(np.abs(after["w1"]).max(axis=(1, 2, 3)), expected, rtol=1e-5)
    np.testing.assert_allclose(after["b1"], w["b1"] / np.sqrt(r1 / r2), rtol=1e-5)
    # The depthwise layer was rescaled as the first pair's second layer, then as the second pair's first.
    np.testing.assert_allclose(pairs[0].scale, np.sqrt(r1 / r2), rtol=1e-5)


CALIB = [RNG.standard_normal((8, 3, 8, 8)).astype(np.float32) for _ in range(2)]


def test_data_aware_mode_gives_the_depthwise_input_one_range() -> None:
    """Into a depthwise layer every channel is scaled to the widest one: the first layer's output channels (their
    positive part, before the ReLU6) end with one range."""
    model = _spread_channels_block()
    ranges = pair_ranges(model, CALIB, after_activation=False)
    equalized, pairs = equalize(model, activation_ranges=ranges)
    first_output = pairs[0].first.output[0]
    after = channel_ranges(equalized, [first_output], CALIB, positive={first_output})
    np.testing.assert_allclose(after[first_output], ranges[first_output].max(), rtol=1e-4)
    x = RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) * 3
    np.testing.assert_allclose(run(equalized, x), run(model, x), rtol=1e-4, atol=1e-4 * np.abs(run(model, x)).max())


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.CPU])
def test_int8_of_the_equalized_graph_is_closer_to_fp32(target: Target) -> None:
    model = _spread_channels_block()
    x = RNG.standard_normal((16, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    profile = profile_for(target)
    errors = []
    ranges = pair_ranges(model, CALIB, after_activation=target is Target.TENSORRT)
    for candidate in (model, equalize(model, activation_ranges=ranges)[0]):
        ranges = calibrate(candidate, CALIB, CalibMethod.MINMAX, symmetric=profile.symmetric_activations)
        errors.append(np.abs(run(quantize(candidate, ranges, profile), x, "disable") - reference).mean())
    assert errors[1] < 0.5 * errors[0]


def test_pass_records_what_it_did(digits_onnx: Path, tmp_path: Path) -> None:
    from trtpipe.artifact.records.manifest import read_manifest
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize

    out = tmp_path / "eq.onnx"
    optimize(digits_onnx, out, OptimizeOptions(passes=("fuse", "equalize"), eval="digits"))
    details = read_manifest(out).details["equalize"]
    assert details["pairs"] > 0 and "digits" in details["probe"]
    assert details["verification"]["cosine"] > 0.99999


def test_a_shared_weight_is_left_alone() -> None:
    """Two convolutions reading one weight initializer: rescaling it for one pair would change the other."""
    model = _spread_channels_block()
    model.graph.node[4].input[1] = "w1_again"
    w1 = _weights(model)["w1"]
    model.graph.initializer.append(numpy_helper.from_array(w1[:4, :1].repeat(8, axis=1)[:, :8], "w1_again"))
    assert [(p.first.name, p.second.name) for p in find_pairs(model)] == [("conv1", "depthwise"),
                                                                          ("depthwise", "project")]
    model.graph.node[2].input[1] = "w1"  # depthwise now shares conv1's weight (shape aside: never run)
    assert find_pairs(model) == []


def test_tensorrt_mode_gives_the_quantized_depthwise_input_one_range() -> None:
    """For TensorRT the quantized tensor is the depthwise layer's input, after the ReLU6: its channels end equal."""
    model = _spread_channels_block()
    ranges = pair_ranges(model, CALIB, after_activation=True)
    equalized, pairs = equalize(model, activation_ranges=ranges)
    middle = pairs[0].second.input[0]
    after = channel_ranges(equalized, [middle], CALIB)[middle]
    np.testing.assert_allclose(after, after.max(), rtol=1e-4)
    np.testing.assert_allclose(after.max(), ranges[pairs[0].first.output[0]].max(), rtol=1e-4)


def _relu6_into_full_convolution() -> onnx.ModelProto:
    """Conv 3->8 (channel ranges 0.01..30, the wide ones clipped) -> ReLU6 -> Conv 1x1 8->8 -> Relu -> Conv 1x1 8->4:
    MobileNetV2's expansion into its projection, where the full convolution's balancing gives channels unequal
    ranges after scaling."""
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * SPREAD[:, None, None, None]
    w2 = RNG.standard_normal((8, 8, 1, 1)).astype(np.float32) / np.sqrt(SPREAD)[None, :, None, None]
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (w2, "w2"), (RNG.standard_normal((4, 8, 1, 1)).astype(np.float32), "w3"),
              (np.array(0, np.float32), "lo"), (np.array(6, np.float32), "hi"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["a1"], name="relu6"),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], name="expand"),
        helper.make_node("Relu", ["c2"], ["a2"], name="relu"),
        helper.make_node("Conv", ["a2", "w3"], ["y"], name="project"),
    ]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4, 8, 8], opset=18)


def test_cpu_bounds_stay_above_the_top_and_the_min_leaves_the_integer_file(tmp_path: Path) -> None:
    """For the cpu target every ReLU6 bound of an equalized pair lies at or above the tensor's widest scaled range,
    so the Min the ReLU6 became is the Q's own clamp: the quantized file has none (ONNX Runtime has no integer Min:
    MobileNetV2's 34 ran in float, its INT8 file at 0.7x FP32), computes what FP32 does, and is no less accurate than
    the file that kept it."""
    import dataclasses

    from tests.builders import cpu_optimized_ops, minmax_int8

    model = _relu6_into_full_convolution()
    x = RNG.standard_normal((16, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    assert (channel_ranges(model, ["c1"], CALIB)["c1"] > 6).any()  # the ReLU6 clips on the calibration data
    ranges = pair_ranges(model, CALIB, after_activation=False, capped=True)
    equalized, pairs = equalize(model, activation_ranges=ranges, bounds_above_top=True)
    np.testing.assert_allclose(run(equalized, x), reference, rtol=1e-4, atol=1e-4 * np.abs(reference).max())
    scaled = channel_ranges(equalized, ["a1"], CALIB)["a1"]
    bounds = _weights(equalized)["relu6_equalized_bound"].reshape(-1)
    assert np.all(bounds >= scaled.max() * (1 - 1e-5)) and pairs[0].clip_bound == 6.0
    profile = profile_for(Target.CPU)
    folded = minmax_int8(equalized, CALIB, profile, symmetric=False)
    kept = minmax_int8(equalized, CALIB, dataclasses.replace(profile, integer_gains=False), symmetric=False)
    assert "Min" not in cpu_optimized_ops(folded, tmp_path) and "Min" in cpu_optimized_ops(kept, tmp_path)
    error_folded, error_kept = (np.abs(run(m, x) - reference).mean() for m in (folded, kept))
    assert error_folded <= 1.1 * error_kept, (error_folded, error_kept)


def test_a_bound_below_the_q_top_keeps_its_min() -> None:
    """Equalized without keeping bounds above the top (the tensorrt target's choice of scales), some channel's bound
    lies below what the per-tensor Q holds: removing the Min would change those channels, so it stays."""
    model = _relu6_into_full_convolution()
    equalized, _ = equalize(model, activation_ranges=pair_ranges(model, CALIB, after_activation=False))
    bounds = _weights(equalized)["relu6_equalized_bound"].reshape(-1)
    assert bounds.min() < channel_ranges(equalized, ["a1"], CALIB)["a1"].max()
    from tests.builders import minmax_int8

    quantized = minmax_int8(equalized, CALIB, profile_for(Target.CPU), symmetric=False)
    assert "Min" in {node.op_type for node in quantized.graph.node}
