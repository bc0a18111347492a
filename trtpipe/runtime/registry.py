"""Which backend runs what: backends are named by the vocabulary's import strings, so listing or choosing
one never imports torch, onnxruntime or tensorrt; a backend's module is imported only when it is opened."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from trtpipe.errors import BadInput
from trtpipe.runtime.base import Backend
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import ArtifactKind, BackendKind

if TYPE_CHECKING:
    from trtpipe.runtime.artifacts import ArtifactDescription


class ArtifactBackend(Protocol):
    """What every artifact backend's class is: called with the artifact (a path or its description) and the run
    settings, it opens the artifact. (TorchBackend, which wraps a live module, is not one.)"""

    def __call__(self, artifact: Path | ArtifactDescription, options: RunOptions | None = None, /) -> Backend: ...


def backend_class(kind: BackendKind) -> ArtifactBackend:
    module_name, class_name = kind.implementation.split(":")
    opener: ArtifactBackend = getattr(importlib.import_module(module_name), class_name)
    return opener


def artifact_kind(path: Path) -> ArtifactKind:
    """The kind of an artifact file, judged by its suffix."""
    kind = ArtifactKind.for_path(Path(path).name)
    if kind is None:
        raise BadInput(f"Cannot run {path}: trtpipe runs {', '.join(ArtifactKind.all_suffixes())} artifacts; give "
                       "the PyTorch model as MODEL instead.")
    return kind


def open_artifact(artifact: Path | ArtifactDescription, options: RunOptions | None = None, *,
                  runtime: BackendKind | None = None) -> Backend:
    """Open an artifact with the backend its description calls for, or with ``runtime`` where that can run it (an
    ONNX file on OpenVINO), with the caller's settings over the ones the artifact needs to run faithfully."""
    from trtpipe.runtime.artifacts import ArtifactDescription, describe_artifact

    description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(Path(artifact))
    backend = runtime or description.backend
    if backend not in description.kind.runtimes:
        raise BadInput(f"{description.path} cannot run on {backend}: a {description.kind} artifact runs on "
                       f"{', '.join(map(str, description.kind.runtimes))}.")
    settings = description.settings_for(backend, options or RunOptions())
    return backend_class(backend)(description, settings)
