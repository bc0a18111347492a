"""--dynamic-batch: a static batch-1 ONNX made to take any batch where its graph allows, refused in one line where
it does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.errors import BadInput
from trtpipe.optimize.graph.dynamic_batch import make_batch_dynamic


def _batch_one_model(shape_first: int, *, mix: bool = False) -> onnx.ModelProto:
    """x [1,2,4,4] -> Conv -> Reshape to [shape_first, 32] -> (optionally a ReduceSum over the batch) -> y."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((2, 2, 1, 1)).astype(np.float32), "w")
    target = numpy_helper.from_array(np.array([shape_first, 32], np.int64), "target")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Reshape", ["c", "target"], ["r" if mix else "y"], name="flatten")]
    if mix:  # every row becomes the sum over the batch: images mixed, which no shape check sees
        axes = numpy_helper.from_array(np.array([0], np.int64), "axes")
        nodes.append(helper.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=1, name="mix"))
        nodes.append(helper.make_node("Add", ["r", "s"], ["y"], name="add"))
    return x_to_y(nodes, [weight, target, *([axes] if mix else [])], [1, 2, 4, 4], [1, 32], opset=18, ir_version=None)


def test_a_batch_one_reshape_is_made_to_copy_the_batch() -> None:
    model = _batch_one_model(1)
    dynamic = make_batch_dynamic(model)
    assert dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    session = ort.InferenceSession(dynamic.SerializeToString(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((3, 2, 4, 4)).astype(np.float32)
    out = session.run(None, {"x": x})[0]
    assert out.shape == (3, 32)
    for row in range(3):
        np.testing.assert_allclose(out[row], original.run(None, {"x": x[row : row + 1]})[0][0], rtol=1e-6)


def test_a_graph_that_mixes_the_images_of_a_batch_is_refused_in_one_line() -> None:
    with pytest.raises(BadInput, match="output 'y' at batch 2 is not two copies of its batch-1 output"):
        make_batch_dynamic(_batch_one_model(1, mix=True))


def test_an_already_dynamic_model_is_told_so(digits_onnx: Path) -> None:
    with pytest.raises(BadInput, match="already dynamic"):
        make_batch_dynamic(onnx.load(str(digits_onnx)))


def test_optimize_takes_dynamic_batch(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "static.onnx"
    onnx.save(_batch_one_model(1), str(source))
    out = tmp_path / "dynamic.onnx"
    result = run_cli("optimize", source, "-o", out, "--dynamic-batch", "--precision", "fp16", "--calib", "random")
    assert result.exit_code == 0, result.output
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.run(None, {"x": np.zeros((5, 2, 4, 4), np.float32)})[0].shape == (5, 32)


def test_the_packaged_batch_one_detector_takes_any_batch() -> None:
    """PP-PicoDet's packaged file spells its batch as 1 in Constant Reshape targets: made dynamic, each image of a
    batch gets the outputs it gets alone."""
    from trtpipe.models.packaged import packaged_onnx

    try:
        path = packaged_onnx("picodet_layout_cdla")
    except BadInput as missing:
        pytest.skip(str(missing))
    model = onnx.load(str(path))
    dynamic = make_batch_dynamic(model)
    session = ort.InferenceSession(dynamic.SerializeToString(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    images = np.random.default_rng(2).random((2, 3, 800, 608), dtype=np.float32)
    together = session.run(None, {"image": images})
    for index in range(2):
        alone = original.run(None, {"image": images[index : index + 1]})
        for joint, single in zip(together, alone, strict=True):
            np.testing.assert_allclose(joint[index], single[0], rtol=1e-4, atol=1e-4)
