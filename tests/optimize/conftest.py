from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest


def run(model: onnx.ModelProto | Path, x: np.ndarray, optimization: str = "all") -> np.ndarray:
    options = ort.SessionOptions()
    if optimization == "disable":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.fixture(scope="session")
def outlier_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained digits model with one channel of layer2's output scaled by 1000 and layer3 scaled back:
    identical in FP32, but a per-tensor INT8 scale for that activation wipes out every other channel, so
    full INT8 collapses and only keeping the affected nodes in FP32 recovers it."""
    import torch

    from trtpipe.convert import convert
    from trtpipe.models.digits import load_trained
    from trtpipe.models.loader import LoadedModel

    model = load_trained()
    with torch.no_grad():
        for bn in (model.layer2.bn2, model.layer2.shortcut[1]):
            bn.weight[0] *= 1000.0
            bn.bias[0] *= 1000.0
        model.layer3.conv1.weight[:, 0] /= 1000.0
        model.layer3.shortcut[0].weight[:, 0] /= 1000.0
    out = tmp_path_factory.mktemp("outlier") / "outlier.onnx"
    convert(LoadedModel(model, "outlier", "test", "factory", (1, 1, 32, 32), dataset="digits"), out)
    return out
