"""The manifest written beside every ONNX artifact: one typed record, read and written here only.

``model.onnx`` -> ``model.manifest.json``. The typed part says what the artifact is (kind, precision, INT8 target,
task where known, hash, size, the nodes deliberately kept in FP32, how long it took to make); ``details`` holds each
stage's own account (export and verification for convert; options, data, and each pass's record for optimize), kept
at the top level of the JSON for people reading it. The sections one stage reads back from another's manifest have
typed records in sections.py beside this file (:class:`MadeFrom`, :class:`SourceModel`, :class:`RecordedOptions`,
:class:`VerificationRecord`, :class:`DataRecord`), handed out by accessors here (``ArtifactManifest.made_from``...,
``ArtifactManifest.input_specs``); each stage's own sections are records beside the stage (trtpipe.convert.records,
trtpipe.compile.records, the passes' records in optimize) and the ``aotinductor`` section is an AOTInductor
package's (records/package.py: AotiRecord). Each record's ``to_dict`` writes the JSON earlier manifests carried, so
they read back as the same record; a shared section that is absent or not such a record reads as None.
``schema`` versions the whole layout: a manifest without it (an older trtpipe's) or with another is not trusted,
and the reader is told so in one line (``on_other_layout``).

An artifact and its manifest are committed as one (:func:`commit_artifact`): the manifest records the hash of the
bytes its run wrote, taken from the temporary file before the rename, and both renames happen under the artifact's
commit lock. A reader that finds a file whose hash differs from its manifest's (another run's, or a run killed
between the two renames) treats the artifact as unverified.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.artifact.records.commit import commit
from trtpipe.artifact.records.document import Unreadable, read_document
from trtpipe.artifact.records.sections import (
    CpuRecord,
    DataRecord,
    MadeFrom,
    RecordedOptions,
    SourceModel,
    VerificationRecord,
)
from trtpipe.errors import BadInput
from trtpipe.files import commit_lock, sha256_bytes, sha256_file, write_json_atomic
from trtpipe.vocab import ArtifactKind, CpuClass, Device, Precision, Target, Task, __version__

if TYPE_CHECKING:
    from trtpipe.inputs import InputSpec

# The layout's version: the "artifact" object and the typed records (``details``' shared sections,
# trtpipe.artifact.records.sections, and the optimize passes' records, trtpipe.optimize.records). A manifest without one
# predates the typed manifest.
MANIFEST_SCHEMA = "trtpipe.manifest/2"


def manifest_path(artifact: Path) -> Path:
    """The manifest of ``model.onnx`` is ``model.manifest.json`` beside it; any other kind's keeps its suffix
    (``model.pt2`` -> ``model.pt2.manifest.json``), so an ONNX file and a package of one model can share a folder
    without one manifest replacing the other."""
    artifact = Path(artifact)
    if artifact.suffix.lower() == ".onnx":
        return artifact.with_suffix(".manifest.json")
    return artifact.with_name(f"{artifact.name}.manifest.json")


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
    device: Device | None = None  # the one device it runs on, where that is fixed when it is made (AOTInductor)
    cpu: CpuRecord | None = None  # a CPU-target INT8 artifact: the CPU class it was made and measured for

    # -- typed accessors of the shared sections of ``details`` (each stage's own sections stay as it wrote them)

    @property
    def made_from(self) -> MadeFrom | None:
        """The file optimize made this artifact from; None for convert's output or another stage's."""
        return MadeFrom.from_dict(self.details.get("input"))

    @property
    def source_model(self) -> SourceModel | None:
        """Convert's (or compile's) record of the PyTorch model; None for optimize's output."""
        source = self.details.get("source")
        return SourceModel(source) if isinstance(source, dict) else None

    @property
    def recorded_options(self) -> RecordedOptions:
        """The options optimize ran with (empty for another stage's artifact)."""
        options = self.details.get("options")
        return RecordedOptions(options if isinstance(options, dict) else {})

    @property
    def input_specs(self) -> dict[str, InputSpec]:
        """Each input as the model takes it (dtype, range, layout), by name, as convert, compile or optimize
        recorded it; entries that are not such a record are left out."""
        from trtpipe.inputs import InputSpec

        specs = {}
        items = self.details.get("input_specs")
        for item in items if isinstance(items, list) else []:
            try:
                spec = InputSpec.from_dict(item)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            specs[spec.name] = spec
        return specs

    @property
    def verification(self) -> VerificationRecord | None:
        """Convert's or compile's verification against PyTorch FP32; None for another stage's artifact, or where
        the section is not such a record."""
        return VerificationRecord.from_dict(self.details.get("verification"))

    @property
    def data(self) -> DataRecord | None:
        """Optimize's record of the data it calibrated and was judged on; None for another stage's artifact."""
        return DataRecord.from_dict(self.details.get("data"))

    @property
    def versions(self) -> dict[str, str]:
        """The library versions the stage ran with (``torch``, ``onnx``...), those recorded as text."""
        versions = self.details.get("versions")
        return {k: v for k, v in versions.items() if isinstance(v, str)} if isinstance(versions, dict) else {}

    def section(self, name: str) -> dict[str, Any] | None:
        """A stage's own section of ``details`` (a pass's record: ``int8``, ``fp16``...), as written; None where
        absent or not an object."""
        value = self.details.get(name)
        return value if isinstance(value, dict) else None

    @classmethod
    def describe(cls, artifact: Path, precision: Precision, *, content: Path | bytes | None = None,
                 target: Target | None = None, seconds: float | None = None, fp32_nodes: list[str] | None = None,
                 details: dict[str, Any] | None = None, task: Task | None = None,
                 device: Device | None = None, cpu: CpuRecord | None = None) -> ArtifactManifest:
        """A manifest for ``artifact``, its hash and size taken from ``content``: the bytes this run wrote, or the
        temporary file holding them before it is renamed to ``artifact`` (see :func:`commit_artifact`).

        Without ``content`` they are read from the file now at ``artifact``, which is only right where no other
        run can write that path: after a rename, the file there may already be another run's.
        """
        artifact = Path(artifact)
        kind = ArtifactKind.for_path(artifact.name) or ArtifactKind.ONNX
        if isinstance(content, bytes):
            digest, size = sha256_bytes(content), len(content)
        else:
            source = artifact if content is None else Path(content)
            digest, size = sha256_file(source), source.stat().st_size
        return cls(kind, precision, artifact.name, digest, size, target,
                   None if seconds is None else round(seconds, 3), list(fp32_nodes or []), dict(details or {}),
                   task, device=device, cpu=cpu)

    def to_dict(self) -> dict[str, Any]:
        artifact: dict[str, Any] = {"path": self.path, "kind": str(self.kind), "precision": str(self.precision),
                    "target": None if self.target is None else str(self.target), "sha256": self.sha256,
                    "size_bytes": self.size_bytes, "seconds": self.seconds, "fp32_nodes": self.fp32_nodes}
        if self.task is not None:
            artifact["task"] = str(self.task)
        if self.device is not None:
            artifact["device"] = str(self.device)
        if self.cpu is not None:
            artifact["cpu_class"] = self.cpu.to_dict()
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
                   str(data.get("trtpipe_version", "")), str(data["schema"]),
                   Device(artifact["device"]) if artifact.get("device") else None,
                   CpuRecord.from_dict(artifact["cpu_class"]) if artifact.get("cpu_class") else None)


