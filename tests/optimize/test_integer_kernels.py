"""The cpu INT8 file runs its convolutions in integer on ONNX Runtime: a SiLU between two convolutions (YOLOX's,
YOLOv5's and YOLOv8's activation) no longer leaves them in float between their Q/DQ, and optimize says how many
convolutions ONNX Runtime really runs in integer after its own graph optimisations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from trtpipe.intervals import Interval
from trtpipe.optimize.checks import speed_check
from trtpipe.optimize.checks.kernels import kernel_count
from trtpipe.optimize.checks.speed_check import SpeedCheck
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.placement import float_nodes, swishes
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.vocab import CalibMethod, CpuClass, Precision, Target

RNG = np.random.default_rng(3)


def _silu_net() -> onnx.ModelProto:
    """Conv 3->8 -> SiLU -> Conv 8->8 -> SiLU -> Conv 8->4 -> y; and a Sigmoid gate that is no SiLU (the first SiLU's
    output times the sigmoid of the second's) before a last Conv 8->4 -> y2: the gate stays float."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (4, 8, 1, 1)), ("w4", (4, 8, 1, 1)),
              ("b1", (8,)), ("b2", (8,)), ("b3", (4,)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"], name="sigmoid1"),
        helper.make_node("Mul", ["c1", "s1"], ["a1"], name="silu1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c2"], ["s2"], name="sigmoid2"),
        helper.make_node("Mul", ["s2", "c2"], ["a2"], name="silu2"),  # the other operand order
        helper.make_node("Conv", ["a2", "w3", "b3"], ["y"], name="conv3"),
        helper.make_node("Sigmoid", ["a2"], ["gate"], name="gate_sigmoid"),
        helper.make_node("Mul", ["a1", "gate"], ["gated"], name="gate"),
        helper.make_node("Conv", ["gated", "w4"], ["y2"], name="conv4"),
    ]
    graph = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8]),
                               helper.make_tensor_value_info("y2", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_only_a_weighted_ops_silu_is_quantized() -> None:
    model = _silu_net()
    assert swishes(model.graph) == {"sigmoid1", "silu1", "sigmoid2", "silu2"}
    placed = float_nodes(model, profile_for(Target.CPU, CpuClass.AVX2))
    assert placed["gate_sigmoid"] == placed["gate"] == "outside-swish"
    assert not {"sigmoid1", "silu1", "sigmoid2", "silu2"} & set(placed)
    assert not set(float_nodes(model, profile_for(Target.TENSORRT))) & {"gate_sigmoid", "gate"}  # cpu's rule only


def test_convolutions_before_a_silu_run_in_integer_on_onnx_runtime() -> None:
    model = _silu_net()
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    quantized = quantize(model, ranges, profile_for(Target.CPU, CpuClass.AVX2))
    counted = kernel_count(quantized)
    # conv1 and conv2 write uint8 through their SiLU (QLinearSigmoid, QLinearMul); conv3 and conv4 write the float
    # graph outputs.
    assert counted.integer == {"QLinearConv": 2}
    assert counted.total == 4
    assert counted.line().startswith("ONNX Runtime runs 2 of 4 convolutions/matmuls in integer (2 QLinearConv)")


def _residual_silu_net() -> onnx.ModelProto:
    """Conv 3->8 -> SiLU -> a; Conv 8->8 of a, plus a (a residual join) -> SiLU -> Conv 8->4 -> y: the SiLU after
    the join, as timm's ResNeXt-26ts writes its blocks."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (4, 8, 1, 1)), ("b1", (8,)), ("b2", (8,)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c1"], ["s1"], name="sigmoid1"),
        helper.make_node("Mul", ["c1", "s1"], ["a1"], name="silu1"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "a1"], ["joined"], name="join"),
        helper.make_node("Sigmoid", ["joined"], ["s2"], name="sigmoid2"),
        helper.make_node("Mul", ["joined", "s2"], ["a2"], name="silu2"),
        helper.make_node("Conv", ["a2", "w3"], ["y"], name="conv3"),
    ]
    graph = helper.make_graph(nodes, "residual_silu",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_silu_after_a_residual_join_is_quantized_with_the_join() -> None:
    """The join's SiLU runs as QLinearSigmoid and QLinearMul and the Add as QLinearAdd, so every convolution reads
    and writes uint8 (with them float, ResNeXt-26ts ran at 0.83x quantize_static's file)."""
    model = _residual_silu_net()
    assert swishes(model.graph) == {"sigmoid1", "silu1", "sigmoid2", "silu2"}
    assert not {"sigmoid2", "silu2", "join"} & set(float_nodes(model, profile_for(Target.CPU, CpuClass.AVX2)))
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    quantized = quantize(model, ranges, profile_for(Target.CPU, CpuClass.AVX2))
    from trtpipe.runtime.onnxruntime.sessions import optimized_graph

    ops = {node.op_type for node in optimized_graph(quantized).graph.node}
    assert {"QLinearAdd", "QLinearSigmoid", "QLinearMul"} <= ops and "Add" not in ops
    assert kernel_count(quantized).integer == {"QLinearConv": 2}  # conv3 writes the float graph output


def _quantizable(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], opset: int,
                 name: str = "g") -> onnx.ModelProto:
    """The graph of ``nodes``, x [1, 3, 8, 8] -> y [1, 4, 8, 8]."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _quantized_for_cpu(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], name: str,
                      opset: int = 13) -> onnx.ModelProto:
    """The graph of ``nodes`` (x [1, 3, 8, 8] -> y [1, 4, 8, 8]) quantized for the cpu target on four random draws."""
    model = _quantizable(nodes, inits, opset, name)
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    return quantize(model, ranges, profile_for(Target.CPU, CpuClass.AVX2))


def test_a_split_between_convolutions_stays_uint8() -> None:
    """A multi-scale block's Split (Res2Net) takes its input's scale on every output, so ONNX Runtime splits uint8
    and no branch is dequantized and quantized again (with it float, Res2Net-50 ran at 0.91x quantize_static's)."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (4, 4, 3, 3)), ("w3", (4, 4, 3, 3)), ("w4", (4, 8, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Split", ["r1"], ["s1", "s2"], name="split", axis=1),
        helper.make_node("Conv", ["s1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["s2", "w3"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["c2", "c3"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w4"], ["y"], name="conv4"),
    ]
    quantized = _quantized_for_cpu(nodes, inits, "split")
    from trtpipe.runtime.onnxruntime.sessions import optimized_graph

    ran = optimized_graph(quantized).graph
    writer = {out: node.op_type for node in ran.node for out in node.output}
    assert not [node for node in ran.node if node.op_type == "QuantizeLinear" and writer.get(node.input[0]) == "Split"]
    assert kernel_count(quantized).integer == {"QLinearConv": 3}  # conv4 writes the float graph output


def test_a_convolution_sliced_into_two_paths_writes_uint8() -> None:
    """A dual-path block (DPN) slices a convolution's output into a residual part and a dense part that a Concat
    joins: with Slice quantized on its input's scale, the convolution writes uint8 and the Concat joins uint8 (with
    Slice float, 26 of DPN-68's 72 convolutions ran in float and its INT8 file was slower than FP32)."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (4, 12, 1, 1)))]
    inits += [numpy_helper.from_array(np.array(values, np.int64), name) for name, values in
              (("start0", [0]), ("start4", [4]), ("end4", [4]), ("end8", [8]), ("axis", [1]))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["c2", "start0", "end4", "axis"], ["residual"], name="slice_residual"),
        helper.make_node("Slice", ["c2", "start4", "end8", "axis"], ["dense"], name="slice_dense"),
        helper.make_node("Add", ["residual", "dense"], ["joined"], name="add"),
        helper.make_node("Concat", ["joined", "r1"], ["cat"], name="concat", axis=1),
        helper.make_node("Conv", ["cat", "w3"], ["y"], name="conv3"),
    ]
    quantized = _quantized_for_cpu(nodes, inits, "dual_path")
    assert kernel_count(quantized).integer == {"QLinearConv": 2}  # conv3 writes the float graph output


def test_a_convnext_block_runs_every_convolution_in_integer_and_its_head_transpose_stays_float() -> None:
    """ConvNeXt's block: a convolution, a channels-last LayerNorm between two Transposes, a pointwise convolution,
    the exact GELU (x * 0.5 * (1 + erf(x / sqrt 2)), as torch exports it), a pointwise convolution. With the
    Transposes and the GELU's Mul float, the convolutions before them wrote float (25 of ConvNeXt-atto's 41 ran in
    float, its INT8 file 0.68x FP32); now every one runs in integer. A Transpose laying out the graph output stays
    float, so the last convolution's output is not rounded to 256 levels."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (16, 8, 1, 1)), ("w3", (4, 16, 1, 1)), ("gamma", (8,)), ("beta", (8,)))]
    inits += [numpy_helper.from_array(np.array(value, np.float32), name) for name, value in
              (("root2", 1.4142135), ("one", 1.0), ("half", 0.5))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c1"], ["last"], name="to_channels_last", perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["last", "gamma", "beta"], ["normed"], name="norm", axis=-1),
        helper.make_node("Transpose", ["normed"], ["first"], name="to_channels_first", perm=[0, 3, 1, 2]),
        helper.make_node("Conv", ["first", "w2"], ["c2"], name="conv2"),
        helper.make_node("Div", ["c2", "root2"], ["scaled"], name="gelu_div"),
        helper.make_node("Erf", ["scaled"], ["erf"], name="gelu_erf"),
        helper.make_node("Add", ["erf", "one"], ["shifted"], name="gelu_add"),
        helper.make_node("Mul", ["half", "shifted"], ["gate"], name="gelu_half"),
        helper.make_node("Mul", ["c2", "gate"], ["gelu"], name="gelu_mul"),
        helper.make_node("Conv", ["gelu", "w3"], ["c3"], name="conv3"),
        helper.make_node("Transpose", ["c3"], ["y"], name="head_layout", perm=[0, 1, 3, 2]),
    ]
    quantized = _quantized_for_cpu(nodes, inits, "convnext_block", opset=17)
    assert kernel_count(quantized).integer == {"QLinearConv": 2}  # conv3 writes float for the head's Transpose
    writer = {out: node for node in quantized.graph.node for out in node.output}
    assert writer[writer["y"].input[0]].op_type == "Conv"  # the head's Transpose reads the float convolution output
    placed = float_nodes(_quantizable(nodes, inits, 17), profile_for(Target.CPU))
    assert {"gelu_add", "gelu_half", "head_layout"} <= set(placed) and "gelu_mul" not in placed  # only x * gate
    assert "to_channels_last" not in placed


