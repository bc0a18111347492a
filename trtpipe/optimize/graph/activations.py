"""Observe intermediate activations of an ONNX model on real data.

FP16 conversion needs each node's largest magnitude (to keep overflowing nodes in FP32) and INT8 calibration
needs ranges and histograms. Both come from one mechanism: expose the tensors as extra graph outputs and run
ONNX Runtime CPU over the data in batches, keeping running statistics rather than the activations themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from trtpipe.inputs import Batch, named
from trtpipe.onnx_info import graph_inputs
from trtpipe.runtime.registry import probe_session

FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE}


def float_activations(model: onnx.ModelProto) -> list[str]:
    """Names of the float tensors that nodes produce (in graph order) plus float graph inputs."""
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in
             [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    names = [i.name for i in graph_inputs(model) if types.get(i.name) in FLOAT_TYPES]
    for node in model.graph.node:
        names += [o for o in node.output if o and types.get(o) in FLOAT_TYPES and node.op_type != "Constant"]
    return list(dict.fromkeys(names))


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
    session = probe_session(model, exposing=names)
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


def channel_ranges(model: onnx.ModelProto, names: list[str], batches: list[Batch],
                   positive: AbstractSet[str] = frozenset()) -> dict[str, np.ndarray]:
    """Per-channel (axis 1) max |value| of each tensor in ``names`` over all batches, in FP32 (for the names in
    ``positive``: max of the positive part)."""
    return {name: np.maximum(high, 0) if name in positive else np.maximum(-low, high)
            for name, (low, high) in channel_bounds(model, names, batches).items()}


def channel_bounds(model: onnx.ModelProto, names: list[str],
                   batches: list[Batch]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-channel (axis 1) lowest and highest value of each tensor in ``names`` over all batches, in FP32."""
    if not names:  # ONNX Runtime would hand back every graph output for an empty list
        return {}
    session = probe_session(model, exposing=names)
    bounds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for batch in batches:
        for name, value in zip(names, session.run(names, feeds(session, batch)), strict=True):
            flat = np.moveaxis(value, 1, 0).reshape(value.shape[1], -1)
            low, high = flat.min(axis=1), flat.max(axis=1)
            if name in bounds:
                low, high = np.minimum(bounds[name][0], low), np.maximum(bounds[name][1], high)
            bounds[name] = (low, high)
    return bounds
