"""Chunked runs join each output on its own batch axis (trtpipe.runtime.batch_axes): a time-major ``[T, N, C]``
output, one whose batch axis only runs reveal, and a batch-free output, each read back samples first."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from tests.builders import ctc_reader, onnx_model, tensor
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.runtime.batch_axes import from_graph, from_runs
from trtpipe.runtime.registry import open_model

SAMPLES = 100  # more than two chunks of 40


def _images() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((SAMPLES, 1, 8, 24)).astype(np.float32)


def _whole(model, x: np.ndarray) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_a_time_major_output_is_joined_on_its_batch_axis_named_in_the_graph() -> None:
    model, x = ctc_reader("tnc"), _images()
    with open_model(model) as backend:
        (logits,) = backend.run_chunked(x, 40)
        found = backend.batch_axes(x)
    assert found.axes == (1,) and found.how == "the graph's shapes"
    assert logits.shape == (SAMPLES, 24, 37)  # samples first, every timestep of every sample
    np.testing.assert_allclose(logits, np.moveaxis(_whole(model, x)[0], 1, 0), rtol=1e-5, atol=1e-5)


def test_a_batch_axis_the_graph_does_not_name_is_found_by_runs_and_a_batch_free_output_is_kept_once() -> None:
    model, x = ctc_reader("ntc", batch_free=True), _images()
    with open_model(model) as backend:
        logits, anchors = backend.run_chunked(x, 40)
        found = backend.batch_axes(x)
    assert found.axes == (0, None) and found.how == "runs of 1 and 2 samples"
    whole = _whole(model, x)
    np.testing.assert_allclose(logits, whole[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(anchors, whole[1])  # [5, 4] once, not three chunks' copies
    assert found.describe(["logits", "anchors"]) == \
        "the batch axis of 'anchors' has none (from runs of 1 and 2 samples)"


def test_a_batch_free_output_that_changes_with_the_samples_is_refused_in_one_line() -> None:
    """The mean over the batch: no axis follows the batch, and each chunk's value differs."""
    model = onnx_model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[0], keepdims=0)], [],
                       [tensor("x", ["n", 3])], [tensor("y", [3])], opset=13)
    with open_model(model) as backend, pytest.raises(BadInput) as refused:
        backend.run_chunked(np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32), 4)
    assert "Output 'y' (shaped [3]) has no batch axis, yet its values change with the samples" in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_static_batch_names_its_axis_by_size_and_runs_find_rows_per_sample() -> None:
    static = from_graph([TensorInfo("x", "float32", (1, 3, 8, 8))],
                        [TensorInfo("t", "float32", (20, 1, 37)), TensorInfo("n", "float32", (1, 20, 37)),
                         TensorInfo("grid", "float32", (5, 4))])
    assert static is not None and static.axes == (1, 0, None)
    assert from_graph([TensorInfo("x", "float32", ("n", 3))], [TensorInfo("y", "float32", ("m", 3))]) is None
    rows = from_runs([np.zeros((3, 4)), np.zeros((7,))], [np.zeros((6, 4)), np.zeros((7,))])
    assert rows.axes == (0, None)


