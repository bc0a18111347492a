"""The manifest written beside every ONNX artifact: one typed record, read and written here only.

``model.onnx`` -> ``model.manifest.json``. The typed part says what the artifact is (kind, precision, INT8 target,
task where known, hash, size, the nodes deliberately kept in FP32, how long it took to make); ``details`` holds each
stage's own account (export and verification for convert; options, data, and each pass's record for optimize),
kept at the top level of the JSON for people reading it. The sections one stage reads back from another's manifest
have typed records and accessors here (:class:`MadeFrom`, :class:`SourceModel`, :class:`RecordedOptions`,
:class:`VerificationRecord`, :class:`DataRecord`, ``ArtifactManifest.input_specs``); each stage's own sections are
records beside the stage (trtpipe.convert.records, trtpipe.compile.records, the passes' records in optimize) and the
``aotinductor`` section is the runtime's (trtpipe.runtime.aoti.package.AotiRecord). Each record's ``to_dict`` writes
the JSON earlier manifests carried, so they read back as the same record; a shared section that is absent or not
such a record reads as None.
``schema`` versions the whole layout: a manifest without it (an older trtpipe's) or with another is not trusted,
and the reader is told so in one line (``on_other_layout``).

An artifact and its manifest are committed as one (:func:`commit_artifact`): the manifest records the hash of the
bytes its run wrote, taken from the temporary file before the rename, and both renames happen under the artifact's
commit lock. A reader that finds a file whose hash differs from its manifest's (another run's, or a run killed
between the two renames) treats the artifact as unverified.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.errors import BadInput
from trtpipe.files import commit_lock, commit_pair, sha256_bytes, sha256_file, write_json_atomic
from trtpipe.vocab import ArtifactKind, CpuClass, Device, Precision, Target, Task, __version__

if TYPE_CHECKING:
    from trtpipe.inputs import InputSpec

# The layout's version: the "artifact" object and the typed records below (``details``' shared sections and the
# optimize passes' records, trtpipe.optimize.records). A manifest without one predates the typed manifest.
MANIFEST_SCHEMA = "trtpipe.manifest/2"


def manifest_path(artifact: Path) -> Path:
    """The manifest of ``model.onnx`` is ``model.manifest.json`` beside it; any other kind's keeps its suffix
    (``model.pt2`` -> ``model.pt2.manifest.json``), so an ONNX file and a package of one model can share a folder
    without one manifest replacing the other."""
    artifact = Path(artifact)
    if artifact.suffix.lower() == ".onnx":
        return artifact.with_suffix(".manifest.json")
    return artifact.with_name(f"{artifact.name}.manifest.json")


@dataclass(frozen=True)
class CpuRecord:
    """The CPU class a CPU-target INT8 artifact was made for (its weights were chosen for that class's int8
    arithmetic), the classes its accuracy was measured on with the figure each gave, and the classes it is known
    unsafe on. A reader compares the CPU it runs on with these rather than trusting the figure everywhere."""

    made_for: CpuClass
    measured: dict[CpuClass, dict[str, Any]] = field(default_factory=dict)  # class -> the figure measured there
    unsafe_on: tuple[CpuClass, ...] = ()  # classes it must not run on unasked (8-bit weights without VNNI)

    @property
    def measured_on(self) -> tuple[CpuClass, ...]:
        """The classes its accuracy was measured on, weakest first."""
        return tuple(sorted(self.measured, key=lambda c: c.rank))

    def figure(self, cpu_class: CpuClass) -> str:
        """The figure measured on ``cpu_class`` in a few words: the task's agreement with FP32, else the worst
        cosine."""
        figure = self.measured.get(cpu_class) or {}
        if figure.get("agreement") is not None:
            return f"{figure.get('agreement_name') or 'agreement'} {100 * float(figure['agreement']):.2f} %"
        if figure.get("cosine") is not None:
            return f"worst cosine {float(figure['cosine']):.5f}"
        return "no figure recorded"

    def requirement(self) -> str:
        """The record in one line, for a reader without trtpipe (a Triton config's comment)."""
        text = f"INT8 made for CPU class {self.made_for} ({'8' if self.made_for.vnni else '7'}-bit weights)"
        if self.measured:
            text += "; accuracy measured on " + ", ".join(f"{c} ({self.figure(c)})" for c in self.measured_on)
        if self.unsafe_on:
            text += f"; unsafe on {', '.join(self.unsafe_on)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"made_for": str(self.made_for), "measured": {str(c): dict(f) for c, f in self.measured.items()},
                "unsafe_on": [str(c) for c in self.unsafe_on]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuRecord:
        return cls(CpuClass(data["made_for"]), {CpuClass(c): dict(f) for c, f in (data.get("measured") or {}).items()},
                   tuple(CpuClass(c) for c in data.get("unsafe_on") or ()))


# -- the shared sections of ``details``: what one stage records and another reads back ----------------------------

@dataclass(frozen=True)
class MadeFrom:
    """``details.input``: the file optimize made the artifact from, as it was given (a path relative to where it
    ran, or absolute), its SHA-256 then, and its precision."""

    path: str
    sha256: str | None = None
    precision: Precision | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256,
                "precision": None if self.precision is None else str(self.precision)}

    @classmethod
    def from_dict(cls, data: object) -> MadeFrom | None:
        """The record, or None where ``data`` names no file (convert's manifest has none)."""
        if not isinstance(data, dict) or not isinstance(data.get("path"), str) or not data["path"]:
            return None
        sha256, precision = data.get("sha256"), data.get("precision")
        return cls(data["path"], sha256 if isinstance(sha256, str) else None,
                   Precision(precision) if precision in tuple(Precision) else None)


