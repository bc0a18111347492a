"""An in-memory ONNX model's outputs over a data set, on ONNX Runtime CPU: what accuracy figures are made of."""

from __future__ import annotations

import numpy as np
import onnx

from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import GraphOptimization

EVAL_BATCH = 64


def outputs(model: onnx.ModelProto, images: np.ndarray, *,
            optimization: GraphOptimization = GraphOptimization.ALL, batch: int | None = None) -> list[np.ndarray]:
    """Every output of ``model`` over ``images``; a static batch size drops the remainder that does not fill a
    batch."""
    with OnnxRuntimeBackend(model, RunOptions(optimization=optimization)) as backend:
        return backend.run_chunked(images, batch or EVAL_BATCH)


def logits(model: onnx.ModelProto, images: np.ndarray, *,
           optimization: GraphOptimization = GraphOptimization.ALL, batch: int | None = None) -> np.ndarray:
    """The first output (a classifier's logits; the one sensitivity ranking measures error on)."""
    return outputs(model, images, optimization=optimization, batch=batch)[0]
