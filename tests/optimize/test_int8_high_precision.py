"""INT8 with FP16 elsewhere (--high-precision fp16, tensorrt): on tiny graphs built with onnx.helper, the layers INT8
leaves float (HardSwish, an SE block's Sigmoid and Mul) run in FP16 with FP16 Q/DQ scales feeding them, a region that
overflows FP16 stays FP32, the result passes `trtpipe check`'s rules, and its outputs on ONNX Runtime stay as close to
the FP32 model's as the all-FP32 Q/DQ graph's do. --high-precision fp32 leaves the Q/DQ graph as it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import constant, minmax_int8, x_to_y
from tests.optimize.conftest import run
from trtpipe.conformance.check import check_model
from trtpipe.errors import BadInput
from trtpipe.optimize.int8.qdq.profiles import high_precision_for, profile_for
from trtpipe.optimize.int8.steps.high_precision.algorithm import FP16_SCALE_OPSET, fp16_elsewhere, half_scale
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.vocab import Precision, Target

RNG = np.random.default_rng(11)
HALF, FLOAT = TensorProto.FLOAT16, TensorProto.FLOAT


def _se_block(hot: bool = True) -> onnx.ModelProto:
    """Conv 3->8 -> HardSwish -> SE (GlobalAveragePool -> Conv -> Sigmoid -> Mul) -> Conv 8->8 [-> Mul by 4e4 ->
    Conv 8->4, activations near 1e6: the region FP16 cannot hold] -> Relu."""
    inits = [constant(RNG.standard_normal((8, 3, 3, 3)), "w1"), constant(RNG.standard_normal(8), "b1"),
             constant(RNG.standard_normal((8, 8, 1, 1)) * 0.3, "w_se"),
             constant(RNG.standard_normal((8, 8, 1, 1)), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h1"], name="hardswish"),
             helper.make_node("GlobalAveragePool", ["h1"], ["squeezed"], name="se_pool"),
             helper.make_node("Conv", ["squeezed", "w_se"], ["se"], name="se_conv"),
             helper.make_node("Sigmoid", ["se"], ["gate"], name="se_sigmoid"),
             helper.make_node("Mul", ["h1", "gate"], ["excited"], name="se_mul"),
             helper.make_node("Conv", ["excited", "w2"], ["c2"], name="conv2")]
    if hot:
        # One factor per pixel, not per channel: fusion would fold a per-channel one into conv2's weights.
        inits += [constant(np.full((1, 1, 8, 8), 4e4), "big"), constant(RNG.standard_normal((4, 8, 1, 1)) * 1e-4, "w3")]
        nodes += [helper.make_node("Mul", ["c2", "big"], ["hot"], name="hot_mul"),
                  helper.make_node("Conv", ["hot", "w3"], ["c3"], name="conv3"),
                  helper.make_node("Relu", ["c3"], ["y"], name="relu_out")]
    else:
        nodes.append(helper.make_node("Relu", ["c2"], ["y"], name="relu_out"))
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 4 if hot else 8, 8, 8], name="se")


def _types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    return types | {t.name: t.data_type for t in model.graph.initializer}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _quantized(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    batches = [RNG.standard_normal((4, 3, 8, 8)).astype(np.float32) for _ in range(4)]
    return minmax_int8(model, batches, profile_for(Target.TENSORRT), symmetric=True), batches


def test_the_float_layers_run_in_fp16_and_the_overflowing_region_stays_fp32() -> None:
    model = _se_block()
    quantized, batches = _quantized(model)
    converted, report = fp16_elsewhere(quantized, batches)
    types = _types(converted)
    nodes = {n.name: n for n in converted.graph.node}
    for name in ("conv1", "hardswish", "se_pool", "se_conv", "se_sigmoid", "se_mul", "conv2"):
        assert types[nodes[name].output[0]] == HALF, name
    kept = {item["node"]: item["reason"] for item in report.kept_fp32}
    assert set(kept) == {"hot_mul", "conv3"}
    assert "activations reach" in kept["hot_mul"] and "reads activations of" in kept["conv3"]
    assert types[nodes["hot_mul"].output[0]] == FLOAT and types[nodes["conv3"].output[0]] == FLOAT
    # Q/DQ scales: FP16 where the DQ feeds FP16 arithmetic (weights included) or the Q reads an FP16 tensor; FP32
    # around the FP32 region, where the writer and the readers are FP32.
    producer = {o: n for n in converted.graph.node for o in n.output}
    for conv in ("conv1", "conv2"):
        for index in (0, 1):
            assert types[producer[nodes[conv].input[index]].input[1]] == HALF, (conv, index)
    # The squeeze-excitation branch stays float (placement): FP16 weights of its own, no Q/DQ.
    assert nodes["se_conv"].input[1] not in producer and types[nodes["se_conv"].input[1]] == HALF
    for index in (0, 1):
        assert types[producer[nodes["conv3"].input[index]].input[1]] == FLOAT
    assert types[producer[producer[nodes["conv3"].input[0]].input[0]].input[1]] == FLOAT  # the Q reading hot_mul
    assert types["x"] == FLOAT and types["y"] == FLOAT  # the graph's IO stays FP32
    assert next(o.version for o in converted.opset_import if o.domain == "") == FP16_SCALE_OPSET
    assert report.fp16_scales > 0 and report.opset_upgrade is not None

    report_check = check_model(converted, Target.TENSORRT)
    assert report_check.passed and not report_check.errors, [f.line() for f in report_check.findings]
    onnx.checker.check_model(converted, full_check=True)

    x = RNG.standard_normal((8, 3, 8, 8)).astype(np.float32)
    reference, int8, mixed = run(model, x), run(quantized, x, "disable"), run(converted, x, "disable")
    assert np.isfinite(mixed).all()
    assert _cosine(mixed, reference) > 0.999 and _cosine(mixed, reference) > _cosine(int8, reference) - 0.001
    assert _cosine(mixed, int8) > 0.9999


def test_each_scale_holds_one_value_across_a_pair_of_mixed_types() -> None:
    """The Q that reads conv2's FP16 output and the DQ conv3 reads in FP32: one rounded value on both sides."""
    quantized, batches = _quantized(_se_block())
    converted, _ = fp16_elsewhere(quantized, batches)
    inits = {t.name: numpy_helper.to_array(t) for t in converted.graph.initializer}
    for dq in [n for n in converted.graph.node if n.op_type == "DequantizeLinear" and n.input[1] in inits]:
        q = next((n for n in converted.graph.node if n.output[0] == dq.input[0]), None)
        if q is not None:
            assert np.array_equal(inits[q.input[1]].astype(np.float64), inits[dq.input[1]].astype(np.float64))
    assert not [f for f in check_model(converted, Target.TENSORRT).findings if f.rule == "qdq-scale-type"]


