"""The probe session every look inside a graph opens (calibration, equalization, AdaRound, bias correction, debug,
the converter's batch check): the graph's tensors exposed on request, computed as written, on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from tests.builders import constant, x_to_y
from trtpipe.runtime.onnxruntime.probe import probe_session


def _double_then_add_one() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "two"], ["doubled"], name="double"),
             helper.make_node("Add", ["doubled", "one"], ["y"], name="add_one")]
    return x_to_y(nodes, [constant(2.0, "two"), constant(1.0, "one")], ["n", 3], ["n", 3])


def test_an_exposed_intermediate_tensor_is_returned_beside_the_outputs(tmp_path: Path) -> None:
    model = _double_then_add_one()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / "model.onnx"
    onnx.save(model, path)
    for source in (model, path):
        session = probe_session(source, exposing=["doubled"])
        assert [o.name for o in session.get_outputs()] == ["y", "doubled"]
        y, doubled = session.run(None, {"x": x})
        np.testing.assert_array_equal(doubled, x * 2)
        np.testing.assert_array_equal(y, x * 2 + 1)
    assert [o.name for o in model.graph.output] == ["y"]  # the caller's model is left as it was


def test_it_runs_the_graph_as_written_on_the_cpu() -> None:
    session = probe_session(_double_then_add_one())
    assert session.get_providers() == ["CPUExecutionProvider"]
    assert session.get_session_options().graph_optimization_level == ort.GraphOptimizationLevel.ORT_DISABLE_ALL