@dataclass(frozen=True)
class RecordedPreprocessing:
    """How images became the model's inputs, as a manifest records it: convert's ``source.preprocessing`` (what the
    weights were trained with) or optimize's ``options`` (what it was told)."""

    resize: int | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    channel_order: str | None = None

    @classmethod
    def from_dict(cls, data: object) -> RecordedPreprocessing:
        """The fields ``data`` holds with the right type (the others None)."""
        if not isinstance(data, dict):
            return cls()

        def floats(key: str) -> tuple[float, ...] | None:
            value = data.get(key)
            return tuple(float(v) for v in value) if isinstance(value, list) and value else None

        resize, order = data.get("resize"), data.get("channel_order")
        return cls(resize if isinstance(resize, int) and not isinstance(resize, bool) else None, floats("mean"),
                   floats("std"), order if isinstance(order, str) else None)


@dataclass(frozen=True)
class SourceModel:
    """``details.source``: convert's (and compile's) record of the PyTorch model (``LoadedModel.describe()``)."""

    record: dict[str, Any]  # the whole record, as written

    @property
    def weights_sha256(self) -> str | None:
        value = self.record.get("weights_sha256")
        return value if isinstance(value, str) else None

    @property
    def preprocessing(self) -> RecordedPreprocessing:
        """What the weights were trained with (recorded for registry models with pretrained weights)."""
        return RecordedPreprocessing.from_dict(self.record.get("preprocessing"))


@dataclass(frozen=True)
class RecordedOptions:
    """``details.options``: the options optimize ran with, as plain values (``to_plain``), and its target."""

    record: dict[str, Any]

    def text(self, key: str) -> str | None:
        """A text option (``calib``, ``eval``, ``target``, ``cpu_class``...), None where unset or not text."""
        value = self.record.get(key)
        return value if isinstance(value, str) and value else None

    @property
    def preprocessing(self) -> RecordedPreprocessing:
        return RecordedPreprocessing.from_dict(self.record)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class VerificationRecord:
    """``details.verification``: convert's and compile's proof that the artifact computes what PyTorch FP32 does
    (``VerificationReport.record()``, ``Verification.record()``): the verdict, the bounds, the figures over every
    case, and each case as written (its inputs, verdict and comparison figures)."""

    passed: bool
    atol: float
    rtol: float
    min_cosine: float
    max_abs_err: float
    max_rel_err: float
    cosine: float
    top1_agreement: float | None = None
    dataset: str | None = None
    reference_accuracy: float | None = None
    candidate_accuracy: float | None = None
    cases: tuple[dict[str, Any], ...] = ()
    eval_samples: int | None = None  # convert's: the held-out samples judged (compile's record has no such field)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed,
                "tolerance": {"atol": self.atol, "rtol": self.rtol, "min_cosine": self.min_cosine},
                "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "cosine": self.cosine,
                "top1_agreement": self.top1_agreement, "dataset": self.dataset,
                **({} if self.eval_samples is None else {"eval_samples": self.eval_samples}),
                "reference_accuracy": self.reference_accuracy, "candidate_accuracy": self.candidate_accuracy,
                "cases": [dict(case) for case in self.cases]}

    @classmethod
    def from_dict(cls, data: object) -> VerificationRecord | None:
        """The record, or None where ``data`` is not one (absent, or a field of the wrong type)."""
        if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
            return None
        tolerance, cases = data.get("tolerance"), data.get("cases")
        if not isinstance(tolerance, dict) or not isinstance(cases, list) or not all(isinstance(c, dict)
                                                                                     for c in cases):
            return None
        bounds = [_number(tolerance.get(k)) for k in ("atol", "rtol", "min_cosine")]
        figures = [_number(data.get(k)) for k in ("max_abs_err", "max_rel_err", "cosine")]
        atol, rtol, min_cosine = bounds
        max_abs, max_rel, cosine = figures
        if atol is None or rtol is None or min_cosine is None or max_abs is None or max_rel is None or cosine is None:
            return None
        return cls(data["passed"], atol, rtol, min_cosine, max_abs, max_rel, cosine,
                   _number(data.get("top1_agreement")), _text(data.get("dataset")),
                   _number(data.get("reference_accuracy")), _number(data.get("candidate_accuracy")),
                   tuple(dict(c) for c in cases),
                   _count(data.get("eval_samples")))