def test_nodes_the_caller_keeps_stay_fp32() -> None:
    """What the INT8 pass keeps (post-processing, the budget's FP32 layers) stays FP32 whatever the ranges say; a kept
    node that writes a graph output writes it itself, not through an FP32 -> FP16 -> FP32 round trip."""
    quantized, batches = _quantized(_se_block(hot=False))
    keep = {"se_sigmoid": "post-processing (test)", "relu_out": "post-processing (test)"}
    converted, report = fp16_elsewhere(quantized, batches, keep=keep)
    types = _types(converted)
    sigmoid = next(n for n in converted.graph.node if n.name == "se_sigmoid")
    assert types[sigmoid.input[0]] == FLOAT and types[sigmoid.output[0]] == FLOAT
    assert {"node": "se_sigmoid", "op": "Sigmoid", "reason": "post-processing (test)"} in report.kept_fp32
    writer = next(n for n in converted.graph.node if "y" in n.output)
    assert writer.name == "relu_out" and types[writer.input[0]] == FLOAT
    assert check_model(converted, Target.TENSORRT).passed
    x = batches[0]
    np.testing.assert_allclose(run(converted, x, "disable"), run(quantized, x, "disable"), rtol=0.02,
                               atol=0.02 * float(np.abs(run(quantized, x, "disable")).max()))