def test_a_transpose_before_a_softmax_stays_float() -> None:
    """YOLOv8's box head lays its distribution's bins out with a Transpose before their Softmax: quantizing it would
    round the logits the Softmax sharpens, so it stays float (and the convolution before it writes float)."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (4, 8, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Transpose", ["c1"], ["bins_last"], name="bins_layout", perm=[0, 3, 2, 1]),
        helper.make_node("Softmax", ["bins_last"], ["probabilities"], name="softmax", axis=-1),
        helper.make_node("Transpose", ["probabilities"], ["back"], name="back_layout", perm=[0, 3, 2, 1]),
        helper.make_node("Conv", ["back", "w2"], ["y"], name="expectation"),
    ]
    assert "bins_layout" in float_nodes(_quantizable(nodes, inits, 13), profile_for(Target.CPU))


def test_convolutions_before_a_leaky_relu_run_in_integer() -> None:
    """ONNX Runtime runs a quantized LeakyRelu as QLinearLeakyRelu, so the convolution before it writes uint8 (with it
    float, 38 of CSPResNet-50's 56 convolutions ran in float between their Q/DQ: 0.60x its FP32 file)."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("w3", (4, 8, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c1"], ["a1"], name="leaky1", alpha=0.1),
        helper.make_node("Conv", ["a1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c2"], ["a2"], name="leaky2", alpha=0.1),
        helper.make_node("Conv", ["a2", "w3"], ["y"], name="conv3"),
    ]
    quantized = _quantized_for_cpu(nodes, inits, "leaky")
    assert kernel_count(quantized).integer == {"QLinearConv": 2}  # conv3 writes the float graph output


