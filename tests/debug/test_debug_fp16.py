"""``trtpipe debug`` shows the layer an FP16 region loses at as a GPU computes it (every FP16 tensor rounded where
it is written), where ONNX Runtime's CPU provider alone would run the region in FP32 and show nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import x_to_y
from trtpipe.debug.compare import debug_model
from trtpipe.debug.options import DebugOptions

OFFSET = 2048.0  # FP16's step is 2 from 2048 to 4096: a small value added to it is rounded away


def _graph(half: bool) -> onnx.ModelProto:
    """x + 2048 - 2048, tensors named sum and difference; ``half``: computed in FP16 between two Casts."""
    offset = numpy_helper.from_array(np.array(OFFSET, np.float16 if half else np.float32), "offset")
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16)] if half else []
    start = "x16" if half else "x"
    nodes += [helper.make_node("Add", [start, "offset"], ["sum"], name="add"),
              helper.make_node("Sub", ["sum", "offset"], ["difference"], name="sub"),
              helper.make_node("Cast", ["difference"], ["y"], to=TensorProto.FLOAT, name="out") if half
              else helper.make_node("Identity", ["difference"], ["y"], name="out")]
    return x_to_y(nodes, [offset], ["N", 8], ["N", 8], name="offset")


def test_the_first_jump_is_where_fp16_rounds_the_value_away(tmp_path: Path) -> None:
    reference, model, data = tmp_path / "fp32.onnx", tmp_path / "fp16.onnx", tmp_path / "x.npy"
    onnx.save(_graph(half=False), reference)
    onnx.save(_graph(half=True), model)
    np.save(data, np.random.default_rng(0).uniform(0.5, 1.5, (4, 8)).astype(np.float32))
    report = debug_model(model, DebugOptions(reference=reference, data=str(data), samples=4))
    rows = {row.tensor: row for row in report.rows}
    assert rows["sum"].relative_error < 1e-3  # 2049.3 is 2050 in FP16: a small error relative to the sum
    assert rows["difference"].relative_error > 0.3  # ... and all of x's value once 2048 is taken away again
    assert report.first_jump is not None and report.first_jump.tensor == "difference"
