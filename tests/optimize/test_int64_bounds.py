"""No int64 bound passes through float in any pass: a Slice whose end is INT64_MAX ("to the end", as exporters
write it) keeps that end through every graph pass and every precision, where float64 once turned it into INT64_MIN
and the Slice into an empty one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.optimize.conftest import run
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.optimize.passes.equalize import equalize
from trtpipe.optimize.passes.registry import graph_pass_names
from trtpipe.optimize.stage import optimize
from trtpipe.vocab import Precision, Target

INT64_MAX = np.iinfo(np.int64).max
RNG = np.random.default_rng(7)


def _sliced_net() -> onnx.ModelProto:
    """Conv 3->8 -> Relu -> Conv 8->8 (an equalizable pair) -> Slice channels [2, INT64_MAX) -> y [1, 6, 8, 8]."""
    inits = [numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32) * 0.3, name) for name, shape in
             (("w1", (8, 3, 3, 3)), ("w2", (8, 8, 3, 3)), ("b1", (8,)), ("b2", (8,)))]
    inits += [numpy_helper.from_array(np.array(values, np.int64), name) for name, values in
              (("starts", [2]), ("ends", [INT64_MAX]), ("axes", [1]))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a1"], name="relu"),
        helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Slice", ["c2", "starts", "ends", "axes"], ["y"], name="slice"),
    ]
    graph = helper.make_graph(nodes, "sliced", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _slice_ends(model: onnx.ModelProto) -> list[int]:
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [int(v) for node in model.graph.node if node.op_type == "Slice" for v in constants[node.input[2]].ravel()]


def test_equalize_keeps_int64_ends() -> None:
    equalized, pairs = equalize(_sliced_net())
    assert len(pairs) == 1  # the pair was rescaled: the initializers were rewritten
    assert _slice_ends(equalized) == [INT64_MAX]


@pytest.mark.parametrize(("precision", "target"), [(Precision.FP32, None), (Precision.FP16, None),
                                                   (Precision.BF16, None), (Precision.INT8, Target.CPU),
                                                   (Precision.INT8, Target.TENSORRT)])
def test_every_pass_keeps_int64_ends(tmp_path: Path, precision: Precision, target: Target | None) -> None:
    source = tmp_path / "sliced.onnx"
    onnx.save(_sliced_net(), str(source))
    calib = tmp_path / "calib.npy"
    np.save(calib, RNG.standard_normal((16, 3, 8, 8)).astype(np.float32))
    output = tmp_path / f"{precision}.onnx"
    optimize(source, output, OptimizeOptions(precision=precision, target=target, passes=graph_pass_names(),
                                             calib=str(calib), calib_samples=16))
    written = onnx.load(str(output))
    assert all(end >= 8 for end in _slice_ends(written))  # to the end (a pass may clamp it to the dim, never wrap)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert run(written, x).shape == (1, 6, 8, 8)