def test_the_fp32_file_runs_no_integer_kernel(tmp_path: Path) -> None:
    path = tmp_path / "fp32.onnx"
    onnx.save(_silu_net(), str(path))
    counted = kernel_count(path)
    assert counted.integer_total == 0 and counted.total == 4
    assert "0 of 4" in counted.line() and "in float:" in counted.line()


def test_optimize_says_what_onnx_runtime_runs_in_integer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, calib = tmp_path / "silu.onnx", tmp_path / "calib.npy"
    onnx.save(_silu_net(), str(source))
    np.save(calib, RNG.standard_normal((16, 3, 8, 8)).astype(np.float32))
    result = optimize(source, tmp_path / "int8.onnx", OptimizeOptions(
        precision=Precision.INT8, target=Target.CPU, cpu_class=CpuClass.AVX2, calib=str(calib)))
    checks = result.manifest.details["written_checks"]
    assert checks["loads"] == [{"runtime": "onnxruntime", "loaded": True}]
    assert checks["kernels"]["integer"] == {"QLinearConv": 2} and checks["kernels"]["total"] == 4
    speed = checks["speed_vs_fp32"]
    assert speed["interval"]["low"] <= speed["speedup"] <= speed["interval"]["high"]
    assert speed_check.ROUNDS <= speed["interval"]["units"] <= speed_check.MAX_ROUNDS and speed["batch"] == 1
    out = capsys.readouterr().err  # the console's notes go to stderr
    assert "ONNX Runtime runs 2 of 4 convolutions/matmuls in integer" in out
    assert "the speed of the FP32 file on ONNX Runtime here" in out


