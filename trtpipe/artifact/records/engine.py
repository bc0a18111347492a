"""The metadata sidecar of a TensorRT engine, and the checks made before an engine is deserialised.

An engine is tied to the TensorRT version and the GPU it was built for. Deserialising a mismatched one fails
deep inside TensorRT with a cryptic message (or crashes); checking the sidecar first turns that into one line:
what it was built for, what this machine is, and how to rebuild.

An engine and its sidecar are committed as one (:func:`commit_engine`): the sidecar records the hash of the engine
bytes its run built, and both renames happen under the engine's commit lock, so two builds writing one path end
with one build's pair, and a pair left mismatched (a build killed between the renames) is refused on reading.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.commit import commit
from trtpipe.artifact.records.document import Unreadable, read_document
from trtpipe.errors import BadInput
from trtpipe.files import sha256_bytes, sha256_file
from trtpipe.vocab import Precision

SIDECAR_SCHEMA = "trtpipe.engine/1"


class HardwareCompat(StrEnum):
    """Which GPUs an engine may run on (TensorRT's HardwareCompatibilityLevel): a fact of the engine file, which its
    sidecar records and `build --hardware-compat` asks for."""

    NONE = "none"
    AMPERE_PLUS = "ampere+"
    SAME_CC = "same-cc"

    @property
    def tensorrt_name(self) -> str:
        return {"none": "NONE", "ampere+": "AMPERE_PLUS", "same-cc": "SAME_COMPUTE_CAPABILITY"}[self.value]


@dataclass
class EngineSidecar:
    tensorrt_version: str
    gpu_name: str
    compute_capability: str  # "9.0"
    hardware_compat: HardwareCompat = HardwareCompat.NONE
    version_compatible: bool = False
    strongly_typed: bool = True
    precision: Precision = Precision.FP32
    inputs: list[dict[str, Any]] = field(default_factory=list)
    outputs: list[dict[str, Any]] = field(default_factory=list)
    profiles: list[list[dict[str, Any]]] = field(default_factory=list)
    workspace_bytes: int | None = None
    opt_level: int | None = None
    build_seconds: float | None = None
    onnx_sha256: str | None = None
    engine_sha256: str | None = None
    schema: str = SIDECAR_SCHEMA

    def __post_init__(self) -> None:
        """Choices become enums here, whether the sidecar is built or read (ValueError names a
        value that is none of them)."""
        for key, enum in (("hardware_compat", HardwareCompat), ("precision", Precision)):
            value = getattr(self, key)
            if value not in tuple(enum):
                raise ValueError(f"'{key}' is {value!r}, not one of {', '.join(enum)}")
            setattr(self, key, enum(value))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineSidecar:
        """Checked field by field: a sidecar decides what is deserialised, so nothing in it is taken on trust."""
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        for key, kinds in _SCHEMA.items():
            value = data.get(key)
            if value is None and key in _REQUIRED:
                raise ValueError(f"'{key}' is missing")
            if value is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
                raise ValueError(f"'{key}' is {type(value).__name__}, not {' or '.join(k.__name__ for k in kinds)}")
        if not _SHA256.match(data["engine_sha256"]):
            raise ValueError("'engine_sha256' is not a SHA-256 hex digest")
        for key in ("inputs", "outputs"):
            for index, tensor in enumerate(data.get(key) or []):
                _check_object(f"{key}[{index}]", tensor, _TENSOR)
        for index, profile in enumerate(data.get("profiles") or []):
            if not isinstance(profile, list):
                raise ValueError(f"'profiles[{index}]' is {type(profile).__name__}, not list")
            for number, shapes in enumerate(profile):
                _check_object(f"profiles[{index}][{number}]", shapes, _PROFILE)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


_SCHEMA: dict[str, tuple[type, ...]] = {
    "tensorrt_version": (str,), "gpu_name": (str,), "compute_capability": (str,), "hardware_compat": (str,),
    "version_compatible": (bool,), "strongly_typed": (bool,), "precision": (str,), "inputs": (list,),
    "outputs": (list,), "profiles": (list,), "workspace_bytes": (int,), "opt_level": (int,),
    "build_seconds": (int, float), "onnx_sha256": (str,), "engine_sha256": (str,), "schema": (str,),
}
_REQUIRED = {"tensorrt_version", "gpu_name", "compute_capability", "engine_sha256", "schema"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Each entry of "inputs"/"outputs" (as engine.builder records a tensor) and of a profile (ProfileShapes.to_dict):
# the fields that are read, and what they must be. A shape is a list of integers (-1: dynamic).
_TENSOR: dict[str, type] = {"name": str, "dtype": str, "shape": list}
_PROFILE: dict[str, type] = {"input": str, "min": list, "opt": list, "max": list}


def _check_object(where: str, value: object, fields: dict[str, type]) -> None:
    """ValueError naming the field (``inputs[0].shape``) that is missing or not what it must be."""
    if not isinstance(value, dict):
        raise ValueError(f"'{where}' is {type(value).__name__}, not an object")
    for key, kind in fields.items():
        item = value.get(key)
        if not isinstance(item, kind):
            raise ValueError(f"'{where}.{key}' is {'missing' if item is None else type(item).__name__}, "
                             f"not {kind.__name__}")
        if isinstance(item, list) and not all(isinstance(d, int) and not isinstance(d, bool) for d in item):
            raise ValueError(f"'{where}.{key}' holds something other than integers")


def sidecar_path(engine: Path) -> Path:
    """``model.plan`` -> ``model.plan.json``."""
    return Path(f"{engine}.json")


def sidecar_engine(sidecar: Path) -> Path:
    """The engine a sidecar describes: ``model.plan.json`` -> ``model.plan`` (:func:`sidecar_path` undone)."""
    return Path(str(sidecar).removesuffix(".json"))


def is_sidecar(document: object) -> bool:
    """Whether a parsed JSON document is a trtpipe engine sidecar, of this layout or another (``trtpipe inspect``
    refuses one given as layer information)."""
    schema = document.get("schema") if isinstance(document, dict) else None
    return isinstance(schema, str) and schema.startswith(SIDECAR_SCHEMA.split("/")[0] + "/")


def read_sidecar(engine: Path) -> EngineSidecar:
    path = sidecar_path(engine)
    if not path.is_file():
        raise BadInput(f"{engine} has no metadata sidecar ({path.name}): rebuild it with 'trtpipe build', which "
                       "records what it was built for.")
    try:
        data = read_document(path)
        if not isinstance(data, dict) or data.get("schema") != SIDECAR_SCHEMA:
            raise ValueError(f"schema {data.get('schema') if isinstance(data, dict) else None!r}")
        return EngineSidecar.from_dict(data)
    except (Unreadable, ValueError, TypeError) as error:
        raise BadInput(f"{path} is not a trtpipe engine sidecar ({error}): rebuild with 'trtpipe build'.") from None


def commit_engine(engine: Path, engine_bytes: bytes, sidecar: EngineSidecar, *,
                  between_renames: Callable[[], None] | None = None) -> EngineSidecar:
    """Write ``engine_bytes`` to ``engine`` and its sidecar beside it, as one commit; returns the sidecar written,
    its ``engine_sha256`` that of ``engine_bytes``.

    The hash comes from the bytes this build made, never from the file at ``engine`` once renamed (another build
    may have replaced it by then); the two renames run under the engine's commit lock (see
    :func:`trtpipe.artifact.records.commit.commit`, whose test seam ``between_renames`` is).
    """
    sidecar = dataclasses.replace(sidecar, engine_sha256=sha256_bytes(engine_bytes))
    commit(engine, engine_bytes, sidecar_path(engine), sidecar.to_dict(), between_renames=between_renames)
    return sidecar


def check_engine_file(engine: Path, sidecar: EngineSidecar) -> None:
    """The engine on disk is the one the sidecar describes (not truncated, not swapped)."""
    if not engine.is_file():
        raise BadInput(f"Engine {engine} does not exist.")
    actual = sha256_file(engine)
    if actual != sidecar.engine_sha256:
        raise BadInput(f"{engine} does not match its sidecar (SHA-256 {actual[:12]}… vs recorded "
                       f"{(sidecar.engine_sha256 or 'none')[:12]}…): the file was changed or truncated; rebuild with "
                       "'trtpipe build'.")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


# A version-compatible engine runs on the same or a newer TensorRT of its major version and, per TensorRT 11's
# support matrix, a TensorRT 10 engine also runs on TensorRT 11.
FORWARD_MAJORS = {10: (10, 11), 11: (11,)}


def runs_version_compatible(built: tuple[int, ...], here: tuple[int, ...]) -> bool:
    """Whether a version-compatible engine built with TensorRT ``built`` runs on TensorRT ``here``."""
    if not built or not here or here < built:
        return False
    return here[0] in FORWARD_MAJORS.get(built[0], (built[0],))


def check_compatibility(sidecar: EngineSidecar, *, tensorrt_version: str, compute_capability: str,
                        gpu_name: str = "") -> None:
    """Raise BadInput when this machine (TensorRT version, GPU) cannot run the engine the sidecar describes."""
    built, here = _version_tuple(sidecar.tensorrt_version), _version_tuple(tensorrt_version)
    rebuild = "rebuild it here with 'trtpipe build'"
    if built != here and not (sidecar.version_compatible and runs_version_compatible(built, here)):
        hint = "" if sidecar.version_compatible else " (it was not built with --version-compat)"
        raise BadInput(f"Engine built with TensorRT {sidecar.tensorrt_version}; this machine has TensorRT "
                       f"{tensorrt_version}{hint}: {rebuild}.")
    cc_built, cc_here = _version_tuple(sidecar.compute_capability), _version_tuple(compute_capability)
    where = f"{sidecar.gpu_name} (compute capability {sidecar.compute_capability})"
    this = f"{gpu_name or 'this GPU'} (compute capability {compute_capability})"
    if sidecar.hardware_compat == HardwareCompat.AMPERE_PLUS:
        if cc_here < (8, 0):
            raise BadInput(f"Engine built for Ampere and newer GPUs; this machine has {this}: {rebuild}.")
    elif cc_here != cc_built:
        raise BadInput(f"Engine built for {where}; this machine has {this}: {rebuild}, or build with "
                       "--hardware-compat ampere+ to share engines across GPUs.")
