"""The manifest written beside every ONNX artifact: one typed record, read and written here only.

``model.onnx`` -> ``model.manifest.json``. The typed part says what the artifact is (kind, precision, INT8 target,
task where known, hash, size, the nodes deliberately kept in FP32, how long it took to make); ``details`` holds each
stage's own account (export and verification for convert; options, data, fusion, FP16 and INT8 sections for
optimize), kept at the top level of the JSON for people reading it.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtpipe.files import sha256_file, write_json_atomic
from trtpipe.vocab import ArtifactKind, Precision, Target, Task, __version__

MANIFEST_SCHEMA = "trtpipe.manifest/2"


def manifest_path(artifact: Path) -> Path:
    """The manifest of ``model.onnx`` is ``model.manifest.json`` beside it."""
    return Path(artifact).with_suffix(".manifest.json")


@dataclass
class ArtifactManifest:
    kind: ArtifactKind
    precision: Precision
    path: str  # the artifact's file name (the manifest sits beside it)
    sha256: str
    size_bytes: int
    target: Target | None = None  # INT8 only: the Q/DQ flavour
    seconds: float | None = None  # how long the stage took to produce it
    fp32_nodes: list[str] = field(default_factory=list)  # nodes kept in FP32 on purpose
    details: dict[str, Any] = field(default_factory=dict)
    task: Task | None = None  # what the outputs mean, where it is known
    created: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    trtpipe_version: str = __version__
    schema: str = MANIFEST_SCHEMA

    @classmethod
    def describe(cls, artifact: Path, precision: Precision, *, target: Target | None = None,
                 seconds: float | None = None, fp32_nodes: list[str] | None = None,
                 details: dict[str, Any] | None = None, task: Task | None = None) -> ArtifactManifest:
        """A manifest for the file now at ``artifact`` (hash and size read from it)."""
        artifact = Path(artifact)
        kind = ArtifactKind.for_path(artifact.name) or ArtifactKind.ONNX
        return cls(kind, precision, artifact.name, sha256_file(artifact), artifact.stat().st_size, target,
                   None if seconds is None else round(seconds, 3), list(fp32_nodes or []), dict(details or {}),
                   task)

    def to_dict(self) -> dict[str, Any]:
        artifact = {"path": self.path, "kind": str(self.kind), "precision": str(self.precision),
                    "target": None if self.target is None else str(self.target), "sha256": self.sha256,
                    "size_bytes": self.size_bytes, "seconds": self.seconds, "fp32_nodes": self.fp32_nodes}
        if self.task is not None:
            artifact["task"] = str(self.task)
        return {"schema": self.schema, "trtpipe_version": self.trtpipe_version, "created": self.created,
                "artifact": artifact, **self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArtifactManifest:
        artifact = data["artifact"]
        details = {k: v for k, v in data.items() if k not in ("schema", "trtpipe_version", "created", "artifact")}
        return cls(ArtifactKind(artifact["kind"]), Precision(artifact["precision"]), str(artifact["path"]),
                   str(artifact["sha256"]), int(artifact["size_bytes"]),
                   Target(artifact["target"]) if artifact.get("target") else None, artifact.get("seconds"),
                   [str(n) for n in artifact.get("fp32_nodes", [])], details, Task(artifact["task"])
                   if artifact.get("task") else None, str(data.get("created", "")),
                   str(data.get("trtpipe_version", "")), str(data["schema"]))


def write_manifest(artifact: Path, manifest: ArtifactManifest) -> Path:
    path = manifest_path(artifact)
    write_json_atomic(path, manifest.to_dict())
    return path


def read_manifest(artifact: Path) -> ArtifactManifest | None:
    """The manifest beside ``artifact``, or None when there is none trtpipe can trust: absent, an older layout,
    damaged, or describing another file (its recorded SHA-256 differs: a run killed between writing the model
    and its manifest). Callers then judge the artifact by its own content."""
    path = manifest_path(artifact)
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:
            return None
        manifest = ArtifactManifest.from_dict(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        if sha256_file(Path(artifact)) != manifest.sha256:
            return None
    except OSError:
        return None
    return manifest
