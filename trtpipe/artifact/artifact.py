"""One deployable file and everything trtpipe records of it, opened from its path: ``Artifact.open(path)``.

The records keep their formats and their readers (``NAME.manifest.json`` in trtpipe.manifest, an engine's sidecar in
runtime/tensorrt/sidecar.py, ``model.tuned.json`` in runtime/onnxruntime/tuned.py); this type is the one door to
them, so a caller asks the artifact rather than knowing which file beside it holds what. Its input specs are
resolved once (trtpipe.artifact.inputs) and its lineage followed once (trtpipe.artifact.lineage).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from trtpipe.artifact.inputs import resolve_inputs
from trtpipe.artifact.lineage import Lineage, lineage_of
from trtpipe.errors import BadInput
from trtpipe.files import require_file
from trtpipe.inputs import InputSpec
from trtpipe.manifest import ArtifactManifest, read_manifest
from trtpipe.runtime.registry import artifact_kind
from trtpipe.vocab import ArtifactKind, OnnxExecution

if TYPE_CHECKING:
    from trtpipe.runtime.artifacts import ArtifactDescription
    from trtpipe.runtime.base import Backend
    from trtpipe.runtime.onnxruntime.tuned import TunedRun
    from trtpipe.runtime.options import RunOptions
    from trtpipe.runtime.tensorrt.sidecar import EngineSidecar
    from trtpipe.vocab import BackendKind


class Artifact:
    """A deployable file (an ONNX model, a TensorRT engine, an AOTInductor package) with its kind and its records,
    each read once, when first asked for."""

    def __init__(self, path: Path, kind: ArtifactKind) -> None:
        self.path = Path(path)
        self.kind = kind

    @classmethod
    def open(cls, path: Path | str) -> Artifact:
        """The artifact at ``path``: BadInput (one line) where there is no file or trtpipe runs no file of its kind."""
        path = Path(path)
        require_file(path, "artifact")
        return cls(path, artifact_kind(path))

    def __repr__(self) -> str:
        return f"Artifact({str(self.path)!r}, {self.kind.value})"

    @cached_property
    def manifest(self) -> ArtifactManifest | None:
        """Its ``NAME.manifest.json`` where one describes this very file (read_manifest's rules), else None."""
        return read_manifest(self.path)

    @cached_property
    def sidecar(self) -> EngineSidecar:
        """A TensorRT engine's sidecar (what it was built for and from); BadInput for another kind or none beside it."""
        if self.kind is not ArtifactKind.TENSORRT_ENGINE:
            raise BadInput(f"{self.path} is a {self.kind.value} artifact: only a TensorRT engine has a sidecar.")
        from trtpipe.runtime.tensorrt.sidecar import read_sidecar

        return read_sidecar(self.path)

    @cached_property
    def tuned(self) -> dict[OnnxExecution, TunedRun]:
        """The ONNX Runtime settings bench tuned for this file, by execution ({} where none, or for another kind)."""
        if self.kind is not ArtifactKind.ONNX:
            return {}
        from trtpipe.runtime.onnxruntime.tuned import read_tuned

        return read_tuned(self.path, self.manifest.sha256 if self.manifest is not None else None)

    @cached_property
    def lineage(self) -> Lineage:
        """Where an ONNX file came from: the hashes along optimize's inputs back to convert's record of the PyTorch
        model (trtpipe.artifact.lineage); bench refuses a comparison across two lineages."""
        return lineage_of(self.path, self.manifest)

    def describe(self) -> ArtifactDescription:
        """What runs it and how (precision, target, tensors): runtime/artifacts.py's description."""
        from trtpipe.runtime.artifacts import describe_artifact

        return describe_artifact(self.path)

    def input_specs(self, *, shapes: Mapping[str, tuple[int, ...]] | None = None,
                    dtypes: Mapping[str, str] | None = None, ranges: Mapping[str, tuple[float, float]] | None = None,
                    recorded_shapes: bool = False) -> tuple[InputSpec, ...]:
        """An ONNX file's inputs: the graph's, under its manifest's record, under the user's declarations
        (:func:`trtpipe.artifact.inputs.resolve_inputs`). BadInput for another kind."""
        if self.kind is not ArtifactKind.ONNX:
            raise BadInput(f"{self.path} is a {self.kind.value} artifact: its inputs are its description's "
                           "(Artifact.describe()), not an ONNX graph's.")
        from trtpipe.onnx_info import input_signature, load_onnx

        graph = input_signature(load_onnx(self.path, load_weights=False))
        return resolve_inputs(graph, self.manifest, shapes=shapes, dtypes=dtypes, ranges=ranges,
                              recorded_shapes=recorded_shapes)

    def backend(self, options: RunOptions | None = None, *, runtime: BackendKind | None = None) -> Backend:
        """The artifact opened on the backend its description calls for (or ``runtime``, where that runs it)."""
        from trtpipe.runtime.registry import open_artifact

        return open_artifact(self.describe(), options, runtime=runtime)
