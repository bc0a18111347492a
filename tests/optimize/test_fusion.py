"""Fusion: a graph with the patterns exporters leave behind gets simpler and computes the same."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import x_to_y
from tests.optimize.conftest import run
from trtpipe.onnx_info import op_counts
from trtpipe.optimize.passes.fuse import simplify


def _graph_with_bn_identity_and_dropout() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    scale, bias = rng.uniform(0.5, 2, 8).astype(np.float32), rng.standard_normal(8).astype(np.float32)
    mean, var = rng.standard_normal(8).astype(np.float32), rng.uniform(0.5, 2, 8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Identity", ["bn"], ["id"], name="identity"),
        helper.make_node("Dropout", ["id"], ["drop"], name="dropout"),
        helper.make_node("Cast", ["drop"], ["cast"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Relu", ["cast"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(weight, "w"), (scale, "s"), (bias, "b"), (mean, "m"), (var, "v")]]
    return x_to_y(nodes, inits, ["n", 3, 8, 8], ["n", 8, 8, 8], ir_version=10)


def test_fusion_folds_bn_and_removes_no_ops_with_the_same_outputs() -> None:
    model = _graph_with_bn_identity_and_dropout()
    fused, report = simplify(model)
    assert report.ops_before == {"BatchNormalization": 1, "Cast": 1, "Conv": 1, "Dropout": 1, "Identity": 1,
                                 "Relu": 1}
    assert op_counts(fused) == report.ops_after == {"Conv": 1, "Relu": 1}
    assert all(node.domain in ("", "ai.onnx") for node in fused.graph.node)
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8), dtype=np.float32)
    np.testing.assert_allclose(run(fused, x), run(model, x, "disable"), rtol=1e-5, atol=1e-5)


def test_cli_reports_op_counts_and_verifies(digits_onnx, tmp_path, run_cli) -> None:  # type: ignore[no-untyped-def]
    import json

    out = tmp_path / "fused.onnx"
    result = run_cli("optimize", digits_onnx, "-o", out)
    assert result.exit_code == 0, result.output
    assert "Operators before and after fusion" in result.output and "Fusion: 22 → " in result.output
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    assert manifest["artifact"]["precision"] == "fp32"
    assert manifest["fusion"]["verification"]["cosine"] > 0.99999
    assert manifest["input"]["sha256"] and manifest["options"]["passes"] == ["fuse"]
