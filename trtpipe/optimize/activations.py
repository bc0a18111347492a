"""Observe intermediate activations of an ONNX model on real data.

FP16 conversion needs each node's largest magnitude (to keep overflowing nodes in FP32) and INT8 calibration
needs ranges and histograms. Both come from one mechanism: expose the tensors as extra graph outputs and run
ONNX Runtime CPU over the data in batches, keeping running statistics rather than the activations themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from trtpipe.inputs import Batch, named

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}


def float_activations(model: onnx.ModelProto) -> list[str]:
    """Names of the float tensors that nodes produce (in graph order) plus float graph inputs."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    initializers = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers and types.get(i.name) in FLOAT_TYPES]
    for node in model.graph.node:
        names += [o for o in node.output if o and types.get(o) in FLOAT_TYPES and node.op_type != "Constant"]
    return list(dict.fromkeys(names))


def with_outputs(model: onnx.ModelProto, names: Iterable[str]) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs ``names``."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    existing = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in existing:
            exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
    return exposed


@dataclass
class RunningStats:
    minimum: float = float("inf")
    maximum: float = float("-inf")
    abs_max: float = 0.0
    histogram: np.ndarray | None = None
    edges: np.ndarray | None = None

    def update(self, array: np.ndarray) -> None:
        if array.size == 0:
            return
        finite = array[np.isfinite(array)] if not np.isfinite(array).all() else array
        low, high = float(finite.min()), float(finite.max())
        self.minimum, self.maximum = min(self.minimum, low), max(self.maximum, high)
        self.abs_max = max(self.abs_max, abs(low), abs(high))


def feeds(session: Any, batch: Batch) -> dict[str, np.ndarray]:
    """``batch`` keyed by an ONNX Runtime session's input names (a bare array: its only input), holding only the
    inputs the session takes (a sub-graph may read fewer than the model)."""
    names = [i.name for i in session.get_inputs()]
    given = named(batch, names)
    return {name: given[name] for name in names if name in given}


def _session(model: onnx.ModelProto):  # type: ignore[no-untyped-def]
    import onnxruntime as ort

    options = ort.SessionOptions()
    # No graph rewrites: every exposed tensor must be computed exactly as the graph says.
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def observe(
    model: onnx.ModelProto,
    names: list[str],
    batches: Iterable[Batch],
    *,
    histogram_bins: int = 0,
    ranges: dict[str, RunningStats] | None = None,
    on_batch: Callable[[], None] | None = None,
) -> dict[str, RunningStats]:
    """Run the batches and return per-tensor min/max/abs-max; with ``histogram_bins`` and the ``ranges``
    of a first pass, also a histogram of each tensor over [-abs_max, abs_max]."""
    session = _session(with_outputs(model, names))
    stats = {name: RunningStats() for name in names}
    for batch in batches:
        values = session.run(names, feeds(session, batch))
        for name, value in zip(names, values, strict=True):
            value = np.asarray(value, dtype=np.float32)
            stats[name].update(value)
            if histogram_bins and ranges is not None:
                bound = max(ranges[name].abs_max, 1e-12)
                counts, edges = np.histogram(value, bins=histogram_bins, range=(-bound, bound))
                if stats[name].histogram is None:
                    stats[name].histogram, stats[name].edges = counts.astype(np.float64), edges
                else:
                    stats[name].histogram += counts
        if on_batch:
            on_batch()
    return stats
