"""An engine's description, read from its sidecar and checked against the file: the describe hook this folder
gives the registry for ``.plan``/``.engine`` files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtpipe.runtime.artifacts import ArtifactDescription
from trtpipe.runtime.base import TensorInfo
from trtpipe.vocab import ArtifactKind, dtype


def describe(path: Path) -> ArtifactDescription:
    """The description of the engine at ``path``; BadInput where its sidecar is missing or describes another file."""
    from trtpipe.runtime.tensorrt.sidecar import check_engine_file, read_sidecar

    sidecar = read_sidecar(path)
    check_engine_file(path, sidecar)
    return ArtifactDescription(
        path, ArtifactKind.TENSORRT_ENGINE, sidecar.precision, None, None, _sidecar_io(sidecar.inputs),
        _sidecar_io(sidecar.outputs), size_bytes=path.stat().st_size, build_seconds=sidecar.build_seconds,
        engine=sidecar)


def _sidecar_io(tensors: list[dict[str, Any]]) -> tuple[TensorInfo, ...]:
    """A sidecar records TensorRT's type names (FLOAT, HALF, INT8...); the vocabulary's table knows them."""
    def info(tensor: dict[str, Any]) -> TensorInfo:
        entry = dtype(tensorrt=str(tensor.get("dtype", "")))
        shape = tuple(None if not isinstance(d, int) or d < 0 else d for d in tensor.get("shape", []))
        return TensorInfo(str(tensor.get("name", "")), entry.numpy if entry else str(tensor.get("dtype")), shape)

    return tuple(info(t) for t in tensors)
