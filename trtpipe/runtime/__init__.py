"""The runtime seam: one backend per engine kind, one interface for verification, bench and serve.

Backends are named here by import string, so listing them or choosing one never imports torch,
onnxruntime or tensorrt; the module is imported only when a backend is opened.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput
from trtpipe.runtime.base import Backend, TensorInfo

__all__ = ["BACKENDS", "Backend", "TensorInfo", "backend_class", "backend_kind_for", "open_artifact"]

BACKENDS: dict[str, str] = {
    "torch": "trtpipe.runtime.torch_backend:TorchBackend",
    "onnxruntime": "trtpipe.runtime.onnxruntime_backend:OnnxRuntimeBackend",
    "tensorrt": "trtpipe.runtime.tensorrt_backend:TensorRTBackend",
}

ARTIFACT_SUFFIXES: dict[str, str] = {".onnx": "onnxruntime", ".plan": "tensorrt", ".engine": "tensorrt"}


def backend_class(kind: str) -> type[Backend]:
    if kind not in BACKENDS:
        raise BadInput(f"Unknown backend '{kind}': the backends are {', '.join(BACKENDS)}.")
    module_name, class_name = BACKENDS[kind].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def backend_kind_for(path: Path) -> str:
    """Which backend runs an artifact file, judged by its suffix."""
    kind = ARTIFACT_SUFFIXES.get(Path(path).suffix.lower())
    if kind is None:
        raise BadInput(f"Cannot run {path}: trtpipe runs {', '.join(ARTIFACT_SUFFIXES)} artifacts; give the "
                       "PyTorch model as MODEL instead.")
    return kind


def open_artifact(path: Path, **options: Any) -> Backend:
    """Open an artifact file with the backend its kind calls for."""
    return backend_class(backend_kind_for(path))(Path(path), **options)
