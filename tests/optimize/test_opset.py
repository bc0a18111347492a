"""Opset upgrades before INT8: the same outputs on ONNX Runtime before and after, a note for the manifest, and one
clear line naming the operator when ONNX's converter cannot do it."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.optimize.conftest import run
from trtpipe.errors import BadInput
from trtpipe.optimize.graph.opset import PER_CHANNEL_QDQ_OPSET, default_opset, upgrade_for_precision, upgrade_opset
from trtpipe.vocab import Precision


def opset12_graph() -> onnx.ModelProto:
    """Conv, Clip (min/max as inputs since opset 11), Softmax (axis semantics change in 13), ReduceSum (axes move
    to an input in 13) and Squeeze (axes too): each needs its adapter; plus the unused ('Paddle', 1) import that
    PaddlePaddle's exporter leaves."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    low, high = numpy_helper.from_array(np.float32(-1.0), "low"), numpy_helper.from_array(np.float32(1.0), "high")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Clip", ["c", "low", "high"], ["clipped"], name="clip"),
        helper.make_node("Softmax", ["clipped"], ["soft"], axis=1, name="softmax"),
        helper.make_node("ReduceSum", ["soft"], ["summed"], axes=[2], keepdims=1, name="reduce"),
        helper.make_node("Squeeze", ["summed"], ["y"], axes=[2], name="squeeze"),
    ]
    graph = helper.make_graph(nodes, "opset12", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])], [weight, low, high])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12), helper.make_opsetid("Paddle", 1)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def test_an_opset12_graph_is_upgraded_to_13_with_the_same_outputs() -> None:
    model = opset12_graph()
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    upgraded, note = upgrade_for_precision(model, Precision.INT8)
    assert note == "upgraded from opset 12 to 13 (per-channel Q/DQ needs 13)"
    assert default_opset(upgraded) == PER_CHANNEL_QDQ_OPSET and default_opset(model) == 12  # the input is untouched
    assert [(o.domain, o.version) for o in upgraded.opset_import] == [("", 13), ("Paddle", 1)]  # put back as given
    reduce_sum = next(n for n in upgraded.graph.node if n.op_type == "ReduceSum")
    assert len(reduce_sum.input) == 2  # the adapter moved axes to an input: the conversion really happened
    onnx.checker.check_model(upgraded)
    np.testing.assert_allclose(run(upgraded, x), run(model, x), rtol=1e-6, atol=1e-6)


def test_nothing_changes_where_the_opset_is_high_enough_or_the_precision_needs_none() -> None:
    model = opset12_graph()
    assert upgrade_for_precision(model, Precision.FP16) == (model, None)
    assert upgrade_opset(model, 12) == (model, None)


def test_an_operator_the_converter_cannot_convert_is_named_in_one_line() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ImageScaler", ["r"], ["y"], scale=2.0, bias=[0.0, 0.0, 0.0], name="scaler")]
    graph = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    with pytest.raises(BadInput) as raised:
        upgrade_for_precision(model, Precision.INT8)
    message = raised.value.message
    assert "\n" not in message
    assert "opset 9 and cannot be upgraded to 13 (per-channel Q/DQ needs 13)" in message
    assert "operator 'ImageScaler' (node 'scaler')" in message and "Re-export it at opset 13" in message


def test_the_converters_own_message_is_read_for_the_operator() -> None:
    """Where the converter itself gives up (here, asked to go down: Relu has no adapter below its opset 14
    version), its C++ assertion text becomes a sentence naming the operator."""
    from onnx import version_converter

    from trtpipe.optimize.graph.opset import _converter_reason

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(Exception) as raised:  # RuntimeError or ConvertError, by onnx version
        version_converter.convert_version(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), 12)
    assert _converter_reason(raised.value) == "operator 'Relu' has no conversion adapter from its opset 14 version"


@pytest.mark.skipif(importlib.util.find_spec("rapidocr_onnxruntime") is None,
                    reason="rapidocr-onnxruntime is not installed: pip install --no-deps 'rapidocr-onnxruntime==1.4.4'")
def test_the_real_paddle_text_detector_is_upgraded_from_12_with_the_same_outputs() -> None:
    from trtpipe.models.packaged import TEXT_DETECTOR, natural_batch, packaged_onnx

    model = onnx.load(str(packaged_onnx(TEXT_DETECTOR)))
    assert default_opset(model) == 12
    upgraded, note = upgrade_opset(model, 13)
    assert note == "upgraded from opset 12 to 13 (needs opset 13)"
    x = natural_batch(TEXT_DETECTOR, count=1, size=(320, 320)).inputs
    before, after = run(model, x), run(upgraded, x)
    assert before.shape == (1, 1, 320, 320) and (before > 0.3).any()  # it sees the text: a real comparison
    np.testing.assert_allclose(after, before, rtol=0, atol=1e-5)
