"""Logits of an in-memory ONNX model over a data set, on ONNX Runtime CPU: what accuracy figures are made of."""

from __future__ import annotations

import numpy as np
import onnx

from trtpipe.runtime.onnxruntime.backend import OnnxRuntimeBackend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import GraphOptimization

EVAL_BATCH = 64


def logits(model: onnx.ModelProto, images: np.ndarray, *,
           optimization: GraphOptimization = GraphOptimization.ALL, batch: int | None = None) -> np.ndarray:
    """Run ``model`` over ``images``; a static batch size drops the remainder that does not fill a batch."""
    with OnnxRuntimeBackend(model, RunOptions(optimization=optimization)) as backend:
        return backend.run_chunked(images, batch or EVAL_BATCH)
