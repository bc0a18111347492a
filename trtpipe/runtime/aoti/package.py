"""An AOTInductor package as its manifest vouches for it, and the checks that come before loading one.

A ``.pt2`` holds a shared library that loading runs: it is native code. So nothing is loaded that the manifest
``trtpipe compile`` wrote beside it does not describe byte for byte (SHA-256), that another torch built (the
package calls into the torch that compiled it), or that needs what this machine lacks (a CUDA GPU, the GPU
architecture its kernels were built for, the CPU instruction set its code uses). Each refusal is one line naming
the package, what it needs and the fix. The bytes that are loaded are the bytes that were hashed: they are read
once, checked, and handed to torch from a private copy, so the file cannot be swapped between check and load.

The manifest's ``aotinductor`` section is its typed record here (:class:`AotiRecord`, which ``trtpipe compile``
writes), so its layout is read and written in one place.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.errors import BadInput
from trtpipe.files import sha256_bytes
from trtpipe.manifest import ArtifactManifest, manifest_path, read_manifest
from trtpipe.runtime.base import TensorInfo
from trtpipe.vocab import ArtifactKind, Device

if TYPE_CHECKING:
    from torch._inductor.package.package import AOTICompiledModel

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


def check_loadable(package: AotiPackage) -> None:
    """BadInput in one line when this machine cannot run ``package``: another torch, no CUDA GPU for a CUDA
    package or another GPU architecture, a CPU without the instruction set the package's code uses."""
    import torch

    path = package.path
    if package.record.torch_version != torch.__version__:
        raise BadInput(f"{path} was compiled by torch {package.record.torch_version}, and this is torch "
                       f"{torch.__version__}: an AOTInductor package runs only on the torch that compiled it. "
                       "Compile it again here.")
    if package.device is Device.CUDA:
        if not torch.cuda.is_available():
            raise BadInput(f"{path} is compiled for {Device.CUDA} and torch sees no CUDA GPU here: run it on a "
                           f"machine with one (a {package.record.gpu_name or 'GPU'} of compute capability "
                           f"{package.record.compute_capability}), or compile it for {Device.CPU}.")
        here = compute_capability()
        if package.record.compute_capability and package.record.compute_capability != here:
            raise BadInput(f"{path} was compiled for GPUs of compute capability {package.record.compute_capability} "
                           f"({package.record.gpu_name}); this GPU is {here}: compile it again on this machine.")
        return
    here = torch.backends.cpu.get_cpu_capability()
    built = package.record.cpu_capability
    if built and built != here and not (built in X86_CAPABILITIES and here in X86_CAPABILITIES
                                        and X86_CAPABILITIES.index(built) < X86_CAPABILITIES.index(here)):
        raise BadInput(f"{path} was compiled for CPUs with {built}, and this CPU offers {here}: its code could "
                       "stop on an instruction this CPU lacks. Compile it again on this machine.")


def compute_capability() -> str:
    """The current CUDA device's compute capability, e.g. "9.0"."""
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def load_checked(package: AotiPackage, *, single_threaded: bool) -> AOTICompiledModel:
    """Load ``package`` after :func:`check_loadable`, from bytes whose SHA-256 is the manifest's, copied where
    nobody else can write; ``single_threaded`` drops AOTInductor's own locking, which a CUDA graph capture needs."""
    import torch

    from trtpipe.runtime.aoti.logs import quiet_torch

    check_loadable(package)
    data = package.path.read_bytes()
    if sha256_bytes(data) != package.sha256:
        raise BadInput(f"{package.path} changed after its manifest was checked (its SHA-256 differs): it is not "
                       "loaded; compile it again with trtpipe compile.")
    with tempfile.TemporaryDirectory(prefix="trtpipe-aoti-") as folder, quiet_torch():  # a 0700 folder
        private = Path(folder) / "model.pt2"  # torch wants the suffix
        private.write_bytes(data)
        try:
            return torch._inductor.aoti_load_package(str(private), run_single_threaded=single_threaded)
        except Exception as error:  # torch raises RuntimeError (and others) from its C++ loader
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BadInput(f"torch cannot load {package.path}: {first}") from None
