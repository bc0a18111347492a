"""The TensorRT-target simulation computes FP16 as a GPU does: every FP16 tensor rounded where it is written, an
overflow turned into infinity, where ONNX Runtime's CPU provider alone runs a chain of FP16 operators in FP32."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.artifact.records.manifest import ArtifactManifest, write_manifest
from trtpipe.runtime import RunOptions, describe_artifact, open_artifact
from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.onnxruntime.fp16_rounding import round_fp16_tensors
from trtpipe.runtime.onnxruntime.settings import GraphOptimization
from trtpipe.vocab import Precision, Target

PLAIN = RunOptions(optimization=GraphOptimization.DISABLE)  # the simulation as it was: Q/DQ as float ops only


def _sum_then_difference() -> onnx.ModelProto:
    """(x + y) - y with x and y cast to FP16 and the output cast back: 0-ulp exact in FP32, not in FP16."""
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16, name="cast_x"),
             helper.make_node("Cast", ["y"], ["y16"], to=TensorProto.FLOAT16, name="cast_y"),
             helper.make_node("Add", ["x16", "y16"], ["sum16"], name="add"),
             helper.make_node("Sub", ["sum16", "y16"], ["difference16"], name="sub"),
             helper.make_node("Cast", ["difference16"], ["out"], to=TensorProto.FLOAT, name="cast_out")]
    graph = helper.make_graph(nodes, "sum_then_difference",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "y")],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


X = np.array([40000.0, 1.0, 0.5], np.float32)
Y = np.array([40000.0, 2048.0, 0.25], np.float32)


def test_fp32_arithmetic_hides_what_fp16_overflows_and_rounds_away() -> None:
    model = _sum_then_difference()
    with np.errstate(over="ignore"):
        half = (X.astype(np.float16) + Y.astype(np.float16)) - Y.astype(np.float16)  # numpy computes in FP16
    assert np.isinf(half[0]) and half[1] == 0 and half[2] == 0.5  # 80000 overflows; 2049 rounds to 2048
    with OnnxRuntimeBackend(model, PLAIN) as cpu:
        hidden = cpu.run({"x": X, "y": Y})[0]
    np.testing.assert_array_equal(hidden, X)  # the CPU provider ran Add and Sub in FP32: the premise of this module
    with OnnxRuntimeBackend(model, RunOptions(optimization=GraphOptimization.DISABLE, round_fp16=True)) as gpu_like:
        faithful = gpu_like.run({"x": X, "y": Y})[0]
    np.testing.assert_array_equal(faithful, half.astype(np.float32))


def test_the_tensorrt_target_simulation_rounds_fp16(tmp_path: Path) -> None:
    # What bench, select, serve and trtpipe.load run for a TensorRT-target INT8 file is its description's setting.
    path = tmp_path / "trt.onnx"
    onnx.save(_sum_then_difference(), str(path))
    write_manifest(path, ArtifactManifest.describe(path, Precision.INT8, target=Target.TENSORRT))
    description = describe_artifact(path)
    assert description.simulated and description.run["round_fp16"] and "FP16 rounded" in (description.note or "")
    with open_artifact(description) as backend:
        faithful = backend.run({"x": X, "y": Y})[0]
    assert np.isinf(faithful[0]) and faithful[1] == 0 and faithful[2] == 0.5
    assert not describe_artifact(path).natively().run.get("round_fp16")  # a GPU provider rounds FP16 itself


def test_optimize_measures_tensorrt_candidates_with_fp16_rounded() -> None:
    from trtpipe.optimize.judging.evaluate import outputs

    faithful = outputs(_sum_then_difference(), {"x": X, "y": Y}, as_written=True)[0]
    assert np.isinf(faithful[0]) and faithful[1] == 0  # the tensorrt profile's way of measuring
    np.testing.assert_array_equal(outputs(_sum_then_difference(), {"x": X, "y": Y})[0], X)  # cpu's: as ORT runs


def test_the_rewrite_keeps_the_graph_interface_and_folds_fp16_weights() -> None:
    # FP16 graph input and output (optimize --no-keep-io-fp32), a weight dequantized with an FP16 scale, an FP16 bias.
    weight = np.array([[127, -3], [64, 1]], np.int8)
    scale = np.array(0.01, np.float16)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w16"], name="dq_w"),
             helper.make_node("MatMul", ["x16", "w16"], ["product16"], name="matmul"),
             helper.make_node("Add", ["product16", "bias16"], ["y16"], name="add")]
    graph = helper.make_graph(
        nodes, "fp16_io", [helper.make_tensor_value_info("x16", TensorProto.FLOAT16, [1, 2])],
        [helper.make_tensor_value_info("y16", TensorProto.FLOAT16, [1, 2])],
        [numpy_helper.from_array(weight, "w_q"), numpy_helper.from_array(scale, "w_scale"),
         numpy_helper.from_array(np.array([1000.0, 0.001], np.float16), "bias16")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    rewritten, rounded = round_fp16_tensors(model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert rounded == 2 and "dq_w" not in {n.name for n in rewritten.graph.node}  # the weight is a constant now
    assert {t.name for t in rewritten.graph.initializer} == {"w16", "bias16"}
    assert [(v.name, v.type.tensor_type.elem_type) for v in rewritten.graph.input] == [("x16", TensorProto.FLOAT16)]
    assert [(v.name, v.type.tensor_type.elem_type) for v in rewritten.graph.output] == [("y16", TensorProto.FLOAT16)]
    assert {n.op_type for n in rewritten.graph.node} == {"Cast", "MatMul", "Add"}
    x = np.array([[3.0, 0.5]], np.float16)
    with OnnxRuntimeBackend(rewritten, PLAIN) as backend:
        y = backend.run({"x16": x})[0]
    w = (weight.astype(np.float32) * np.float32(scale)).astype(np.float16)
    product = (x.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    assert y.dtype == np.float16
    np.testing.assert_array_equal(y, (product + np.array([1000.0, 0.001], np.float16)))


def test_a_graph_without_fp16_is_not_rewritten() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph)
    assert round_fp16_tensors(model) == (model, 0)


@pytest.mark.parametrize("value", ["yes", 1])
def test_the_setting_is_typed(value: object) -> None:
    from trtpipe.errors import BadInput

    with pytest.raises(BadInput, match="round_fp16 must be true or false"):
        RunOptions(round_fp16=value)  # type: ignore[arg-type]


def test_intermediate_tensors_exposed_without_a_type_are_rounded_too() -> None:
    # trtpipe debug exposes every tensor as an output declared without a type: each must still hold what the GPU
    # writes, and the graph's own readers must not see more than that.
    from trtpipe.runtime.onnxruntime.probe import with_outputs

    exposed = with_outputs(_sum_then_difference(), ["sum16", "difference16"])
    rewritten, rounded = round_fp16_tensors(exposed)
    assert rounded == 4  # x16, y16, sum16, difference16
    with OnnxRuntimeBackend(rewritten, PLAIN) as backend:
        out, total, difference = backend.run({"x": X, "y": Y})
    assert np.isinf(total[0]) and total[1] == 2048 and np.isinf(difference[0]) and difference[1] == 0
    np.testing.assert_array_equal(out, difference)
