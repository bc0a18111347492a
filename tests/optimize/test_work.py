"""optimize/judging/work.py: the time budgets spend a model's work, counted from its graph, so the same model and data
get the same sample counts and folds on a quiet machine and a loaded one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.optimize.judging import work


def _conv_gemm(batch: str | int = "N") -> onnx.ModelProto:
    """x (N,3,8,8) -> Conv 3->4, 3x3, pad 1 -> Relu -> Flatten -> Gemm 256->10."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.normal(size=(4, 3, 3, 3)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.normal(size=(10, 256)).astype(np.float32), "g"),
               numpy_helper.from_array(np.array([0, -1], np.int64), "flat")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "flat"], ["f"]),
             helper.make_node("Gemm", ["f", "g"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_sample_s_work_is_each_weighted_node_s_dot_products_and_the_elements_written() -> None:
    """Conv: 4x8x8 outputs of 3x3x3 products; Gemm: 10 outputs of 256 (the Reshape's target read from its
    initializer); elements: what every node writes. The batch axis the graph leaves free is one sample's."""
    images = np.zeros((5, 3, 8, 8), np.float32)
    found = work.sample_work(_conv_gemm(), images)
    assert found == work.Work(macs=4 * 8 * 8 * 27 + 10 * 256, elements=256 * 3 + 10)
    assert found.seconds > 0 and "GMAC" in found.line()


def test_the_pace_is_the_reference_pace_of_the_work_not_the_clock_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Twice the reference rates, half the pace, exactly: the budget's figure follows the graph and the stated
    rates only (a timed pass would not halve)."""
    images = np.zeros((2, 3, 8, 8), np.float32)
    model = _conv_gemm()
    pace, reference = work.pace(model, images)
    monkeypatch.setattr(work, "REFERENCE_MACS_PER_S", 2 * work.REFERENCE_MACS_PER_S)
    monkeypatch.setattr(work, "REFERENCE_ELEMENTS_PER_S", 2 * work.REFERENCE_ELEMENTS_PER_S)
    assert reference and work.pace(model, images) == (pytest.approx(pace / 2, rel=1e-12), True)


def test_a_graph_shape_inference_cannot_follow_is_timed_instead() -> None:
    """A weighted node fed by an op no schema knows: its MACs are unknown, so the pass is timed (and the caller
    says so) rather than guessed."""
    model = _conv_gemm(1)
    model.graph.node[0].input[0] = "u"
    model.graph.node.insert(0, helper.make_node("Relu", ["x"], ["u"]))
    assert work.sample_work(model, np.zeros((1, 3, 8, 8), np.float32)) is not None  # a known op: still counted
    custom = _conv_gemm(1)
    custom.graph.node[0].input[0] = "u"
    custom.graph.node.insert(0, helper.make_node("Unknown", ["x"], ["u"], domain="example.custom"))
    custom.opset_import.append(helper.make_opsetid("example.custom", 1))
    assert work.sample_work(custom, np.zeros((1, 3, 8, 8), np.float32)) is None
