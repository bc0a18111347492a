"""The ONNX Runtime backend dequantizes, once at load, the weights of convolutions its CPU provider runs in float
(their output read by a float op, not a QuantizeLinear), and leaves alone those it gives an integer kernel; the
outputs are those of the model as written."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.onnxruntime.float_weights import fold_float_convolution_weights, needs_folding


def _qdq_model() -> onnx.ModelProto:
    """x -> Q/DQ -> conv_int (its output through Q/DQ: an integer kernel) -> conv_float (per-channel weight and
    int32 bias through DQ, its output read by a float HardSigmoid) -> Mul."""
    rng = np.random.default_rng(3)
    w1 = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
    w2 = rng.integers(-127, 128, (6, 4, 3, 3), dtype=np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "s_x"),
        numpy_helper.from_array(np.array(128, np.uint8), "z_x"),
        numpy_helper.from_array(w1, "w1_q"), numpy_helper.from_array(np.array(0.01, np.float32), "s_w1"),
        numpy_helper.from_array(np.array(0.1, np.float32), "s_y"),
        numpy_helper.from_array(np.array(128, np.uint8), "z_y"),
        numpy_helper.from_array(w2, "w2_q"),
        numpy_helper.from_array(rng.uniform(0.002, 0.02, 6).astype(np.float32), "s_w2"),
        numpy_helper.from_array(np.zeros(6, np.int8), "z_w2"),
        numpy_helper.from_array(rng.integers(-500, 500, 6).astype(np.int32), "b2_q"),
        numpy_helper.from_array(rng.uniform(1e-4, 1e-3, 6).astype(np.float32), "s_b2"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["x_q"]),
        helper.make_node("DequantizeLinear", ["x_q", "s_x", "z_x"], ["x_dq"]),
        helper.make_node("DequantizeLinear", ["w1_q", "s_w1"], ["w1"]),
        helper.make_node("Conv", ["x_dq", "w1"], ["y"], name="conv_int", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["y", "s_y", "z_y"], ["y_q"]),
        helper.make_node("DequantizeLinear", ["y_q", "s_y", "z_y"], ["y_dq"]),
        helper.make_node("DequantizeLinear", ["w2_q", "s_w2", "z_w2"], ["w2"], axis=0),
        helper.make_node("DequantizeLinear", ["b2_q", "s_b2"], ["b2"], axis=0),
        helper.make_node("Conv", ["y_dq", "w2", "b2"], ["z"], name="conv_float", pads=[1, 1, 1, 1]),
        helper.make_node("HardSigmoid", ["z"], ["gate"]),
        helper.make_node("Mul", ["z", "gate"], ["out"]),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["n", 6, 8, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def test_only_the_float_convolutions_weights_are_folded_and_outputs_are_unchanged(tmp_path) -> None:
    model = _qdq_model()
    assert needs_folding(model)
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    assert fold_float_convolution_weights(folded) == 2  # conv_float's weight and bias, not conv_int's weight
    by_name = {n.name: n for n in folded.graph.node}
    assert by_name["conv_int"].input[1] == "w1"  # still dequantized in the graph: ONNX Runtime's QLinearConv
    assert by_name["conv_float"].input[1] in {t.name for t in folded.graph.initializer}
    assert not needs_folding(folded)

    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    written = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = written.run(None, {"x": x})[0]
    path = tmp_path / "qdq.onnx"
    onnx.save(model, path)
    for artifact in (path, model):  # a file and a model held in memory
        with OnnxRuntimeBackend(artifact) as backend:
            assert backend.folded_weights == 2
            got = backend.run({"x": x})[0]
        # The same values; a pre-packed float kernel may sum in another order, so not always to the last bit.
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

