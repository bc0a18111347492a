"""FP16: measured overflow keeps nodes in FP32; the digits model keeps its predictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.optimize.conftest import run
from trtpipe.models.data import load_split
from trtpipe.optimize.passes.fp16 import convert_fp16


def test_node_whose_activations_overflow_fp16_stays_fp32() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["up"], name="scale_up"),      # reaches ~1e5: over FP16's 65504
        helper.make_node("Mul", ["up", "small"], ["down"], name="scale_down"),
        helper.make_node("Relu", ["down"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(np.array(1e5, np.float32), "big"),
             numpy_helper.from_array(np.array(1e-5, np.float32), "small")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    x = np.random.default_rng(0).uniform(-1, 1, (8, 4)).astype(np.float32)

    converted, report = convert_fp16(model, [x])
    kept = {item["node"]: item["reason"] for item in report.kept_fp32}
    # The node producing the overflow and the node reading it stay FP32 (a Cast to FP16 between them would turn
    # the value into infinity); the rest is FP16.
    assert list(kept) == ["scale_up", "scale_down"] and "activations reach" in kept["scale_up"]
    assert "reads activations of" in kept["scale_down"]
    out = run(converted, x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, np.maximum(x, 0), atol=1e-2)
    assert converted.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT  # IO kept FP32


def test_digits_fp16_agrees_with_fp32(digits_onnx: Path, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "fp16.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out, "--precision", "fp16", "--calib", "digits", "--eval", "digits")
    assert result.exit_code == 0, result.output
    model = onnx.load(str(out))
    assert any(i.data_type == TensorProto.FLOAT16 for i in model.graph.initializer)
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    split = load_split("digits", "eval")
    fp32, fp16 = run(digits_onnx, split.images), run(out, split.images)
    assert np.mean(fp32.argmax(1) == fp16.argmax(1)) >= 0.995
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["artifact"]["precision"] == "fp16" and manifest["fp16"]["kept_fp32"] == []
    assert manifest["fp16"]["verification"]["top1_agreement"] >= 0.995


def test_outputs_fp16_cannot_hold_are_refused_with_no_tick_before_the_error(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    """A model whose outputs are ~1e-9 (as randomly initialised deep nets give) underflows FP16's smallest value:
    optimize says so in one Error line, prints no ✓ for the FP16 comparison before it, and writes nothing."""
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((6, 4)) * 1e-9).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="tiny")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                              [numpy_helper.from_array(weight, "w")])
    source = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), source)
    out = tmp_path / "fp16.onnx"
    result = run_cli("optimize", source, "-o", out, "--precision", "fp16", "--calib", "random")
    assert result.exit_code != 0
    assert "FP16 output differs from FP32 beyond rounding" in result.output
    assert "✓ FP16" not in result.output and "✓ Wrote" not in result.output
    assert not out.exists()
