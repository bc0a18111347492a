"""FP16 keeps shape arithmetic in its exporter's types: an anchor grid built from the feature map's run-time size
(as YOLO heads build it) converts, loads and agrees with FP32 at input sizes other than the calibration's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.optimize.graph.fp16_limits import remove_fp16_round_trips
from trtpipe.optimize.passes.fp16 import SHAPE_REASON, convert_fp16

if TYPE_CHECKING:
    from torch import nn


def _session(model: onnx.ModelProto | Path) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"])


def _column_grid_model() -> onnx.ModelProto:
    """y = relu(x + (arange(width) + 0.5)): the column centres of x's last axis, computed from its shape at run
    time as the TorchScript exporter writes ``torch.arange(w, dtype=torch.float)`` (Shape -> Gather -> Cast to
    float -> Range over float start, limit and delta)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "last_axis"], ["width"], name="width", axis=0),
        helper.make_node("Cast", ["width"], ["width_f"], name="width_float", to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "width_f", "one"], ["columns"], name="columns"),
        helper.make_node("Add", ["columns", "half"], ["centres"], name="centres"),
        helper.make_node("Add", ["x", "centres"], ["shifted"], name="shifted"),
        helper.make_node("Relu", ["shifted"], ["y"], name="relu"),
    ]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "last_axis"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    return x_to_y(nodes, inits, ["n", 2, "h", "w"], ["n", 2, "h", "w"], name="column_grid", ir_version=10)


def test_a_range_over_a_run_time_width_keeps_its_types_and_values() -> None:
    model = _column_grid_model()
    rng = np.random.default_rng(0)
    converted, report = convert_fp16(model, [rng.standard_normal((4, 2, 5, 7)).astype(np.float32)])

    session = _session(converted)  # before: Range bound to tensor(float) and tensor(int64), refused at load
    for shape in [(1, 2, 5, 7), (2, 2, 3, 40)]:  # the calibration's width and another
        x = rng.standard_normal(shape).astype(np.float32)
        expected = np.maximum(x + (np.arange(shape[3], dtype=np.float32) + 0.5), 0)
        np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=2e-3, atol=2e-3)
    kept = {item["node"]: item["reason"] for item in report.kept_fp32}
    assert kept == dict.fromkeys(["width_float", "columns", "centres"], SHAPE_REASON)
    initializers = {i.name: i.data_type for i in converted.graph.initializer}
    assert initializers["zero"] == initializers["one"] == initializers["half"] == TensorProto.FLOAT
    # The activation's own arithmetic is still FP16: the pass kept the grid, not the model, in FP32.
    inferred = onnx.shape_inference.infer_shapes(converted, strict_mode=True)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    assert types["shifted"] == TensorProto.FLOAT16