def write_manifest(artifact: Path, manifest: ArtifactManifest) -> Path:
    """Write the manifest alone (for an artifact already in place, e.g. a copy), under the artifact's commit lock
    so that it cannot land between another run's two renames."""
    path = manifest_path(artifact)
    with commit_lock(Path(artifact)):
        write_json_atomic(path, manifest.to_dict())
    return path


def commit_artifact(staged: Path, artifact: Path, manifest: ArtifactManifest, *,
                    between_renames: Callable[[], None] | None = None) -> Path:
    """Rename ``staged`` (the temporary file this run wrote) onto ``artifact`` and write its manifest, as one
    commit; returns the manifest's path.

    ``manifest`` must describe ``staged`` (``ArtifactManifest.describe(artifact, ..., content=staged)``): its hash
    is of this run's bytes, never of whatever another run has put at ``artifact`` meanwhile. Why a lock around the
    two renames rather than ordering alone: without it, two runs' renames interleave (A's model, B's model, B's
    manifest, A's manifest) and leave B's model beside A's manifest whichever file goes first; with it, the last
    run to commit owns both files. A run killed between the renames leaves a pair whose hashes differ, which
    :func:`read_manifest` reports. ``between_renames`` is a seam for tests (see
    :func:`trtpipe.artifact.records.commit.commit`, which this calls).
    """
    staged, artifact = Path(staged), Path(artifact)
    size = staged.stat().st_size
    if size != manifest.size_bytes:
        raise ValueError(f"the manifest describes {manifest.size_bytes} bytes, the staged file holds {size}: "
                         "describe it with content=staged")
    return commit(artifact, staged, manifest_path(artifact), replace(manifest, path=artifact.name).to_dict(),
                  between_renames=between_renames)


