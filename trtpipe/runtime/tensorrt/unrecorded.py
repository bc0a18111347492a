"""TensorRT engines without a trtpipe sidecar (trtexec's), opened only on the user's trust (capability
``OpensUnrecorded``, ``--trust-engine``): TensorRT engines are executable code. Light at import: the backend module
is imported when an engine is described."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trtpipe.runtime.tensorrt.loader import EngineOrigin

if TYPE_CHECKING:
    from pathlib import Path

    from trtpipe.artifact.description import ArtifactDescription

unrecorded_label = str(EngineOrigin.TRUSTED)  # what its rows say in place of a precision


def describe_unrecorded(path: Path, *, trusted: bool) -> ArtifactDescription:
    """The engine described from its sidecar, or where it has none (or one that does not match it) only when
    ``trusted``, else BadInput naming --trust-engine (backend.describe_engine)."""
    from trtpipe.runtime.tensorrt.backend import describe_engine

    return describe_engine(path, trusted=trusted)
