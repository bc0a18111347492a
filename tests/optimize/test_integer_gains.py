"""scale_depthwise's float channel gains on the cpu target: folded into the integer convolution that writes their
input, where the ReLU6 the quantizer folded into its Q is clamped the same; a gain on a quantized tensor no
convolution writes (after a MaxPool) folded into the depthwise convolution that reads it; no float pass left, the
outputs no worse; a gain read by any other op stays float."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from tests.builders import constant, cpu_optimized_ops, minmax_int8, x_to_y
from tests.optimize.conftest import run
from trtpipe.optimize.graph.gains import GAIN, mark
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.vocab import CpuClass, Target

RNG = np.random.default_rng(23)
CHANNELS = 8


def _gained(between: str, *, side: str | None = None) -> onnx.ModelProto:
    """x -> Conv (channels whose ranges lie up to 200x apart) -> ReLU6 [-> MaxPool] -> Mul(g) -> depthwise Conv ->
    Relu -> 1x1 Conv -> y, with g lifting every channel to the widest one's range on the calibration data, as
    scale_depthwise writes it; ``side``: a second, dense 1x1 convolution reads the tensor before the gain
    (``"before"``: as in ShuffleNetV2's downsampling units, whose two branches read one shuffled tensor) or the gained
    one (``"gained"``), its output added to y."""
    weights = RNG.standard_normal((CHANNELS, 4, 3, 3)) * 0.3 * np.geomspace(1.0, 1 / 200, CHANNELS)[:, None, None, None]
    depthwise = RNG.standard_normal((CHANNELS, 1, 3, 3)) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["a", "zero", "six"], ["act"], name="relu6")]
    if between == "maxpool":
        nodes.append(helper.make_node("MaxPool", ["act"], ["pooled"], name="pool", kernel_shape=[3, 3],
                                      pads=[1, 1, 1, 1]))
    tensor = nodes[-1].output[0]
    inits = [constant(weights, "w"), constant(0.0, "zero"), constant(6.0, "six")]
    probe = x_to_y(nodes, inits, [1, 4, 12, 12], [1, CHANNELS, 12, 12], name="probe")
    probe.graph.output[0].name = tensor
    widest = np.max([run(probe, batch) for batch in _calibration()], axis=(0, 1, 3, 4))
    gains = np.clip(widest.max() / widest, 1.0, 1024.0)
    nodes += [mark(helper.make_node("Mul", [tensor, "g"], ["gained"], name="act_channel_gain"), GAIN),
              helper.make_node("Conv", ["gained", "dw"], ["d"], name="depthwise", pads=[1, 1, 1, 1], group=CHANNELS),
              helper.make_node("Relu", ["d"], ["dr"], name="relu"),
              helper.make_node("Conv", ["dr", "pw"], ["p" if side else "y"], name="pointwise")]
    inits += [constant(depthwise / gains[:, None, None, None], "dw"), constant(gains.reshape(1, CHANNELS, 1, 1), "g"),
              constant(RNG.standard_normal((CHANNELS, CHANNELS, 1, 1)) * 0.3, "pw")]
    if side:
        nodes += [helper.make_node("Conv", [tensor if side == "before" else "gained", "pw2"], ["side"], name="side"),
                  helper.make_node("Add", ["p", "side"], ["y"], name="join")]
        inits.append(constant(RNG.standard_normal((CHANNELS, CHANNELS, 1, 1)) * 0.3, "pw2"))
    return x_to_y(nodes, inits, [1, 4, 12, 12], [1, CHANNELS, 12, 12], name=f"gained_{between}")


def _calibration() -> list[np.ndarray]:
    return [np.random.default_rng(seed).standard_normal((1, 4, 12, 12)).astype(np.float32) * 3 for seed in range(16)]


def _quantized(model: onnx.ModelProto, *, integer_gains: bool) -> onnx.ModelProto:
    profile = dataclasses.replace(profile_for(Target.CPU, CpuClass.AVX512_VNNI), integer_gains=integer_gains)
    return minmax_int8(model, _calibration(), profile, symmetric=False)


def _no_float_pass_and_no_worse(model: onnx.ModelProto, tmp_path: Path, convolutions: int) -> onnx.ModelProto:
    """The model quantized with and without integer gains: the float Mul the first has is gone from the second
    (every convolution a QLinearConv), whose output is as close to FP32 (one rounding fewer). The second."""
    before = _quantized(model, integer_gains=False)
    after = _quantized(model, integer_gains=True)
    assert "Mul" in cpu_optimized_ops(before, tmp_path)  # the float pass this removes
    ops = cpu_optimized_ops(after, tmp_path)
    assert "Mul" not in ops and ops.count("QLinearConv") == convolutions, ops
    assert not any(n.name == "act_channel_gain" for n in after.graph.node)
    x = np.random.default_rng(99).standard_normal((8, 1, 4, 12, 12)).astype(np.float32) * 3
    reference = np.concatenate([run(model, sample) for sample in x])
    with_float_gain = np.concatenate([run(before, sample) for sample in x])
    with_integer_gain = np.concatenate([run(after, sample) for sample in x])
    error_before, error_after = (np.abs(v - reference).mean() for v in (with_float_gain, with_integer_gain))
    assert error_after <= 1.1 * error_before, (error_before, error_after)
    assert error_before < 0.05 * np.abs(reference).mean()  # and the float-gain file was a faithful one to compare
    return after


def test_a_gain_after_a_relu6_folds_into_the_convolution_and_the_outputs_are_no_worse(tmp_path: Path) -> None:
    """The gain goes into the first convolution's scales: it and the depthwise one run as QLinearConv, no float Mul
    between them, and the output is as close to FP32 as the float-gain file's (one rounding fewer)."""
    _no_float_pass_and_no_worse(_gained("nothing"), tmp_path, convolutions=2)


def test_a_gain_after_an_op_no_convolution_writes_folds_into_the_depthwise_convolution_that_reads_it(
        tmp_path: Path) -> None:
    """A MaxPool between the ReLU6 and the gain (as a Concat or a channel shuffle is in ShuffleNetV2 and GhostNet),
    its output read by a dense convolution too: the pooled tensor is quantized on one scale for that one already, so
    the gain goes back into the depthwise weights' scales and the depthwise convolution reads the pooled tensor's
    own Q/DQ."""
    after = _no_float_pass_and_no_worse(_gained("maxpool", side="before"), tmp_path, convolutions=2)
    producer = {out: n for n in after.graph.node for out in n.output}
    depthwise = next(n for n in after.graph.node if n.name == "depthwise")
    assert producer[producer[depthwise.input[0]].input[0]].input[0] == "pooled"  # DQ <- Q <- the pooled tensor


def test_a_gain_after_an_op_without_per_channel_scales_stays_a_float_mul_where_other_ops_read_it() -> None:
    """A MaxPool between the ReLU6 and the gain (no convolution writes the gained tensor), and the gained tensor
    feeds a dense 1x1 convolution too, whose weights hold no per-output-channel place for g: nothing folds, either
    way."""
    after = _quantized(_gained("maxpool", side="gained"), integer_gains=True)
    assert any(n.name == "act_channel_gain" and n.op_type == "Mul" for n in after.graph.node)
