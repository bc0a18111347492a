"""An AOTInductor package as its manifest vouches for it, and the checks that come before loading one.

A ``.pt2`` holds a shared library that loading runs: it is native code. So nothing is loaded that the manifest
``trtpipe compile`` wrote beside it does not describe byte for byte (SHA-256), that another torch built (the
package calls into the torch that compiled it), or that needs what this machine lacks (a CUDA GPU, the GPU
architecture its kernels were built for, the CPU instruction set its code uses). Each refusal is one line naming
the package, what it needs and the fix. The bytes that are loaded are the bytes that were hashed: they are read
once, checked, and handed to torch from a private copy, so the file cannot be swapped between check and load.

The manifest's ``aotinductor`` section is the package's record in the artifact room
(:mod:`trtpipe.artifact.records.package`), read there and checked here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from trtpipe.artifact.records.package import X86_CAPABILITIES, AotiPackage
from trtpipe.errors import BadInput
from trtpipe.files import sha256_bytes
from trtpipe.vocab import Device

if TYPE_CHECKING:
    from torch._inductor.package.package import AOTICompiledModel


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
