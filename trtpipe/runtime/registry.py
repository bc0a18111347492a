"""Which backend runs what: backends are named by the vocabulary's import strings, so listing or choosing
one never imports torch, onnxruntime or tensorrt; a backend's module is imported only when it is opened."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput
from trtpipe.runtime.base import Backend
from trtpipe.vocab import ArtifactKind, BackendKind


def backend_class(kind: BackendKind) -> type[Backend]:
    module_name, class_name = BackendKind(kind).implementation.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def artifact_kind(path: Path) -> ArtifactKind:
    """The kind of an artifact file, judged by its suffix."""
    kind = ArtifactKind.for_path(Path(path).name)
    if kind is None:
        raise BadInput(f"Cannot run {path}: trtpipe runs {', '.join(ArtifactKind.all_suffixes())} artifacts; give "
                       "the PyTorch model as MODEL instead.")
    return kind


def open_artifact(path: Path, *, runtime: str | None = None, **options: Any) -> Backend:
    """Open an artifact file with the backend its kind calls for, or with ``runtime`` where that can run it (an
    ONNX file on OpenVINO)."""
    kind = artifact_kind(path)
    backend = BackendKind(runtime) if runtime else kind.backend
    if backend not in kind.runtimes:
        raise BadInput(f"{path} cannot run on {backend}: a {kind} artifact runs on "
                       f"{', '.join(map(str, kind.runtimes))}.")
    return backend_class(backend)(Path(path), **options)
