"""What a backend folder declares about itself, so nothing outside it needs to know: its settings type, the
artifact kinds it runs, the Python package it needs, the ONNX executions bench names it by and its Triton facts.
Each ``runtime/<engine>/__init__.py`` exports one ``ENTRY``; ``registry.py`` lists them, one line each. Standard
library and the vocabulary only: listing backends never imports an engine. (What an artifact is comes from the
record of its kind, in the artifact room: trtpipe.artifact.description.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trtpipe.vocab import ArtifactKind, BackendKind, OnnxExecution

if TYPE_CHECKING:
    from trtpipe.artifact.description import ArtifactDescription


def settings_names(settings: type) -> frozenset[str]:
    """The run settings a backend's settings type holds (the fields of its dataclass)."""
    return frozenset(f.name for f in dataclasses.fields(settings))


@dataclass(frozen=True)
class TritonFacts:
    """How Triton runs what this backend runs: a platform of Triton's own (``onnxruntime_onnx``), or a Triton
    backend named after ours with its config parameters; "" for neither (Triton's Python backend runs it)."""

    platform: str = ""
    instance_kind: str = "KIND_CPU"
    backend: str = ""  # a Triton backend of this name reads the artifact by its file name (OpenVINO's)
    # The config parameters that backend takes: (a BF16 file, threads per instance) -> {name: value}
    parameters: Callable[[bool, int | None], dict[str, str]] | None = None
    # Accelerator options for Triton's native platform from an artifact's tuned record: ((key, value), ...)
    accelerator_options: Callable[[ArtifactDescription], tuple[tuple[str, str], ...]] | None = None


@dataclass(frozen=True)
class BackendEntry:
    """One backend as the registry lists it; its class is imported only when an artifact is opened on it."""

    kind: BackendKind
    implementation: str  # "module:Class", imported when an artifact is opened on it
    settings: type  # the dataclass of run settings it receives (each field also a RunOptions field at the edge)
    runs: tuple[ArtifactKind, ...] = ()  # the artifact kinds it opens (an engine, a package; ONNX on two backends)
    library: str = ""  # the Python package it runs on
    executions: tuple[OnnxExecution, ...] = ()  # how bench names its ways of running an ONNX file
    triton: TritonFacts | None = None

    def opener(self) -> Any:
        """The backend class, imported now."""
        return _imported(self.implementation)


def _imported(target: str) -> Any:
    import importlib

    module_name, name = target.split(":")
    return getattr(importlib.import_module(module_name), name)
