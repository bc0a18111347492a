"""One deployable file and everything trtpipe records of it, opened from its path: ``Artifact.open(path)``.

Its records keep their formats on disk, each read and written in the room's ``records/`` and nowhere else
(``NAME.manifest.json``: records/manifest.py with its typed sections in records/sections.py; an engine's sidecar:
records/engine.py; an AOTInductor package's section: records/package.py; ``model.tuned.json``: records/tuned.py;
an INT8 calibration cache: records/calibration.py). This type is the one door to them, so a caller asks the
artifact rather than knowing which file beside it holds what. Its description says how it must run
(trtpipe.artifact.description), its input specs are resolved once (trtpipe.artifact.inputs) and its lineage
followed once (trtpipe.artifact.lineage). The runtime opens it on a backend:
``trtpipe.runtime.open_artifact(artifact, options, runtime=...)``, or ``trtpipe.load(path)`` to embed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from trtpipe.artifact.description import ArtifactDescription, artifact_kind, artifact_name, describe_artifact
from trtpipe.artifact.inputs import Sizing, resolve_inputs
from trtpipe.artifact.lineage import Lineage, lineage_of, upstream_candidates
from trtpipe.artifact.records.manifest import ArtifactManifest, read_manifest
from trtpipe.errors import BadInput
from trtpipe.files import require_file, sha256_file
from trtpipe.inputs import InputSpec
from trtpipe.vocab import ArtifactKind, OnnxExecution

if TYPE_CHECKING:
    import onnx

    from trtpipe.artifact.records.engine import EngineSidecar
    from trtpipe.artifact.records.tuned import TunedRun


@dataclass(frozen=True)
class MadeFrom:
    """The file optimize made an artifact from, as its manifest records it, looked for from here."""

    recorded: Path  # its path as optimize was given it
    present: tuple[Path, ...]  # the places it could be that hold a file: that path from here, then from the artifact's
    found: Path | None  # the first of them whose SHA-256 is the recorded one (any, where none is recorded)


class Artifact:
    """A deployable file (an ONNX model, a TensorRT engine, an AOTInductor package) with its kind and its records,
    each read once, when first asked for."""

    def __init__(self, path: Path, kind: ArtifactKind) -> None:
        self.path = Path(path)
        self.kind = kind

    @classmethod
    def open(cls, path: Path | str, *, what: str = "Artifact") -> Artifact:
        """The artifact at ``path``: BadInput (one line, calling it ``what``) where there is no file or trtpipe runs
        no file of its kind."""
        path = Path(path)
        require_file(path, what)
        return cls(path, artifact_kind(path))

    def __repr__(self) -> str:
        return f"Artifact({str(self.path)!r}, {self.kind.value})"

    @property
    def name(self) -> str:
        """The model's name, from its path (``models/<name>/<version>/model.onnx`` -> name, else the stem)."""
        return artifact_name(self.path)

    @cached_property
    def manifest(self) -> ArtifactManifest | None:
        """Its ``NAME.manifest.json`` where one describes this very file (read_manifest's rules), else None."""
        return read_manifest(self.path)

    @cached_property
    def sha256(self) -> str:
        """The SHA-256 of its bytes: its manifest's, where one describes it (read_manifest checked it against the
        file), else hashed here."""
        return self.manifest.sha256 if self.manifest is not None else sha256_file(self.path)

    @cached_property
    def graph(self) -> onnx.ModelProto:
        """An ONNX file's graph with its weights (trtpipe.onnx_info.load_onnx: one line where it is no ONNX, or its
        external data lies outside its folder); BadInput for another kind."""
        if self.kind is not ArtifactKind.ONNX:
            raise BadInput(f"{self.path} is a {self.kind.value} artifact: only an ONNX file has a graph to load.")
        from trtpipe.onnx_info import load_onnx

        return load_onnx(self.path)

    @cached_property
    def made_from(self) -> MadeFrom | None:
        """Where the file optimize made it from is now (its manifest's ``input``, looked for where lineage looks:
        :func:`trtpipe.artifact.lineage.upstream_candidates`; the recorded SHA-256 decides), or None where no
        manifest records one."""
        source = self.manifest.made_from if self.manifest is not None else None
        if source is None:
            return None
        recorded = Path(source.path)
        present = tuple(c for c in upstream_candidates(self.path, recorded) if c.is_file())
        found = next((c for c in present if not source.sha256 or sha256_file(c) == source.sha256), None)
        return MadeFrom(recorded, present, found)

    @cached_property
    def sidecar(self) -> EngineSidecar:
        """A TensorRT engine's sidecar (what it was built for and from); BadInput for another kind or none beside it."""
        if self.kind is not ArtifactKind.TENSORRT_ENGINE:
            raise BadInput(f"{self.path} is a {self.kind.value} artifact: only a TensorRT engine has a sidecar.")
        from trtpipe.artifact.records.engine import read_sidecar

        return read_sidecar(self.path)

    @cached_property
    def tuned(self) -> dict[OnnxExecution, TunedRun]:
        """The ONNX Runtime settings bench tuned for this file, by execution ({} where none, or for another kind)."""
        if self.kind is not ArtifactKind.ONNX:
            return {}
        from trtpipe.artifact.records.tuned import read_tuned

        return read_tuned(self.path, self.manifest.sha256 if self.manifest is not None else None)

    @cached_property
    def lineage(self) -> Lineage:
        """Where an ONNX file came from: the hashes along optimize's inputs back to convert's record of the PyTorch
        model (trtpipe.artifact.lineage); bench refuses a comparison across two lineages."""
        return lineage_of(self.path, self.manifest)

    @property
    def weights_sha256(self) -> str | None:
        """The SHA-256 of the PyTorch weights its lineage starts from, or None where no manifest leads back to
        convert's record (a file without one is not hashed for its lineage: nothing could match it)."""
        if self.manifest is None:
            return None
        source = self.lineage.source
        return None if source is None else str(source["weights_sha256"])

    @cached_property
    def description(self) -> ArtifactDescription:
        """What runs it and how (precision, target, tensors, the settings it needs): trtpipe.artifact.description."""
        return describe_artifact(self.path)

    def describe(self) -> ArtifactDescription:
        """Its description (read once: :attr:`description`)."""
        return self.description

    def input_specs(self, *, shapes: Mapping[str, tuple[int, ...]] | None = None,
                    dtypes: Mapping[str, str] | None = None, ranges: Mapping[str, tuple[float, float]] | None = None,
                    recorded_shapes: bool = False, size: Sizing | None = None,
                    recorded_by: Artifact | None = None) -> tuple[InputSpec, ...]:
        """An ONNX file's inputs: the graph's, under its manifest's record, under the user's declarations
        (:func:`trtpipe.artifact.inputs.resolve_inputs`); ``size``: the caller's rule for an input the user does
        not size (bench's: the size it runs at); ``recorded_by``: the artifact whose record lies under them, where
        another's than this file's own (debug's FP32 reference, under what optimize recorded of the model it made
        from it). BadInput for another kind."""
        if self.kind is not ArtifactKind.ONNX:
            raise BadInput(f"{self.path} is a {self.kind.value} artifact: its inputs are its description's "
                           "(Artifact.describe()), not an ONNX graph's.")
        graph = [(t.name, tuple(t.shape), t.dtype) for t in self.description.inputs]
        record = (recorded_by or self).manifest
        return resolve_inputs(graph, record, shapes=shapes, dtypes=dtypes, ranges=ranges,
                              recorded_shapes=recorded_shapes, size=size)