def test_a_round_trip_from_an_integer_casts_the_integer_itself() -> None:
    """int64 -> Cast to FP16 -> Cast to FP32 -> Range (what the converter leaves when it turns an integer's Cast to
    float into one to FP16 and holds the Range that reads it in FP32): the Cast to FP32 reads the integer, so Range
    gets FP32 (not the int64, which mixes its types) and counts past 2048 exactly (FP16 rounds 3001 to 3000)."""
    nodes = [
        helper.make_node("Cast", ["count"], ["count_half"], name="down", to=TensorProto.FLOAT16),
        helper.make_node("Cast", ["count_half"], ["count_float"], name="up", to=TensorProto.FLOAT),
        helper.make_node("Range", ["zero", "count_float", "one"], ["y"], name="range"),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    graph = helper.make_graph(nodes, "round_trip", [helper.make_tensor_value_info("count", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["k"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)

    assert remove_fp16_round_trips(model) == 1
    y = _session(model).run(None, {"count": np.array(3001, np.int64)})[0]
    np.testing.assert_array_equal(y, np.arange(3001, dtype=np.float32))
    assert [n.name for n in model.graph.node] == ["up", "range"] and model.graph.node[0].input[0] == "count"
    onnx.checker.check_model(model, full_check=True)


def test_resize_scales_computed_from_sizes_keep_the_size_they_ask_for() -> None:
    """y = Resize(x, scales = width(guide) / width(x)): x stretched to a guide's width, computed in float from both
    shapes. Computed in FP16, a width of 2049 became 2048 and the output came out one column short."""
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="x_shape"),
        helper.make_node("Shape", ["guide"], ["guide_shape"], name="guide_shape"),
        helper.make_node("Cast", ["x_shape"], ["x_sizes"], name="x_sizes", to=TensorProto.FLOAT),
        helper.make_node("Cast", ["guide_shape"], ["guide_sizes"], name="guide_sizes", to=TensorProto.FLOAT),
        helper.make_node("Div", ["guide_sizes", "x_sizes"], ["ratios"], name="ratios"),
        helper.make_node("Slice", ["ratios", "last", "end"], ["width_ratio"], name="width_ratio"),
        helper.make_node("Concat", ["ones", "width_ratio"], ["scales"], name="scales", axis=0),
        helper.make_node("Resize", ["x", "", "scales"], ["y"], name="stretch", mode="nearest"),
    ]
    inits = [numpy_helper.from_array(np.array([3], np.int64), "last"),
             numpy_helper.from_array(np.array([4], np.int64), "end"),
             numpy_helper.from_array(np.ones(3, np.float32), "ones")]
    graph = helper.make_graph(nodes, "stretch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, "w"]),
                                                 helper.make_tensor_value_info("guide", TensorProto.FLOAT,
                                                                               [1, 1, 1, "gw"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, "yw"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    feeds = {"x": np.random.default_rng(0).random((1, 1, 1, 1000), dtype=np.float32),
             "guide": np.zeros((1, 1, 1, 2049), np.float32)}

    converted, report = convert_fp16(model, [feeds])
    assert _session(converted).run(None, feeds)[0].shape == (1, 1, 1, 2049)
    assert {item["node"] for item in report.kept_fp32} == {"x_sizes", "guide_sizes", "ratios", "width_ratio", "scales"}


def _anchor_head() -> nn.Module:
    """A detector head that decodes around an anchor grid made from its feature map's run-time size, as
    Ultralytics' ``make_anchors`` did when a user exported YOLOv8 with dynamic height and width:
    ``torch.arange(w, dtype=float) + 0.5``, a meshgrid, and a stride tensor of ``h * w`` rows."""
    import torch
    from torch import nn

    class AnchorHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
            self.box = nn.Conv2d(16, 4, 1)  # left, top, right, bottom distances in cells
            self.cls = nn.Conv2d(16, 3, 1)

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            features = torch.relu(self.stem(images))
            h, w = features.shape[2:]
            sx = torch.arange(end=w, dtype=features.dtype) + 0.5
            sy = torch.arange(end=h, dtype=features.dtype) + 0.5
            sy, sx = torch.meshgrid(sy, sx, indexing="ij")
            anchors = torch.stack((sx, sy), -1).view(-1, 2).transpose(0, 1)  # (2, h * w)
            strides = torch.full((1, h * w), 2.0, dtype=features.dtype)
            distances = self.box(features).flatten(2).exp()  # (n, 4, h * w)
            boxes = torch.cat((anchors - distances[:, :2], anchors + distances[:, 2:]), 1) * strides
            return torch.cat((boxes, self.cls(features).flatten(2).sigmoid()), 1)

    torch.manual_seed(0)
    return AnchorHead().eval()


def _export(path: Path, exporter: str) -> Path:
    """The head exported as trtpipe's convert does (torch.onnx.export, dynamo first, TorchScript as its fallback),
    with dynamic height and width besides the batch."""
    import torch

    module, example = _anchor_head(), torch.rand(2, 3, 64, 96)
    if exporter == "dynamo":
        height, width = torch.export.Dim("height", min=4, max=512), torch.export.Dim("width", min=4, max=512)
        torch.onnx.export(module, (example,), str(path), dynamo=True, opset_version=17, input_names=["images"],
                          output_names=["detections"], external_data=False, verbose=False,
                          dynamic_shapes=({0: torch.export.Dim("batch"), 2: 2 * height, 3: 2 * width},))
    else:
        torch.onnx.export(module, (example,), str(path), dynamo=False, opset_version=17, input_names=["images"],
                          output_names=["detections"],
                          dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"},
                                        "detections": {0: "batch", 2: "anchors"}})
    return path


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_a_head_with_a_dynamic_anchor_grid_converts_to_fp16_and_agrees_at_other_sizes(
        tmp_path: Path, exporter: str) -> None:
    from trtpipe.optimize.options import OptimizeOptions
    from trtpipe.optimize.stage import optimize
    from trtpipe.vocab import Precision

    source = _export(tmp_path / "head.onnx", exporter)
    assert "Range" in {n.op_type for n in onnx.load(str(source)).graph.node}  # the grid is computed at run time
    rng = np.random.default_rng(1)
    calib = tmp_path / "calib.npy"
    np.save(calib, rng.random((8, 3, 64, 96), dtype=np.float32))
    out = tmp_path / "head_fp16.onnx"
    optimize(source, out, OptimizeOptions(precision=Precision.FP16, calib=str(calib),
                                          input_shape={"images": (1, 3, 64, 96)}))

    model = onnx.load(str(out))
    assert any(i.data_type == TensorProto.FLOAT16 for i in model.graph.initializer)  # the convolutions are FP16
    reference, half = _session(source), _session(out)
    for size in [(64, 96), (96, 160)]:  # the calibration's size, and one the graph was never run at
        images = rng.random((2, 3, *size), dtype=np.float32)
        expected, got = reference.run(None, {"images": images})[0], half.run(None, {"images": images})[0]
        assert got.shape == expected.shape == (2, 7, size[0] * size[1] // 4)
        # Box corners reach ~160 px, where FP16 keeps steps of 1/8; probabilities keep ~3 digits.
        np.testing.assert_allclose(got, expected, rtol=2e-3, atol=2e-2)
    manifest = json.loads(out.with_suffix(".manifest.json").read_text())
    shape_nodes = {item["node"]: item["op"] for item in manifest["fp16"]["kept_fp32"]
                   if item["reason"] == SHAPE_REASON}
    assert list(shape_nodes.values()).count("Range") == 2
    assert set(shape_nodes) <= set(manifest["artifact"]["fp32_nodes"])