def read_manifest(artifact: Path, *, on_mismatch: Callable[[str], None] | None = None,
                  on_other_layout: Callable[[str], None] | None = None) -> ArtifactManifest | None:
    """The manifest beside ``artifact``, or None when there is none trtpipe can trust: absent, of another layout,
    or describing another file (its recorded SHA-256 differs: another run's manifest, or a run killed between
    writing the model and its manifest). Callers then judge the artifact by its own content; ``on_mismatch``
    (e.g. ``console.warn``) is told about a manifest that describes another file, in one line, and
    ``on_other_layout`` about one of another layout (an older trtpipe's, with no schema version or another).

    A file at the manifest's path that is not JSON (or JSON nested too deeply to parse), or a manifest of this
    layout with a field of the wrong type or value, raises BadInput naming the file and the field: it was damaged
    or edited, and quietly ignoring it would hide that.
    """
    artifact = Path(artifact)
    path = manifest_path(artifact)
    try:
        data = read_document(path)
    except Unreadable as error:
        raise BadInput({"read": f"{path} cannot be read as a trtpipe manifest ({error.detail}): {_FIX}",
                        "nested": f"{path} is not a trtpipe manifest ({error.detail}): {_FIX}",
                        "json": f"{path} is not valid JSON ({error.detail}): {_FIX}"}[error.stage]) from None
    if data is None:
        return None
    if not isinstance(data, dict) or data.get("schema") != MANIFEST_SCHEMA:  # not ours to judge
        if on_other_layout is not None:
            schema = data.get("schema") if isinstance(data, dict) else None
            layout = f"schema {schema!r}" if isinstance(schema, str) else "no schema version (an older trtpipe's)"
            on_other_layout(f"{path.name} has {layout}, not {MANIFEST_SCHEMA}: it is ignored and {artifact.name} "
                            "is judged by its own content; re-run the stage that wrote it for a manifest.")
        return None
    try:
        manifest = ArtifactManifest.from_dict(_checked(data))
    except ValueError as error:
        raise BadInput(f"{path} is not a valid trtpipe manifest ({error}): {_FIX}") from None
    try:
        actual = sha256_file(artifact)
    except OSError:
        return None
    if actual != manifest.sha256:
        if on_mismatch is not None:
            on_mismatch(f"{path.name} describes another file than {artifact} (SHA-256 {manifest.sha256[:12]}… "
                        f"recorded, {actual[:12]}… on disk: another run rewrote one of them, or was killed between "
                        "the two): the artifact is treated as unverified; re-run the stage that wrote it.")
        return None
    return manifest


_FIX = "delete it (the artifact is then judged by its own content) or re-run the stage that wrote the artifact."

# The typed fields of a manifest's "artifact" object: what each must be.
_ARTIFACT_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {  # name: (types, required)
    "path": ((str,), True), "kind": ((str,), True), "precision": ((str,), True), "target": ((str,), False),
    "sha256": ((str,), True), "size_bytes": ((int,), True), "seconds": ((int, float), False),
    "fp32_nodes": ((list,), False), "task": ((str,), False), "device": ((str,), False), "cpu_class": ((dict,), False),
}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_CHOICES: dict[str, Any] = {"kind": ArtifactKind, "precision": Precision, "target": Target, "task": Task,
                            "device": Device}


def _checked(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` once each typed field has the type and value it must have (ValueError names the one that has
    not): a manifest decides how an artifact is run, so nothing in it is taken on trust."""
    artifact = data.get("artifact")
    if not isinstance(artifact, dict):
        raise ValueError(f"'artifact' is {type(artifact).__name__}, not an object")
    for key, (kinds, required) in _ARTIFACT_FIELDS.items():
        value = artifact.get(key)
        if value is None:
            if required:
                raise ValueError(f"'artifact.{key}' is missing")
            continue
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise ValueError(f"'artifact.{key}' is {type(value).__name__}, not "
                             f"{' or '.join(k.__name__ for k in kinds)}")
        if key in _CHOICES and value not in tuple(_CHOICES[key]):
            raise ValueError(f"'artifact.{key}' is {value!r}, not one of {', '.join(_CHOICES[key])}")
    if not all(isinstance(n, str) for n in artifact.get("fp32_nodes") or []):
        raise ValueError("'artifact.fp32_nodes' holds something other than node names")
    if not _SHA256.match(artifact["sha256"]):
        raise ValueError("'artifact.sha256' is not a SHA-256 hex digest")
    if artifact.get("cpu_class") is not None:
        _check_cpu(artifact["cpu_class"])
    return data


def _check_cpu(cpu: dict[str, Any]) -> None:
    """``artifact.cpu_class`` must name known CPU classes: it decides whether an artifact may run on this CPU."""
    classes = tuple(CpuClass)
    known = f"one of {', '.join(classes)}"
    if cpu.get("made_for") not in classes:
        raise ValueError(f"'artifact.cpu_class.made_for' is {cpu.get('made_for')!r}, not {known}")
    measured, unsafe = cpu.get("measured") or {}, cpu.get("unsafe_on") or []
    if not isinstance(measured, dict) or not all(c in classes and isinstance(f, dict) for c, f in measured.items()):
        raise ValueError(f"'artifact.cpu_class.measured' must map CPU classes ({known}) to figures")
    if not isinstance(unsafe, list) or not all(c in classes for c in unsafe):
        raise ValueError(f"'artifact.cpu_class.unsafe_on' must list CPU classes ({known})")
