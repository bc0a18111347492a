"""int16 saturation of x86's non-VNNI u8 x s8 dot product, emulated in numpy: an artifact with full 8-bit weights
loses accuracy on such a CPU where one with 7-bit weights (reduce_range) computes exactly what VNNI does."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import onnx_model, tensor, x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.qdq.saturation_emulation import emulate, emulated, saturated_pairs, u8s8_dot
from trtpipe.vocab import CalibMethod, Target

RNG = np.random.default_rng(40)
CLASSES = 8


def _segmenter() -> onnx.ModelProto:
    """Conv -> Relu -> Conv over [N, 3, 12, 12], per-pixel scores for 8 classes. The first convolution's outputs sit
    high in their range (a large bias, small weights), so its uint8 activations are mostly near 255; half of the
    second convolution's output channels have all their weights large and of one sign (adjacent pairs of products
    leave int16 with full 8-bit weights), the other half only a few (they do not), and each class's bias centres its
    score, so a class wins a pixel by its fluctuation: clipping the first half's sums hands their pixels to the
    second half."""
    signs = np.where(RNG.random((CLASSES, 1, 1, 1)) < 0.5, -1.0, 1.0)
    magnitudes = RNG.uniform(0.5, 1.0, (CLASSES, 16, 3, 3))
    magnitudes[: CLASSES // 2] *= np.where(RNG.random((CLASSES // 2, 16, 3, 3)) < 0.1, 1.0, 0.05)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in (
        (RNG.standard_normal((16, 3, 3, 3)) * 0.1, "w1"), (np.full(16, 3.0), "b1"),
        (signs * magnitudes / 16, "w2"), (np.zeros(CLASSES), "b2"))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["scores"], name="conv2", pads=[1, 1, 1, 1])]
    model = onnx_model(nodes, inits, [tensor("x", [None, 3, 12, 12])], [tensor("scores", [None, CLASSES, 12, 12])],
                       name="saturating", opset=13, ir_version=None)
    centre = run(model, RNG.standard_normal((8, 3, 12, 12)).astype(np.float32)).mean(axis=(0, 2, 3))
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(-centre.astype(np.float32), "b2"))
    return model


def _agreement(reference: np.ndarray, candidate: np.ndarray) -> float:
    """Share of pixels whose winning class is FP32's."""
    return float(np.mean(reference.argmax(axis=1) == candidate.argmax(axis=1)))


def test_a_pair_of_products_clips_at_int16_without_vnni_and_never_with_7_bit_weights() -> None:
    activations = np.array([[255, 255, 10, 10]], dtype=np.uint8)
    weights = np.array([[127, 127, 1, 1], [63, 63, 1, 1]], dtype=np.int8)
    assert u8s8_dot(activations, weights, vnni=True).tolist() == [[64790, 32150]]
    assert u8s8_dot(activations, weights, vnni=False).tolist() == [[32767 + 20, 32150]]  # the 8-bit pair clipped
    worst = np.full((1, 64), 255, np.uint8)
    assert saturated_pairs(worst, np.full((1, 64), 63, np.int8)) == 0  # 7-bit weights: 2 x 255 x 63 fits int16
    assert saturated_pairs(worst, np.full((1, 64), -64, np.int8)) == 0
    assert saturated_pairs(worst, np.full((1, 64), 127, np.int8)) == 32


def test_8_bit_weights_lose_accuracy_without_vnni_where_7_bit_weights_keep_it() -> None:
    model = _segmenter()
    calibration = [RNG.standard_normal((8, 3, 12, 12)).astype(np.float32) for _ in range(4)]
    ranges = calibrate(model, calibration, CalibMethod.MINMAX, symmetric=False)
    x = RNG.standard_normal((16, 3, 12, 12)).astype(np.float32)
    reference = run(model, x)
    cpu = profile_for(Target.CPU)
    full = quantize(model, ranges, replace(cpu, reduce_range=False))
    reduced = quantize(model, ranges, replace(cpu, reduce_range=True))
    assert emulated(full)[1] == 2  # both convolutions read uint8 through Q/DQ
    # The emulation with VNNI is the integer arithmetic ONNX Runtime runs on this file.
    full_vnni = emulate(full, {"x": x}, vnni=True)[0]
    np.testing.assert_allclose(full_vnni, run(full, x), atol=0.02 * np.abs(reference).max())
    full_avx2 = emulate(full, {"x": x}, vnni=False)[0]
    reduced_vnni, reduced_avx2 = (emulate(reduced, {"x": x}, vnni=v)[0] for v in (True, False))
    np.testing.assert_array_equal(reduced_avx2, reduced_vnni)  # 7-bit weights: nothing clips, bit for bit
    assert _agreement(reference, full_vnni) >= 0.95
    assert _agreement(reference, reduced_avx2) >= 0.9
    assert _agreement(reference, full_avx2) < _agreement(reference, reduced_avx2) - 0.15, (
        _agreement(reference, full_avx2), _agreement(reference, reduced_avx2))


@pytest.mark.parametrize("target", [Target.CPU, Target.OPENVINO])  # ONNX Runtime's and OpenVINO's flavours
def test_7_bit_weights_stop_at_the_layers_that_saturate_depthwise_keeps_8_bits(target: Target) -> None:
    """Depthwise kernels widen to 16 bits before multiplying and never add products in int16 pairs, so a profile
    asking for 7-bit weights (a CPU without VNNI) still gives depthwise convolutions all 8 bits; the pointwise
    convolution after it, which goes through the pairs, stays at 7."""
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in (
        (RNG.standard_normal((8, 1, 3, 3)), "w_dw"), (RNG.standard_normal(8), "b_dw"),
        (RNG.standard_normal((4, 8, 1, 1)), "w_pw"), (RNG.standard_normal(4), "b_pw"))]
    nodes = [helper.make_node("Conv", ["x", "w_dw", "b_dw"], ["d"], name="depthwise", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["d"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w_pw", "b_pw"], ["y"], name="pointwise")]
    model = x_to_y(nodes, inits, [None, 8, 8, 8], [None, 4, 8, 8], name="separable", opset=13, ir_version=None)
    ranges = calibrate(model, [RNG.standard_normal((4, 8, 8, 8)).astype(np.float32)], CalibMethod.MINMAX,
                       symmetric=False)
    reduced = quantize(model, ranges, replace(profile_for(target), reduce_range=True))
    integers = {t.name: numpy_helper.to_array(t) for t in reduced.graph.initializer if t.data_type == TensorProto.INT8}
    largest = {name.split("_quantized")[0]: int(np.abs(v.astype(np.int32)).max()) for name, v in integers.items()}
    assert largest["w_dw"] == 127 and largest["w_pw"] <= 64, largest
    x = RNG.standard_normal((2, 8, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(emulate(reduced, {"x": x}, vnni=False)[0], emulate(reduced, {"x": x}, vnni=True)[0])
