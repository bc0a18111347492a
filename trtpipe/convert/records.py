"""What convert records in the manifest beside its ONNX file, as typed records: the stage builds a
:class:`ConvertRecord` and writes ``to_details()``; a reader takes ``ConvertRecord.of(manifest)``.

The JSON keys are the ones earlier manifests carried (``source``, ``export``, ``versions``, ``inputs``,
``input_specs``, ``outputs``, ``dynamic_axes``, ``verification``, at the top level for people reading the file), so
a manifest written before these records reads back as the same record. The schema version of the whole layout is
``trtpipe.artifact.records.manifest.MANIFEST_SCHEMA``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtpipe.artifact.records.manifest import ArtifactManifest
from trtpipe.artifact.records.package import tensor_infos
from trtpipe.artifact.records.sections import SourceModel, VerificationRecord
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.convert.export import ExportResult
from trtpipe.inputs import InputSpec

# What a section that is not the record it should be raises while it is read (then the whole record reads as None).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


@dataclass(frozen=True)
class ExportRecord:
    """``details.export``: the exporter that wrote the file (and why the first choice fell back), the opset, whether
    the batch axis is dynamic, and how long exporting took."""

    exporter: str  # "dynamo" or "torchscript"
    fallback_reason: str | None
    opset: int
    dynamic_batch: bool
    seconds: float

    @classmethod
    def of(cls, result: ExportResult) -> ExportRecord:
        return cls(result.exporter, result.fallback_reason, result.opset, result.dynamic_batch,
                   round(result.seconds, 3))

    def to_dict(self) -> dict[str, Any]:
        return {"exporter": self.exporter, "fallback_reason": self.fallback_reason, "opset": self.opset,
                "dynamic_batch": self.dynamic_batch, "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportRecord:
        """The record ``to_dict`` wrote; TypeError or ValueError where ``data`` is not one."""
        exporter, reason, opset, dynamic, seconds = (data.get(k) for k in ("exporter", "fallback_reason", "opset",
                                                                             "dynamic_batch", "seconds"))
        if not isinstance(exporter, str) or not (reason is None or isinstance(reason, str)) \
                or not isinstance(opset, int) or isinstance(opset, bool) or not isinstance(dynamic, bool) \
                or not isinstance(seconds, int | float) or isinstance(seconds, bool):
            raise ValueError("'export' is not convert's export record")
        return cls(exporter, reason, opset, dynamic, float(seconds))


@dataclass(frozen=True)
class ConvertRecord:
    """Everything convert records beside the ONNX file it wrote."""

    source: SourceModel  # the PyTorch model (LoadedModel.describe())
    export: ExportRecord
    versions: dict[str, str]  # torch, onnx, onnxruntime
    inputs: tuple[TensorInfo, ...]  # as the ONNX file declares them
    # Each input as the model takes it (dtype, the range its values live in, layout): what optimize and bench draw
    # calibration and timing inputs from. The batch is None where the exported axis is dynamic.
    input_specs: tuple[InputSpec, ...]
    outputs: tuple[TensorInfo, ...]
    dynamic_axes: dict[str, dict[str, str | None]]  # tensor -> axis index -> its name, for the axes not fixed
    verification: VerificationRecord

    def to_details(self) -> dict[str, Any]:
        """The manifest's sections, for ``ArtifactManifest.describe(details=...)``."""
        return {"source": self.source.record, "export": self.export.to_dict(), "versions": dict(self.versions),
                "inputs": [t.to_dict() for t in self.inputs],
                "input_specs": [spec.to_dict() for spec in self.input_specs],
                "outputs": [t.to_dict() for t in self.outputs],
                "dynamic_axes": {name: dict(axes) for name, axes in self.dynamic_axes.items()},
                "verification": self.verification.to_dict()}

    @classmethod
    def from_details(cls, details: Mapping[str, Any]) -> ConvertRecord | None:
        """The record ``to_details`` wrote; None where a section is missing or not what convert writes (another
        stage's manifest, or one edited by hand): the reader then goes by the artifact itself, as without one."""
        source, verification = details.get("source"), VerificationRecord.from_dict(details.get("verification"))
        versions, axes = details.get("versions"), details.get("dynamic_axes")
        if not isinstance(source, dict) or verification is None or not isinstance(versions, dict) \
                or not isinstance(axes, dict):
            return None
        try:
            return cls(SourceModel(source), ExportRecord.from_dict(details["export"]),
                       {str(k): str(v) for k, v in versions.items()}, tensor_infos(details["inputs"]),
                       tuple(InputSpec.from_dict(s) for s in details["input_specs"]),
                       tensor_infos(details["outputs"]),
                       {str(name): {str(i): None if d is None else str(d) for i, d in dims.items()}
                        for name, dims in axes.items()}, verification)
        except _MALFORMED:
            return None

    @classmethod
    def of(cls, manifest: ArtifactManifest) -> ConvertRecord | None:
        """Convert's record in ``manifest``; None for another stage's manifest or a malformed one."""
        return cls.from_details(manifest.details)
