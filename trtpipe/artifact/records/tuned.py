"""The ONNX Runtime settings a probe chose for an artifact, kept beside it so every later run is the same.

``model.onnx`` -> ``model.tuned.json``: for each way of running it (``onnxruntime-cuda``, ``onnxruntime``), the run
settings the probe found fastest among those whose outputs matched the plain run, the device and ONNX Runtime
version it was measured with, and what each candidate measured. ``trtpipe.load``, ``serve``, ``bench`` and the
Triton export read it through the artifact's description. A file written for other bytes (the artifact was
replaced) is ignored with one warning; a damaged one is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtpipe import console
from trtpipe.artifact.records.document import Unreadable, read_document
from trtpipe.errors import BadInput
from trtpipe.files import sha256_file, write_json_atomic
from trtpipe.vocab import OnnxExecution

TUNED_SCHEMA = "trtpipe.tuned/1"
# The settings a probe may choose; anything else in the file is refused.
TUNABLE = ("io_binding", "cuda_graph", "prefer_nhwc", "cudnn_search")


def tuned_path(artifact: Path) -> Path:
    """``model.onnx`` -> ``model.tuned.json``."""
    return Path(artifact).with_suffix(".tuned.json")


@dataclass(frozen=True)
class TunedRun:
    """What a probe chose for one way of running an artifact."""

    execution: OnnxExecution
    settings: dict[str, Any]  # the TUNABLE run settings it chose, by name, as JSON values
    device: str  # the device it was measured on (a GPU's name, or the CPU's model)
    onnxruntime: str
    batch: int
    candidates: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"settings": dict(self.settings),
                "device": self.device, "runtime_version": self.onnxruntime, "batch": self.batch,
                "candidates": list(self.candidates)}


def tunable_settings(settings: object) -> dict[str, Any]:
    """The settings a probe chooses, read from run settings (trtpipe.runtime.options.RunOptions), as JSON values (a
    record's ``settings``, and each candidate's)."""
    return {name: str(value) if isinstance(value, str) else value
            for name in TUNABLE for value in [getattr(settings, name)]}


def read_tuned(artifact: Path, sha256: str | None = None) -> dict[OnnxExecution, TunedRun]:
    """The tuned runs recorded beside ``artifact`` ({} where there are none). ``sha256``: the artifact's hash where
    the caller knows it (its manifest's), else it is computed."""
    path = tuned_path(artifact)
    if not path.is_file():
        return {}
    try:
        data = read_document(path)
        if not isinstance(data, dict) or data.get("schema") != TUNED_SCHEMA:
            raise ValueError(f"schema is {data.get('schema') if isinstance(data, dict) else data!r}, "
                             f"not {TUNED_SCHEMA}")
        if data.get("artifact_sha256") != (sha256 or sha256_file(artifact)):
            console.warn(f"{path.name} was written for other bytes than {Path(artifact).name}: its tuned settings "
                         "are ignored (bench the artifact again to tune it).")
            return {}
        return {OnnxExecution(name): _run(OnnxExecution(name), entry)
                for name, entry in dict(data.get("executions", {})).items()}
    except (Unreadable, ValueError, TypeError, KeyError, AttributeError) as error:
        raise BadInput(f"{path} is damaged ({error}): delete it, or bench the artifact again to rewrite it.") from None


def _run(execution: OnnxExecution, entry: dict[str, Any]) -> TunedRun:
    settings = dict(entry["settings"])
    unknown = sorted(set(settings) - set(TUNABLE))
    if unknown:
        raise ValueError(f"unknown setting {', '.join(unknown)}")
    return TunedRun(execution, settings, str(entry.get("device", "")),
                    str(entry.get("runtime_version", "")), int(entry.get("batch", 0)),
                    tuple(entry.get("candidates", ())))


def write_tuned(artifact: Path, run: TunedRun) -> Path:
    """Record ``run`` beside ``artifact``, keeping what other executions recorded (written atomically)."""
    path = tuned_path(artifact)
    digest = sha256_file(artifact)
    executions: dict[str, Any] = {}
    if path.is_file():
        try:
            previous = read_document(path)
            if previous.get("artifact_sha256") == digest:
                executions = dict(previous.get("executions", {}))
        except (Unreadable, ValueError, AttributeError):
            pass  # a damaged file is replaced
    executions[str(run.execution)] = run.to_dict()
    write_json_atomic(path, {"schema": TUNED_SCHEMA, "artifact": Path(artifact).name, "artifact_sha256": digest,
                             "executions": executions})
    return path