def test_slower_only_when_the_whole_interval_is_below_one() -> None:
    def check(low: float, high: float) -> SpeedCheck:
        return SpeedCheck(0.5 * (low + high), Interval(low, high, 5, "bootstrap"), 2, 1, 10.0, 9.0)

    assert check(0.72, 0.90).slower  # the detector before: its INT8 file 0.8x the FP32 file
    assert not check(0.9, 1.1).slower  # within the noise of no difference: not called slower
    assert "(median of 5 paired rounds of 3+ runs, 95 % 0.72-0.90x;" in check(0.72, 0.90).line("INT8", "FP32")


def test_the_line_says_when_the_rounds_cannot_separate_the_files_or_disagree() -> None:
    def check(low: float, high: float) -> SpeedCheck:
        return SpeedCheck(0.5 * (low + high), Interval(low, high, 7, "bootstrap"), 2, 1, 10.0, 9.0, 120)

    assert not check(0.9, 1.1).separated
    assert "unstable: its interval includes 1.0x" in check(0.9, 1.1).line("INT8", "FP32")
    assert "median of 7 paired rounds of 120+ runs" in check(1.2, 1.3).line("INT8", "FP32")
    assert check(1.2, 1.3).agreed and "disagree" not in check(1.2, 1.3).line("INT8", "FP32")
    wide = check(1.69, 3.10)  # the sub-millisecond classifier: "2.45x (1.69-3.10)"
    assert wide.separated and not wide.agreed
    assert "the rounds disagree (the interval spans 1.83x)" in wide.line("INT8", "FP32")
    # The line: 1.60x (95 % 0.82-1.80x) holds "slower", and is flagged so; one clear of 1.0x is not.
    undecided = SpeedCheck(1.60, Interval(0.82, 1.80, 7, "bootstrap"), 1, 1, 5.0, 8.0)
    assert undecided.undecided and not undecided.slower and undecided.to_dict()["undecided"] is True
    line = undecided.line("The INT8 file", "the FP32 file")
    assert "; unstable: its interval includes 1.0x, so it may be no faster than the FP32 file or slower" in line
    assert "1 thread)" in line
    assert "unstable" not in check(1.2, 1.4).line("INT8", "FP32") and not check(1.2, 1.4).undecided