def test_a_weight_scale_below_fp16s_normal_range_is_rounded_up_and_requantized() -> None:
    """One output channel with weights near 1e-6 (its scale ~1e-8 would round to 0 in FP16): the scale goes up to an
    FP16 value and the channel's INT8 weights are requantized to it, so the channel keeps its output."""
    weights = RNG.standard_normal((4, 3, 1, 1)).astype(np.float32)
    weights[2] *= 1e-6
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
         helper.make_node("Sigmoid", ["c"], ["y"], name="sigmoid"),
         helper.make_node("Conv", ["y", "w_out"], ["z"], name="conv_out")],
        "tiny", [helper.make_tensor_value_info("x", FLOAT, ["n", 3, 4, 4])],
        [helper.make_tensor_value_info("z", FLOAT, ["n", 2, 4, 4])],
        [constant(weights, "w"), constant(RNG.standard_normal((2, 4, 1, 1)), "w_out")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    batches = [RNG.standard_normal((4, 3, 4, 4)).astype(np.float32) * 1e3 for _ in range(2)]
    quantized = minmax_int8(model, batches, profile_for(Target.TENSORRT), symmetric=True)
    converted, report = fp16_elsewhere(quantized, batches)
    assert report.subnormal_scales >= 1 and report.requantized_weights >= 1
    inits = {t.name: numpy_helper.to_array(t) for t in converted.graph.initializer}
    dq = next(n for n in converted.graph.node if n.op_type == "DequantizeLinear" and n.input[0] in inits
              and inits[n.input[0]].shape == (4, 3, 1, 1))
    assert inits[dq.input[1]].dtype == np.float16 and np.all(inits[dq.input[1]] > 0)
    dequantized = inits[dq.input[0]].astype(np.float64) * inits[dq.input[1]].astype(np.float64).reshape(4, 1, 1, 1)
    np.testing.assert_allclose(dequantized[2], weights[2], atol=np.abs(weights[2]).max() / 20)
    assert check_model(converted, Target.TENSORRT).passed


def test_half_scale_rounds_to_nearest_and_up_below_the_normal_range() -> None:
    between = float(np.float16(1e-5)) + 2e-8  # nearer the FP16 below it than the one above
    half, subnormal = half_scale(np.array([0.0123456, between, 1e-9, 3e-8], np.float32))
    assert half.dtype == np.float16 and subnormal == 3
    assert half[0] == np.float16(0.0123456)  # normal range: the nearest
    assert half[1] > np.float16(1e-5) and half[1] >= np.float32(between)  # subnormal: up, never down
    assert half[2] > 0 and half[3] > 0


def test_fp16_is_the_tensorrt_default_and_refused_on_cpu() -> None:
    assert high_precision_for(Target.TENSORRT, None) is Precision.FP16
    assert high_precision_for(Target.CPU, None) is Precision.FP32
    assert high_precision_for(Target.TENSORRT, Precision.FP32) is Precision.FP32
    with pytest.raises(BadInput, match="--high-precision fp16 is for --target tensorrt"):
        high_precision_for(Target.CPU, Precision.FP16)
    with pytest.raises(BadInput, match="--high-precision fp16 is for --target tensorrt"):
        OptimizeOptions(precision="int8", target="cpu", calib="digits", high_precision="fp16").validate()
    with pytest.raises(BadInput, match="'high_precision' must be one of fp32, fp16"):
        OptimizeOptions(high_precision="bf16")


def _manifest(path: Path) -> dict[str, object]:
    return json.loads(path.with_suffix(".manifest.json").read_text())


@pytest.mark.parametrize("high", ["fp32", "fp16"])
def test_the_pass_records_which_high_precision_ran(tmp_path: Path, run_cli, high: str) -> None:  # type: ignore[no-untyped-def]
    """Through `trtpipe optimize`: fp32 writes the Q/DQ graph with no FP16 anywhere (as before this option); fp16
    writes FP16 float layers, keeps the overflowing region FP32 (listed in the manifest's fp32_nodes), and both
    record which ran in int8.high_precision."""
    source = tmp_path / "se.onnx"
    onnx.save(_se_block(), source)
    out = tmp_path / f"{high}.onnx"
    result = run_cli("optimize", source, "-o", out, "--precision", "int8", "--target", "tensorrt", "--calib",
                     "random", "--calib-samples", "16", "--input-shape", "4x3x8x8", "--high-precision", high)
    assert result.exit_code == 0, result.output
    model = onnx.load(str(out))
    halves = [t.name for t in model.graph.initializer if t.data_type == HALF]
    manifest = _manifest(out)
    section = manifest["int8"]  # type: ignore[index]
    assert section["high_precision"]["dtype"] == high
    if high == "fp32":
        assert not halves and "fp32_high_precision" not in section["high_precision"]
        assert next(o.version for o in model.opset_import if o.domain == "") == 17
    else:
        assert halves and section["high_precision"]["fp16_nodes"] >= 7
        assert {"hot_mul", "conv3"} <= set(manifest["artifact"]["fp32_nodes"])  # type: ignore[index]
        assert section["final"]["cosine"] > 0.999
        assert any(step["step"] == "high precision fp16" for step in section["recipe"]["measured"])
    assert manifest["conformance"]["passed"]  # type: ignore[index]


def test_a_constant_only_fp32_nodes_read_keeps_its_value() -> None:
    """x * 1e5 * 1e-5 between two convolutions, the factors as Constant nodes: both Muls stay FP32 (their values pass
    FP16's range), and so do the Constants, which the float16 converter would otherwise have clamped to 65504."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
             helper.make_node("Constant", [], ["up"], name="up_factor", value=constant(1e5, "up_value")),
             helper.make_node("Constant", [], ["down"], name="down_factor", value=constant(1e-5, "down_value")),
             helper.make_node("Mul", ["c1", "up"], ["big"], name="scale_up"),
             helper.make_node("Mul", ["big", "down"], ["back"], name="scale_down"),
             helper.make_node("Conv", ["back", "w2"], ["y"], name="conv2")]
    graph = helper.make_graph(nodes, "const", [helper.make_tensor_value_info("x", FLOAT, ["n", 3, 4, 4])],
                              [helper.make_tensor_value_info("y", FLOAT, ["n", 2, 4, 4])],
                              [constant(RNG.standard_normal((4, 3, 1, 1)), "w1"),
                               constant(RNG.standard_normal((2, 4, 1, 1)), "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    batches = [RNG.standard_normal((4, 3, 4, 4)).astype(np.float32) for _ in range(2)]
    quantized = minmax_int8(model, batches, profile_for(Target.TENSORRT), symmetric=True)
    converted, report = fp16_elsewhere(quantized, batches)
    kept = {item["node"] for item in report.kept_fp32}
    assert {"scale_up", "scale_down", "up_factor", "down_factor"} <= kept
    x = batches[0]
    int8, mixed = run(quantized, x, "disable"), run(converted, x, "disable")
    assert _cosine(mixed, int8) > 0.9999 and np.abs(mixed - int8).max() < 0.01 * np.abs(int8).max()
    assert check_model(converted, Target.TENSORRT).passed


def test_fp16_that_breaks_the_outputs_falls_back_to_fp32(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """Activations near 1e-9 between two convolutions are no overflow, but FP16 cannot hold them (its smallest value
    is 6e-8): the result would lose its outputs, so the float layers stay FP32 and the manifest says why."""
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
         helper.make_node("Mul", ["c1", "tiny"], ["small"], name="shrink"),
         helper.make_node("Conv", ["small", "w2"], ["y"], name="conv2")],
        "tiny", [helper.make_tensor_value_info("x", FLOAT, ["n", 3, 4, 4])],
        [helper.make_tensor_value_info("y", FLOAT, ["n", 2, 4, 4])],
        [constant(RNG.standard_normal((4, 3, 1, 1)), "w1"), constant(1e-9, "tiny"),
         constant(RNG.standard_normal((2, 4, 1, 1)), "w2")])
    source, out = tmp_path / "tiny.onnx", tmp_path / "int8.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), source)
    result = run_cli("optimize", source, "-o", out, "--precision", "int8", "--target", "tensorrt", "--calib",
                     "random", "--calib-samples", "8", "--input-shape", "4x3x4x4")
    assert result.exit_code == 0, result.output
    assert "costs more than rounding" in result.output
    record = _manifest(out)["int8"]["high_precision"]  # type: ignore[index]
    assert record["dtype"] == "fp32" and "costs more than rounding" in record["reason"]
    assert record["asked"] == "default"
    assert not [t for t in onnx.load(str(out)).graph.initializer if t.data_type == HALF]
