"""cpu INT8 placement for speed (issue 57): a squeeze-and-excitation gate runs in integer so the convolution before
it does too (rule ``squeeze-gate``), and speed-aware placement leaves float the kinds of weighted op measured faster
in float, recording each decision."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.builders import constant
from tests.optimize.conftest import run
from trtpipe.hardware import cpu_class
from trtpipe.intervals import Interval
from trtpipe.optimize.checks.kernels import kernel_count
from trtpipe.optimize.checks.speed_check import SpeedCheck
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.optimize.int8.qdq.placement import float_nodes, squeeze_gates
from trtpipe.optimize.int8.qdq.profiles import profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.steps.speed.algorithm import (
    MIN_FP32_MS,
    integer_regions,
    left_float,
    paired_timer,
    place_for_speed,
)
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.stage import optimize
from trtpipe.runtime.onnxruntime.sessions import optimized_graph
from trtpipe.vocab import CalibMethod, CpuClass, Precision, Target

RNG = np.random.default_rng(57)


def _se_block() -> onnx.ModelProto:
    """timm's squeeze-and-excitation as exported: Conv 3->8 -> Relu -> Conv 8->8 (the block's last convolution) ->
    [ReduceMean -> Conv 8->2 -> Relu -> Conv 2->8 -> Sigmoid] gating it -> Add with the first activation -> Relu ->
    Conv 8->4."""
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)) * 0.3, "w1"), constant(RNG.standard_normal((8, 8, 3, 3)) * 0.2,
             "w2"), constant(RNG.standard_normal((2, 8, 1, 1)), "se_w1"), constant(RNG.standard_normal((8, 2, 1, 1)),
             "se_w2"), constant(RNG.standard_normal((4, 8, 1, 1)), "w3"),
             helper.make_tensor("axes", TensorProto.INT64, [2], [2, 3])]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("ReduceMean", ["c2", "axes"], ["pooled"], name="squeeze", keepdims=1),
             helper.make_node("Conv", ["pooled", "se_w1"], ["s1"], name="se_reduce"),
             helper.make_node("Relu", ["s1"], ["s2"], name="se_relu"),
             helper.make_node("Conv", ["s2", "se_w2"], ["s3"], name="se_expand"),
             helper.make_node("Sigmoid", ["s3"], ["gate"], name="se_sigmoid"),
             helper.make_node("Mul", ["c2", "gate"], ["excited"], name="excite"),
             helper.make_node("Add", ["excited", "r1"], ["joined"], name="residual"),
             helper.make_node("Relu", ["joined"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="project")]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _quantized(model: onnx.ModelProto) -> onnx.ModelProto:
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(8)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    # this machine's CPU class: an 8-bit-weight file run on a CPU without VNNI saturates (the error check below)
    return quantize(model, ranges, profile_for(Target.CPU, cpu_class()))


def test_the_squeeze_excitation_gate_runs_in_integer_and_so_does_the_convolution_before_it() -> None:
    model = _se_block()
    assert squeeze_gates(model.graph) == {"excite"}
    placed = float_nodes(model, profile_for(Target.CPU, CpuClass.AVX512_VNNI))
    assert {n for n, rule in placed.items() if rule == "squeeze-excitation"} == {
        "se_reduce", "se_relu", "se_expand", "se_sigmoid"}
    assert "excite" not in placed  # before issue 57 'outside-swish' kept it float, and conv2 ran in float
    quantized = _quantized(model)
    ops = [node.op_type for node in optimized_graph(quantized).graph.node]
    assert "QLinearMul" in ops
    counted = kernel_count(quantized)
    # conv1 and conv2 (before the gate) in integer; project writes the float graph output, the branch stays float
    assert counted.integer == {"QLinearConv": 2} and counted.total == 5
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    reference = run(model, x)
    assert np.abs(run(quantized, x) - reference).max() < 0.05 * np.abs(reference).max()


def _kinds() -> onnx.ModelProto:
    """One weighted op of each kind: dense 3x3, depthwise 3x3, grouped 3x3, pointwise 1x1, then a MatMul."""
    inits = [constant(RNG.standard_normal((8, 4, 3, 3)) * 0.3, "dense_w"),
             constant(RNG.standard_normal((8, 1, 3, 3)) * 0.3, "dw_w"),
             constant(RNG.standard_normal((8, 4, 3, 3)) * 0.3, "group_w"),
             constant(RNG.standard_normal((8, 8, 1, 1)) * 0.3, "pw_w"),
             constant(RNG.standard_normal((8, 8)) * 0.3, "mm_w")]
    nodes = [helper.make_node("Conv", ["x", "dense_w"], ["a"], name="dense", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="relu_a"),
             helper.make_node("Conv", ["ar", "dw_w"], ["b"], name="depthwise", pads=[1, 1, 1, 1], group=8),
             helper.make_node("Relu", ["b"], ["br"], name="relu_b"),
             helper.make_node("Conv", ["br", "group_w"], ["c"], name="grouped", pads=[1, 1, 1, 1], group=2),
             helper.make_node("Relu", ["c"], ["cr"], name="relu_c"),
             helper.make_node("Conv", ["cr", "pw_w"], ["d"], name="pointwise"),
             helper.make_node("Relu", ["d"], ["dr"], name="relu_d"),
             helper.make_node("MatMul", ["dr", "mm_w"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "kinds", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _quantized_kinds() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    model = _kinds()
    batches = [RNG.standard_normal((1, 4, 8, 8)).astype(np.float32) for _ in range(8)]
    ranges = calibrate(model, batches, CalibMethod.MINMAX, symmetric=False)
    return model, quantize(model, ranges, profile_for(Target.CPU, CpuClass.AVX512_VNNI))


def test_regions_are_the_kinds_of_weighted_op_onnx_runtime_runs_differently() -> None:
    _, quantized = _quantized_kinds()
    assert integer_regions(quantized) == {"dense convolutions": ["dense"], "depthwise convolutions": ["depthwise"],
                                          "grouped convolutions": ["grouped"], "pointwise convolutions": ["pointwise"],
                                          "matmuls": ["matmul"]}


def test_a_region_left_float_runs_float_kernels_on_the_integer_weights_and_the_rest_stays_integer() -> None:
    model, quantized = _quantized_kinds()
    assert kernel_count(quantized).integer == {"QLinearConv": 4, "MatMulIntegerToFloat": 1}
    floated = left_float(quantized, model, ["depthwise"])
    # The depthwise convolution reads the float tensor (clamped as the folded Relu was), so its Q/DQ pair goes and
    # the dense convolution before it, which only it read, writes float too; the timing of a region measures that.
    assert kernel_count(floated).integer == {"QLinearConv": 2, "MatMulIntegerToFloat": 1}
    assert any(n.op_type == "Clip" for n in floated.graph.node)
    assert "depthwise" not in integer_regions(floated) and "grouped" in integer_regions(floated)["grouped convolutions"]
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    # The float convolution computes on the dequantized weights the integer one used: the outputs barely move.
    scale = np.abs(run(model, x)).max()
    assert np.abs(run(floated, x) - run(quantized, x)).max() < 0.05 * scale


def _check(speedup: float, candidate_ms: float = 5.0) -> SpeedCheck:
    return SpeedCheck(speedup, Interval(speedup * 0.9, speedup * 1.1, 5, "bootstrap", 0.95), 2, 1, candidate_ms,
                      candidate_ms * speedup)


def test_regions_measured_faster_in_float_are_left_float_and_every_decision_is_recorded() -> None:
    model, quantized = _quantized_kinds()

    def timer(candidate: onnx.ModelProto, reference: onnx.ModelProto) -> SpeedCheck:
        """This machine, as told: depthwise convolutions run 1.3x faster in float, everything else slower."""
        if reference is model:  # against the FP32 file
            return _check(1.4)
        gone = set(integer_regions(reference)) - set(integer_regions(candidate))
        return _check(1.3 if gone == {"depthwise convolutions"} else 0.8)

    result, placement = place_for_speed(quantized, model, timer)
    assert [d.region for d in placement.left_float] == ["depthwise convolutions"]
    assert set(integer_regions(result)) == {"dense convolutions", "grouped convolutions", "pointwise convolutions",
                                            "matmuls"}
    record = placement.to_dict()
    assert record["left_float"] == ["depthwise convolutions"]
    assert {r["region"]: r["kept"] for r in record["regions"]}["pointwise convolutions"] == "int8"
    assert all({"int8_ms", "float_ms", "float_speedup", "interval"} <= set(r) for r in record["regions"])
    assert "left float: depthwise convolutions (1, 1.30x faster in float)" in placement.line()


def test_a_result_slower_than_fp32_tries_every_region_float() -> None:
    model, quantized = _quantized_kinds()
    state = {"all_float": False}

    def timer(candidate: onnx.ModelProto, reference: onnx.ModelProto) -> SpeedCheck:
        if reference is model:
            return _check(1.02 if state["all_float"] else 0.7)
        if not integer_regions(candidate):
            state["all_float"] = True
            return _check(1.5)
        return _check(0.9)  # each region alone is faster in integer

    result, placement = place_for_speed(quantized, model, timer)
    assert integer_regions(result) == {}
    assert all(d.kept == "float" for d in placement.decisions)
    assert placement.vs_fp32 is not None and placement.vs_fp32.speedup == 1.02


def test_a_file_still_slower_than_fp32_with_every_region_float_becomes_the_float_graph() -> None:
    """The SE block's gate Mul, residual Add and pooling keep their Q/DQ when every weighted op is float: where
    that file is still slower than FP32, the float graph itself is written (as TensorRT picks FP32 tactics where
    they are faster), and said so."""
    model = _se_block()
    quantized = _quantized(model)

    def quantizers(m: onnx.ModelProto) -> int:
        return sum(n.op_type == "QuantizeLinear" for n in m.graph.node)

    def timer(candidate: onnx.ModelProto, reference: onnx.ModelProto) -> SpeedCheck:
        """This machine, as told: every Q/DQ pair costs time and no integer kernel saves any."""
        return _check((1.0 + quantizers(reference)) / (1.0 + quantizers(candidate)), candidate_ms=50.0)

    result, placement = place_for_speed(quantized, model, timer)
    assert result is model and placement.bare and placement.to_dict()["every_qdq_removed"]
    assert "the file is the float graph" in placement.line()
    assert placement.vs_fp32 is not None and placement.vs_fp32.speedup == 1.0
    assert all(d.kept == "float" for d in placement.decisions)
    # Handed the graph before the INT8 recipe's passes (no depthwise gains to pay for), that is the file written.
    before_recipe = copy.deepcopy(model)
    result, placement = place_for_speed(quantized, model, timer, float_graph=before_recipe)
    assert result is before_recipe and placement.bare


def test_a_graph_too_small_to_time_is_left_as_placed() -> None:
    model, quantized = _quantized_kinds()
    feed = {"x": RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)}
    result, placement = place_for_speed(quantized, model, paired_timer(feed, threads=1, rounds=3))
    assert result is quantized and placement.skipped is not None and f"{MIN_FP32_MS:g} ms" in placement.skipped


def test_optimize_records_the_speed_placement_in_the_manifest(tmp_path: Path) -> None:
    source, calib = tmp_path / "se.onnx", tmp_path / "calib.npy"
    onnx.save(_se_block(), str(source))
    np.save(calib, RNG.standard_normal((16, 3, 8, 8)).astype(np.float32))
    result = optimize(source, tmp_path / "int8.onnx", OptimizeOptions(
        precision=Precision.INT8, target=Target.CPU, cpu_class=CpuClass.AVX512_VNNI, calib=str(calib)))
    section = result.manifest.details["int8"]["speed_placement"]
    assert section["line"].startswith("Speed-aware placement")
    assert "skipped" in section  # 0.0x ms per run: too short to time a region