@dataclass(frozen=True)
class DataDescription:
    """A data set as optimize records it (``details.data.calibration`` and ``.eval``): where it came from, how many
    samples, their SHA-256, whether it carried labels, and (calibration) each sample's fingerprint."""

    source: str
    samples: int
    sha256: str | None = None
    labelled: bool = False
    fingerprints: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "samples": self.samples, "sha256": self.sha256, "labelled": self.labelled,
                **({} if self.fingerprints is None else {"fingerprints": list(self.fingerprints)})}

    @classmethod
    def from_dict(cls, data: object) -> DataDescription | None:
        """The record, or None where ``data`` is not one."""
        if not isinstance(data, dict) or _text(data.get("source")) is None or _count(data.get("samples")) is None:
            return None
        prints = data.get("fingerprints")
        fingerprints = tuple(prints) if isinstance(prints, list) and all(isinstance(f, str) for f in prints) else None
        return cls(data["source"], data["samples"], _text(data.get("sha256")), data.get("labelled") is True,
                   fingerprints)


@dataclass(frozen=True)
class JudgedOn:
    """``details.data.judged_on``: the data optimize judged the artifact's accuracy on (``data``: ``eval``,
    ``held-out`` or ``calibration``), and whether that figure is optimistic (judged on what it was fit to)."""

    data: str
    source: str
    samples: int
    sha256: str | None = None
    optimistic: bool = False
    labelled: bool | None = None  # --eval's record says whether it carried labels
    why: str | None = None  # optimistic: why nothing could be held out
    drawn: str | None = None  # held out: how the samples were drawn
    indices: tuple[int, ...] | None = None  # held out of a fixed set: which samples
    calibration_samples: int | None = None  # held out: what was left to calibrate on
    calibration_sha256: str | None = None

    def to_dict(self) -> dict[str, Any]:
        optional = {"why": self.why, "drawn": self.drawn,
                    "indices": None if self.indices is None else list(self.indices),
                    "calibration_samples": self.calibration_samples, "calibration_sha256": self.calibration_sha256}
        return {"data": self.data, "source": self.source, "samples": self.samples, "sha256": self.sha256,
                **({} if self.labelled is None else {"labelled": self.labelled}), "optimistic": self.optimistic,
                **{k: v for k, v in optional.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: object) -> JudgedOn | None:
        """The record, or None where ``data`` is not one."""
        if (not isinstance(data, dict) or _text(data.get("data")) is None or _text(data.get("source")) is None
                or _count(data.get("samples")) is None):
            return None
        labelled, indices = data.get("labelled"), data.get("indices")
        return cls(data["data"], data["source"], data["samples"], _text(data.get("sha256")),
                   data.get("optimistic") is True, labelled if isinstance(labelled, bool) else None,
                   _text(data.get("why")), _text(data.get("drawn")),
                   tuple(indices) if isinstance(indices, list) and all(_count(i) is not None for i in indices)
                   else None, _count(data.get("calibration_samples")), _text(data.get("calibration_sha256")))


@dataclass(frozen=True)
class DataRecord:
    """``details.data``: optimize's record of the data it calibrated on, the --eval data, and what judged it. A
    part that is absent or not such a record reads as None (the artifact is then taken as not fit to its data)."""

    calibration: DataDescription | None = None
    eval: DataDescription | None = None
    judged_on: JudgedOn | None = None

    @property
    def calibration_fingerprints(self) -> frozenset[str]:
        """The fingerprints of the samples calibration was fit to (empty where none were recorded)."""
        return frozenset(self.calibration.fingerprints or ()) if self.calibration is not None else frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {"calibration": None if self.calibration is None else self.calibration.to_dict(),
                "eval": None if self.eval is None else self.eval.to_dict(),
                "judged_on": None if self.judged_on is None else self.judged_on.to_dict()}

    @classmethod
    def from_dict(cls, data: object) -> DataRecord | None:
        """The record, or None where ``data`` is not an object (a manifest without the section)."""
        if not isinstance(data, dict):
            return None
        return cls(DataDescription.from_dict(data.get("calibration")), DataDescription.from_dict(data.get("eval")),
                   JudgedOn.from_dict(data.get("judged_on")))


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
    :func:`read_manifest` reports. ``between_renames`` is a seam for tests (see :func:`trtpipe.files.commit_pair`).
    """
    staged, artifact = Path(staged), Path(artifact)
    size = staged.stat().st_size
    if size != manifest.size_bytes:
        raise ValueError(f"the manifest describes {manifest.size_bytes} bytes, the staged file holds {size}: "
                         "describe it with content=staged")
    manifest = replace(manifest, path=artifact.name)
    path = manifest_path(artifact)
    data = (json.dumps(manifest.to_dict(), indent=2, sort_keys=False, default=str) + "\n").encode("utf-8")
    commit_pair(staged, artifact, path, data, between_renames=between_renames)
    return path


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
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"{path} cannot be read as a trtpipe manifest ({error}): {_FIX}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise BadInput(f"{path} is not a trtpipe manifest (JSON nested too deeply): {_FIX}") from None
    except ValueError as error:
        raise BadInput(f"{path} is not valid JSON ({error}): {_FIX}") from None
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
