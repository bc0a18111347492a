"""Finding TensorRT and a CUDA GPU, and collecting TensorRT's messages: shared by the engine builder and the
TensorRT backend. Nothing here imports tensorrt at module load; each function does when it is called, and a
missing piece fails at once with the install line.
"""

from __future__ import annotations

import collections
from types import ModuleType
from typing import Any

from trtpipe.errors import MissingDependency

INSTALL_TENSORRT = ("pip install 'trtpipe[gpu]' with NVIDIA's Python package index as an extra index "
                    "(TensorRT's library wheels are published only there; see NVIDIA's TensorRT install guide)")
LEAN_MODULES = ("tensorrt_lean", "tensorrt_lean_bindings")


def import_tensorrt(purpose: str) -> ModuleType:
    """The full TensorRT package (builder and parser), or MissingDependency with the install line.

    tensorrt-stubs installs an empty ``tensorrt`` namespace package, so an import that succeeds is not enough.
    """
    try:
        import tensorrt as trt
    except ImportError:
        trt = None
    if trt is None or not hasattr(trt, "Builder"):
        raise MissingDependency("TensorRT", purpose, INSTALL_TENSORRT)
    return trt


def import_tensorrt_runtime(purpose: str) -> tuple[ModuleType, bool]:
    """A TensorRT runtime: the full package, else the lean runtime. Returns (module, is_lean)."""
    try:
        return import_tensorrt(purpose), False
    except MissingDependency:
        pass
    for name in LEAN_MODULES:
        try:
            module = __import__(name)
        except ImportError:
            continue
        if hasattr(module, "Runtime"):
            return module, True
    raise MissingDependency("TensorRT", purpose, INSTALL_TENSORRT)


def require_cuda_gpu(purpose: str) -> tuple[str, str]:
    """(GPU name, compute capability) of GPU 0, or MissingDependency when torch sees no CUDA GPU."""
    import torch

    if not torch.cuda.is_available():
        raise MissingDependency("a CUDA GPU", purpose, "run it on a machine with an NVIDIA GPU and its driver")
    major, minor = torch.cuda.get_device_capability(0)
    return torch.cuda.get_device_name(0), f"{major}.{minor}"


class TensorRTLogger:
    """Collects TensorRT's warnings and errors so failures can be explained (workspace, parse, kernels).

    Only the most recent messages are kept: a server's logger lives as long as the process.
    """

    def __init__(self, trt: ModuleType, keep: int = 200) -> None:
        self.messages: collections.deque[tuple[str, str]] = collections.deque(maxlen=keep)
        messages = self.messages

        class Logger(trt.ILogger):  # type: ignore[misc, name-defined]
            def __init__(inner) -> None:
                trt.ILogger.__init__(inner)

            def log(inner, severity: Any, message: str) -> None:
                if int(severity) <= int(trt.ILogger.Severity.WARNING):
                    messages.append((str(severity), message))

        self.trt_logger = Logger()

    def errors(self) -> list[str]:
        return [m for s, m in self.messages if "ERROR" in s]