def test_a_sub_millisecond_model_is_timed_for_a_minimum_time_per_round(tmp_path: Path) -> None:
    """Hundreds of runs per round, not three; and more rounds only while the rounds disagree."""
    source = tmp_path / "silu.onnx"
    onnx.save(_silu_net(), str(source))
    feed = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    found = speed_check.paired_speedup(source, source, feed, threads=1, round_ms=20.0, max_rounds=11)
    assert found.runs >= 10  # a run of this net takes well under 2 ms, even on a busy machine
    assert speed_check.ROUNDS <= found.interval.units <= 11


def test_three_files_timed_in_one_sequence_give_ratios_that_agree_round_by_round(tmp_path: Path) -> None:
    """The sweep's three ratios (INT8/FP32, quantize_static/FP32, INT8/quantize_static) come from the same rounds,
    each file's time the same in every pair it is in: three separate paired sequences on a busy machine gave
    ratios that contradicted each other (resnet50d: 2.48x and 2.09x FP32, yet 0.65x of each other)."""
    source = tmp_path / "silu.onnx"
    onnx.save(_silu_net(), str(source))
    feed = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    found = speed_check.interleaved_speedups([source, source, source], feed, threads=1, round_ms=5.0, max_rounds=7)
    rounds = len(found.times[0])
    assert all(len(times) == rounds for times in found.times) and rounds >= speed_check.ROUNDS
    assert found[0, 1].candidate_ms == found[0, 2].candidate_ms and found[0, 2].reference_ms == found[1, 2].reference_ms
    for pair in ((0, 1), (0, 2), (2, 1)):
        assert found[pair].interval.contains(found[pair].speedup)


def test_the_written_files_speed_is_timed_in_a_fresh_process_and_holds_what_two_sessions_differ(
        tmp_path: Path) -> None:
    """The figure optimize prints for the user is timed as the user will time it, in a process of its own (its
    rounds in two pairs of sessions), and comes back whole: the same graph against itself is about 1x."""
    source = tmp_path / "silu.onnx"
    onnx.save(_silu_net(), str(source))
    feed = {"x": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    found = speed_check.paired_speedup_alone(source, _silu_net(), feed, threads=1)
    assert 0.8 < found.speedup < 1.25 and found.interval.contains(found.speedup) and found.runs >= speed_check.RUNS
    assert found.interval.units >= speed_check.ROUNDS and found.threads == 1


def _relu_mean_head() -> onnx.ModelProto:
    """Conv 3->8 -> Relu -> Conv 8->10 (the classifier, SqueezeNet's) -> Relu -> ReduceMean over the positions ->
    Reshape -> logits: everything after the last Conv reaches no weighted op."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (10, 8, 1, 1)), ("b1", (8,)), ("b2", (10,)))]
    inits.append(numpy_helper.from_array(np.array([1, 10], np.int64), "shape"))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="classifier"),
        helper.make_node("Relu", ["c2"], ["r2"], name="head_relu"),
        helper.make_node("ReduceMean", ["r2"], ["m"], name="mean", axes=[2, 3], keepdims=1),
        helper.make_node("Reshape", ["m", "shape"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_a_classifier_convolution_before_a_relu_and_a_mean_runs_in_integer_on_cpu() -> None:
    """SqueezeNet's head: the last Conv's fused Relu is quantized on cpu, so ONNX Runtime runs that Conv as a
    QLinearConv (kept float, it was 20 % of SqueezeNet's work in float); the mean and the reshape stay float, and
    tensorrt's placement still leaves the whole head float."""
    model = _relu_mean_head()
    placed = float_nodes(model, profile_for(Target.CPU, CpuClass.AVX2))
    assert placed.get("mean") == placed.get("flatten") == "post-processing" and "head_relu" not in placed
    assert float_nodes(model, profile_for(Target.TENSORRT)).get("head_relu") == "post-processing"
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    counted = kernel_count(quantize(model, ranges, profile_for(Target.CPU, CpuClass.AVX2)))
    assert counted.integer == {"QLinearConv": 2} and counted.total == 2
