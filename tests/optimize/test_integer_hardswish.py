"""HardSwish between uint8 Q/DQ on the cpu target: rewritten into QLinearAdd/QLinearMul-shaped Q/DQ that ONNX
Runtime runs in integer, within one output step of HardSwish computed on the dequantized input, and only where
nothing float reads it."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import conv_hardswish, conv_hardswish_ranges, cpu_optimized_ops, x_to_y
from tests.optimize.conftest import run
from trtpipe.conformance.check import check_model
from trtpipe.optimize.int8.qdq.integer_hardswish import integer_hardswish
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.vocab import Target

RNG = np.random.default_rng(11)
CONV_RNG = np.random.default_rng(5)  # conv_hardswish's weights and calibration data
X_SCALE, X_ZERO = 0.05, 100  # uint8 x covers [-5, 7.75]: both of HardSwish's kinks and its curved part
Y_SCALE, Y_ZERO = 0.04, 10


def _qdq_hardswish(x_zero_type: int = TensorProto.UINT8, reader: str = "QuantizeLinear") -> onnx.ModelProto:
    """x -> Q/DQ (uint8) -> HardSwish -> Q/DQ: the activation as the cpu target's placement leaves it."""
    zero = np.uint8 if x_zero_type == TensorProto.UINT8 else np.int8
    inits = [numpy_helper.from_array(np.array(X_SCALE, np.float32), "xs"),
             numpy_helper.from_array(np.array(X_ZERO if zero is np.uint8 else 0, zero), "xz"),
             numpy_helper.from_array(np.array(Y_SCALE, np.float32), "ys"),
             numpy_helper.from_array(np.array(Y_ZERO, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             helper.make_node("HardSwish", ["xd"], ["h"], name="hswish")]
    if reader == "QuantizeLinear":
        nodes += [helper.make_node("QuantizeLinear", ["h", "ys", "yz"], ["hq"], name="qy"),
                  helper.make_node("DequantizeLinear", ["hq", "ys", "yz"], ["y"], name="dqy")]
    else:
        nodes.append(helper.make_node("Identity", ["h"], ["y"], name="float_reader"))
    return x_to_y(nodes, inits, [1, 64], [1, 64], name="qdq_hswish")


def test_every_uint8_input_level_lands_within_one_output_step_of_hardswish(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """All 256 levels of x through ONNX Runtime's integer kernels, against HardSwish of the dequantized level
    quantized by the same output Q (numpy, the reference computation)."""
    model = _qdq_hardswish()
    assert integer_hardswish(model) == 1
    assert "HardSwish" not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    ops = cpu_optimized_ops(model, tmp_path)
    assert {"QLinearAdd", "QLinearMul"} <= set(ops) and not {"HardSwish", "HardSigmoid"} & set(ops), ops
    levels = (np.arange(256, dtype=np.float32) - X_ZERO) * X_SCALE
    got = np.concatenate([run(model, chunk[None]) for chunk in levels.reshape(4, 64)], axis=None)
    exact = levels * np.clip(levels + 3, 0, 6) / 6
    reference = (np.clip(np.round(exact / Y_SCALE) + Y_ZERO, 0, 255) - Y_ZERO) * Y_SCALE
    assert np.abs(got - reference).max() <= Y_SCALE * 1.001, np.abs(got - reference).max()
    assert np.all(got[levels <= -3] == 0.0)  # the clip at -3 is exact: the Q saturates at 0
    np.testing.assert_allclose(got[levels >= 3], reference[levels >= 3], atol=Y_SCALE * 1.001)


@pytest.mark.parametrize(("zero_type", "reader"), [(TensorProto.INT8, "QuantizeLinear"),
                                                   (TensorProto.UINT8, "Identity")])
def test_signed_inputs_and_float_readers_keep_the_hardswish(zero_type: int, reader: str) -> None:
    """int8 x (not the cpu scheme) or a reader that takes the float value: nothing to gain, nothing rewritten."""
    model = _qdq_hardswish(zero_type, reader)
    assert integer_hardswish(model) == 0
    assert "HardSwish" in {n.op_type for n in model.graph.node}


def test_cpu_quantization_runs_the_activation_in_integer_close_to_fp32(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Conv -> HardSwish -> Conv through the cpu profile: no float HardSwish left for ONNX Runtime, its output as
    close to the FP32 reference as with the float activation, and every conformance rule of the target kept."""
    model = conv_hardswish(CONV_RNG)
    ranges = conv_hardswish_ranges(model, CONV_RNG)
    profile = profile_for(Target.CPU)
    assert profile.integer_hardswish
    integer = quantize(model, ranges, profile)
    floated = quantize(model, ranges, dataclasses.replace(profile, integer_hardswish=False))
    ops = cpu_optimized_ops(integer, tmp_path)
    assert "QLinearMul" in ops and "HardSwish" not in ops and "HardSigmoid" not in ops, ops
    assert check_model(integer, Target.CPU).passed
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) * 2
    reference = run(model, x)
    error, float_error = (np.abs(run(m, x) - reference).mean() for m in (integer, floated))
    assert error <= 1.1 * float_error + 1e-4, (error, float_error)


@pytest.mark.parametrize("target", [Target.TENSORRT, Target.OPENVINO])
def test_other_targets_keep_hardswish(target: Target) -> None:
    """TensorRT and OpenVINO fuse the HardSwish into the convolution before it."""
    model = conv_hardswish(CONV_RNG)
    quantized = quantize(model, conv_hardswish_ranges(model, CONV_RNG), profile_for(target))
    assert "HardSwish" in {n.op_type for n in quantized.graph.node}
