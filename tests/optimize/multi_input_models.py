"""Tiny ONNX models from elsewhere with the inputs real ones have: two inputs (an image and an auxiliary vector),
and NHWC uint8 pixels that the graph casts, transposes and normalises itself. Built with onnx.helper, seeded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _weights(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def two_input_onnx(path: Path) -> Path:
    """image [N, 3, 16, 16] float through two convolutions, aux [N, 4] float through a Gemm, added, then the
    classifier: logits [N, 10]."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Conv", ["image", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["aux", "wa", "ba"], ["aux_features"], transB=1, name="aux_fc"),
        helper.make_node("Add", ["features", "aux_features"], ["joined"], name="join"),
        helper.make_node("Gemm", ["joined", "wo", "bo"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "two_input",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 16, 16]),
         helper.make_tensor_value_info("aux", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [_weights(rng, "w1", (8, 3, 3, 3)), _weights(rng, "b1", (8,)), _weights(rng, "w2", (8, 8, 3, 3)),
         _weights(rng, "b2", (8,)), _weights(rng, "wa", (8, 4)), _weights(rng, "ba", (8,)),
         _weights(rng, "wo", (10, 8)), _weights(rng, "bo", (10,))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), str(path))
    return path


def nhwc_uint8_onnx(path: Path, *, dynamic_size: bool = False) -> Path:
    """pixels [N, 16, 16, 3] uint8 (``dynamic_size``: [N, H, W, 3]) -> Cast -> Transpose to NCHW -> /255 -> -0.5
    -> Conv -> Relu -> pool -> classifier: logits [N, 10]."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Cast", ["pixels"], ["as_float"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Transpose", ["as_float"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        helper.make_node("Div", ["nchw", "scale"], ["scaled"], name="div"),
        helper.make_node("Sub", ["scaled", "mean"], ["normalised"], name="sub"),
        helper.make_node("Conv", ["normalised", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["r1"], ["pooled"], name="pool"),
        helper.make_node("Flatten", ["pooled"], ["features"], name="flatten"),
        helper.make_node("Gemm", ["features", "wo", "bo"], ["logits"], transB=1, name="fc"),
    ]
    side: list[int | str] = ["H", "W"] if dynamic_size else [16, 16]
    graph = helper.make_graph(
        nodes, "nhwc_uint8",
        [helper.make_tensor_value_info("pixels", TensorProto.UINT8, ["N", *side, 3])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(np.array(255.0, np.float32), "scale"),
         numpy_helper.from_array(np.array(0.5, np.float32), "mean"),
         _weights(rng, "w1", (8, 3, 3, 3)), _weights(rng, "b1", (8,)), _weights(rng, "wo", (10, 8)),
         _weights(rng, "bo", (10,))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), str(path))
    return path


def two_input_data(path: Path, count: int = 40, *, labelled_by: Path | None = None) -> Path:
    """A .npz keyed by input name; with ``labelled_by`` (the model), labels that are its own FP32 top-1."""
    rng = np.random.default_rng(2)
    arrays = {"image": rng.standard_normal((count, 3, 16, 16), dtype=np.float32),
              "aux": rng.standard_normal((count, 4), dtype=np.float32)}
    if labelled_by is not None:
        import onnxruntime as ort

        session = ort.InferenceSession(str(labelled_by), providers=["CPUExecutionProvider"])
        arrays["labels"] = session.run(None, arrays)[0].argmax(1)
    np.savez(path, **arrays)
    return path
