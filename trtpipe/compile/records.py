"""What compile records in the manifest beside its AOTInductor package, as typed records: the stage builds a
:class:`CompileRecord` and writes ``to_details()``; a reader takes ``CompileRecord.of(manifest)``.

The JSON keys are the ones earlier manifests carried (``source``, ``aotinductor``, ``compile``, ``versions``,
``inputs``, ``input_specs``, ``outputs``, ``verification``). The ``aotinductor`` section is the runtime's own record
(:class:`trtpipe.artifact.records.package.AotiRecord`), which loading reads; the schema version of the whole layout is
``trtpipe.artifact.records.manifest.MANIFEST_SCHEMA``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtpipe.artifact.records.manifest import ArtifactManifest
from trtpipe.artifact.records.package import SECTION, AotiRecord, tensor_infos
from trtpipe.artifact.records.sections import SourceModel, VerificationRecord
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.inputs import InputSpec

# What a section that is not the record it should be raises while it is read (then the whole record reads as None).
_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)


@dataclass(frozen=True)
class CompileRunRecord:
    """``details.compile``: the options compile ran with (as plain values, ``to_plain``) and how long exporting
    and compiling took."""

    options: dict[str, Any]
    export_seconds: float
    compile_seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"options": dict(self.options), "export_seconds": self.export_seconds,
                "compile_seconds": self.compile_seconds}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompileRunRecord:
        """The record ``to_dict`` wrote; ValueError where ``data`` is not one."""
        options, export, compile_ = data.get("options"), _seconds(data.get("export_seconds")), \
            _seconds(data.get("compile_seconds"))
        if not isinstance(options, dict) or export is None or compile_ is None:
            raise ValueError("'compile' is not compile's run record")
        return cls(dict(options), export, compile_)


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class CompileRecord:
    """Everything compile records beside the package it wrote."""

    source: SourceModel  # the PyTorch model (LoadedModel.describe())
    package: AotiRecord  # what the package was compiled for: read back before it is loaded
    run: CompileRunRecord
    versions: dict[str, str]  # torch
    inputs: tuple[TensorInfo, ...]
    input_specs: tuple[InputSpec, ...]  # each input as the model takes it (dtype, range, layout), the batch left free
    outputs: tuple[TensorInfo, ...]
    verification: VerificationRecord

    def to_details(self) -> dict[str, Any]:
        """The manifest's sections, for ``ArtifactManifest.describe(details=...)``."""
        return {"source": self.source.record, SECTION: self.package.to_dict(), "compile": self.run.to_dict(),
                "versions": dict(self.versions), "inputs": [t.to_dict() for t in self.inputs],
                "input_specs": [spec.to_dict() for spec in self.input_specs],
                "outputs": [t.to_dict() for t in self.outputs], "verification": self.verification.to_dict()}

    @classmethod
    def from_details(cls, details: Mapping[str, Any]) -> CompileRecord | None:
        """The record ``to_details`` wrote; None where a section is missing or not what compile writes (loading
        a package refuses such a manifest with its own one-line reason: trtpipe.runtime.aoti.package)."""
        source, verification = details.get("source"), VerificationRecord.from_dict(details.get("verification"))
        versions = details.get("versions")
        if not isinstance(source, dict) or verification is None or not isinstance(versions, dict):
            return None
        try:
            return cls(SourceModel(source), AotiRecord.from_dict(details.get(SECTION)),
                       CompileRunRecord.from_dict(details["compile"]), {str(k): str(v) for k, v in versions.items()},
                       tensor_infos(details["inputs"]), tuple(InputSpec.from_dict(s) for s in details["input_specs"]),
                       tensor_infos(details["outputs"]), verification)
        except _MALFORMED:
            return None

    @classmethod
    def of(cls, manifest: ArtifactManifest) -> CompileRecord | None:
        """Compile's record in ``manifest``; None for another stage's manifest or a malformed one."""
        return cls.from_details(manifest.details)
