"""trtpipe.load: one API for every kind of artifact, safe from many threads, that embeds a model without the server."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import trtpipe
from trtpipe.errors import BadInput
from trtpipe.models.data import load_split


def test_load_picks_the_backend_from_the_artifact(digits_onnx: Path) -> None:
    x = load_split("digits", "eval").images[:4]
    with trtpipe.load(digits_onnx) as onnx_model, trtpipe.load("digits_resnet") as torch_model:
        assert onnx_model.kind == "onnxruntime" and torch_model.kind == "torch"
        assert onnx_model.inputs[0].name == "input" and onnx_model.dynamic_batch
        np.testing.assert_allclose(onnx_model.predict(x), torch_model.predict(x), atol=1e-4)
        assert repr(onnx_model).startswith("<trtpipe.Model model on onnxruntime (fp32)")


def test_predict_from_many_threads(digits_onnx: Path) -> None:
    images = load_split("digits", "eval").images[:64]
    for source in (digits_onnx, "digits_resnet"):
        with trtpipe.load(source) as model:
            expected = model.predict(images)
            with ThreadPoolExecutor(8) as pool:
                rows = list(pool.map(lambda i, model=model: model.predict(images[i : i + 1])[0], range(64)))
            np.testing.assert_allclose(np.stack(rows), expected, atol=1e-4)


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist"):
        trtpipe.load(tmp_path / "missing.onnx")
    with pytest.raises(BadInput, match="Unknown model"):
        trtpipe.load("resnet5")
    with pytest.raises(BadInput, match="has dtype float64"), trtpipe.load("digits_resnet") as model:
        model.predict(np.zeros((1, 1, 32, 32)))


def test_embedding_an_artifact_loads_no_server_or_tool_code(digits_onnx: Path) -> None:
    """``trtpipe.load`` lives on the artifact's side: a service that embeds a model and predicts with it imports
    nothing of ``trtpipe serve`` (HTTP, gRPC, the repository) or of the harnesses."""
    code = ("import sys, numpy as np, trtpipe\n"
            f"model = trtpipe.load({str(digits_onnx)!r})\n"
            "assert model.predict(np.zeros((2, 1, 32, 32), np.float32)).shape == (2, 10)\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('trtpipe.serve', 'trtpipe.tools')))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == []
    assert trtpipe.load.__module__ == "trtpipe.embedding"
