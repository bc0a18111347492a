"""Tiny ONNX models, built with onnx.helper, that make ONNX Runtime fail the ways a served model can: on one
request's data, on memory, and by outputs that do not keep the batch axis. Each is a real model run by a real
session; nothing is mocked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TABLE = 10  # rows of the lookup table: an index past it is refused by ONNX Runtime's Gather (INVALID_ARGUMENT)


def _save(graph: onnx.GraphProto, repository: Path, name: str) -> Path:
    path = repository / name / "1" / "model.onnx"
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9), path)
    return path


def lookup(repository: Path, name: str = "lookup") -> Path:
    """``output[i] = table[int(input[i])]`` for a table of 10: index 100 is refused, by this request's data alone."""
    table = numpy_helper.from_array(np.arange(TABLE, dtype=np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Cast", ["input"], ["index"], to=TensorProto.INT64),
         helper.make_node("Gather", ["table", "index"], ["output"], axis=0)], "lookup",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1])], initializer=[table])
    return _save(graph, repository, name)


def regroup(repository: Path, name: str = "regroup", *, declared: str | None = "m") -> Path:
    """Reshape ``[n, k]`` to ``[-1, 4]``: ``n * k / 4`` rows, so the batch axis changes, and a ``k`` that is not a
    multiple of 4 is refused (ONNX Runtime: FAIL from the Reshape node, with its source path in the message).
    ``declared`` names the output's first dimension (None: left for ONNX Runtime, which cannot name it)."""
    shape = numpy_helper.from_array(np.array([-1, 4], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["input", "shape"], ["output"])], "regroup",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", "k"])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [declared, 4])], initializer=[shape])
    return _save(graph, repository, name)


def wide(repository: Path, width: int, name: str = "wide") -> Path:
    """Each row expanded to ``width`` float32 values, then reduced to its maximum: a batch of ``n`` rows needs
    ``4 * width * n`` bytes at once, from a request of ``n`` numbers."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    shape = numpy_helper.from_array(np.array([1, width], np.int64), "width")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["input", "width"], ["wide"]),
         helper.make_node("ReduceMax", ["wide", "axes"], ["output"], keepdims=1)], "wide",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["n", 1])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["n", 1])], initializer=[axes, shape])
    return _save(graph, repository, name)
