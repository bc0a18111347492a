"""A variant's host memory is measured in a fresh process: what serving it adds, whatever ran before it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from trtpipe.bench.isolated import VariantSpec, host_memory_alone
from trtpipe.inputs import InputSpec
from trtpipe.vocab import BackendKind

CHANNELS, SIDE = 64, 128  # batch 32: a 32x64x128x128 float activation, 134 MB


@pytest.fixture(scope="module")
def wide_conv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One 3x3 convolution to 64 channels at 128x128: its output alone grows by 4 MB per item of the batch."""
    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((CHANNELS, 3, 3, 3), dtype=np.float32),
                                     "weight")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", "weight"], ["features"], pads=[1, 1, 1, 1]),
         helper.make_node("ReduceMean", ["features"], ["output"], axes=[2, 3], keepdims=0)],
        "wide_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, SIDE, SIDE])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", CHANNELS])],
        [weight])
    path = tmp_path_factory.mktemp("isolated") / "wide_conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_the_figure_follows_what_the_variant_runs(wide_conv: Path) -> None:
    """The child really loads and runs each batch: batch 32 needs its 134 MB activation on top of batch 1's."""
    spec = VariantSpec(BackendKind.ONNXRUNTIME, str(wide_conv), (InputSpec("input", (None, 3, SIDE, SIDE)),), (32, 1),
                       {"threads": 1})
    figures = host_memory_alone(spec, "wide conv")
    assert set(figures) == {1, 32}
    assert figures[1] is not None and figures[1] > 0
    assert figures[32] is not None and figures[32] - figures[1] >= 100


def test_a_variant_that_cannot_open_gets_no_figure_and_one_line(tmp_path: Path,
                                                               capfd: pytest.CaptureFixture[str]) -> None:
    spec = VariantSpec(BackendKind.ONNXRUNTIME, str(tmp_path / "gone.onnx"), (InputSpec("input", (1, 3, 8, 8)),),
                       (1, 4))
    figures = host_memory_alone(spec, "gone variant")
    assert figures == {1: None, 4: None}  # never a guess
    warning = capfd.readouterr().err
    assert "gone variant: host memory not measured" in warning and "gone.onnx" in warning


def test_a_spec_travels_as_plain_json_with_every_input() -> None:
    """Two inputs, one of them uint8 pixels with a range: what the child rebuilds is what the parent sent."""
    import json

    spec = VariantSpec(BackendKind.ONNXRUNTIME, "model.onnx",
                       (InputSpec("image", (1, 16, 16, 3), "uint8", (0.0, 255.0)), InputSpec("aux", (1, 4))),
                       (1, 8), {"threads": 1})
    assert VariantSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
