"""An AOTInductor package's record: what its manifest vouches for (the ``aotinductor`` section), read and written here.

``trtpipe compile`` writes it into the package's manifest; loading (runtime/aoti/package.py) checks a
package against it before any native code runs, and :func:`read_package` refuses, in one line, a package without
a manifest that describes exactly its bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.manifest import ArtifactManifest, manifest_path, read_manifest
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.vocab import ArtifactKind, Device

SECTION = "aotinductor"  # the manifest's section for what the package was compiled for
# torch's CPU capabilities on x86, weakest first: a package built for one runs on a CPU that has it or a later one.
X86_CAPABILITIES = ("DEFAULT", "AVX2", "AVX512")


@dataclass(frozen=True)
class AotiRecord:
    """The manifest's ``aotinductor`` section: what the package was compiled for beyond the manifest's typed part
    (which holds its device, SHA-256 and precision). Written by ``trtpipe compile``, read here before loading."""

    batch_range: tuple[int, int]  # the smallest and largest batch it accepts
    channels_last: bool
    torch_version: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    cuda_version: str | None = None  # a CUDA package's toolkit
    compute_capability: str | None = None  # a CUDA package's GPU architecture, e.g. "9.0"
    gpu_name: str | None = None
    cpu_capability: str | None = None  # a CPU package's instruction set (torch's name: AVX2, AVX512...)

    def to_dict(self) -> dict[str, Any]:
        return {"batch_range": list(self.batch_range), "channels_last": self.channels_last,
                "torch": self.torch_version, "cuda_version": self.cuda_version,
                "compute_capability": self.compute_capability, "gpu_name": self.gpu_name,
                "cpu_capability": self.cpu_capability, "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs]}

    @classmethod
    def from_dict(cls, data: object) -> AotiRecord:
        """The record ``to_dict`` wrote; KeyError, TypeError or ValueError where ``data`` is not one (the reader
        refuses the package: it is native code, loaded only as its manifest describes it)."""
        if not isinstance(data, dict):
            raise ValueError(f"no '{SECTION}' section")
        low, high = (int(b) for b in data["batch_range"])
        return cls((low, high), bool(data["channels_last"]), str(data["torch"]), tensor_infos(data["inputs"]),
                   tensor_infos(data["outputs"]), _text(data.get("cuda_version")),
                   _text(data.get("compute_capability")), _text(data.get("gpu_name")),
                   _text(data.get("cpu_capability")))


@dataclass(frozen=True)
class AotiPackage:
    """What an AOTInductor package was compiled for, as its manifest records it: the manifest's typed part
    (``sha256``, ``device``) and its ``aotinductor`` section (``record``)."""

    path: Path
    sha256: str
    device: Device
    record: AotiRecord

    @classmethod
    def of(cls, path: Path, sha256: str, device: Device, record: AotiRecord) -> AotiPackage:
        return cls(path, sha256, device, record)

    @property
    def range_text(self) -> str:
        low, high = self.record.batch_range
        return f"{low}-{high}" if low != high else str(low)


def read_package(path: Path) -> tuple[ArtifactManifest, AotiPackage]:
    """The package at ``path`` and its manifest; BadInput in one line when there is no manifest, or one that is
    not trtpipe's description of exactly these bytes."""
    path = Path(path)
    fix = "compile it again with trtpipe compile."
    if not manifest_path(path).is_file():
        raise BadInput(f"{path} has no manifest beside it ({manifest_path(path).name}): an AOTInductor package is "
                       f"native code, and trtpipe loads one only with the manifest trtpipe compile wrote; {fix}")
    mismatches: list[str] = []
    manifest = read_manifest(path, on_mismatch=mismatches.append)
    if manifest is None and mismatches:
        raise BadInput(f"{path} is not the file its manifest describes (its SHA-256 differs): it was changed or "
                       f"replaced after it was compiled, and a package is native code, so it is not loaded; {fix}")
    if manifest is None or manifest.kind is not ArtifactKind.AOTI or manifest.device is None:
        raise BadInput(f"{manifest_path(path)} is not the manifest trtpipe compile writes for an AOTInductor "
                       f"package, so {path} is not loaded; {fix}")
    return manifest, _package(path, manifest, manifest.device)


def _package(path: Path, manifest: ArtifactManifest, device: Device) -> AotiPackage:
    try:
        return AotiPackage.of(path, manifest.sha256, device, AotiRecord.from_dict(manifest.section(SECTION)))
    except (KeyError, TypeError, ValueError) as error:
        detail = f"'{error.args[0]}' is missing" if isinstance(error, KeyError) else str(error)
        raise BadInput(f"{manifest_path(path)} is not a valid AOTInductor manifest ({detail}), so {path} is not "
                       "loaded; compile it again with trtpipe compile.") from None


def tensor_infos(entries: Any) -> tuple[TensorInfo, ...]:
    """The tensors a manifest lists (``TensorInfo.to_dict`` each); KeyError or TypeError where an entry is not
    one."""
    return tuple(TensorInfo(str(e["name"]), str(e["dtype"]),
                            tuple(d if isinstance(d, int) or d is None else str(d) for d in e["shape"]))
                 for e in entries)


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
