"""What machine a benchmark ran on: numbers mean nothing without it."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from trtpipe.hardware import cpu_flags, cpu_model, usable_cores
from trtpipe.runtime.registry import environment_facts, gpu_run_settings, optional_packages, reference_versions

# Optional packages whose versions decide some rows: the optional runtimes (OpenVINO, TensorRT) and their peers' tools
# (NNCF), as their registry entries declare them.
OPTIONAL_PACKAGES = optional_packages()


def collect(threads: int) -> dict[str, Any]:
    import onnx
    import torch

    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {"name": props.name, "compute_capability": f"{props.major}.{props.minor}",
               "memory_gib": round(props.total_memory / 2**30, 1)}
    return {
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores": usable_cores(),
        "threads": threads,
        "gpu": gpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": {"torch": torch.__version__, "onnx": onnx.__version__,
                     **reference_versions(), **_optional_versions()},
        **environment_facts(),
        "gpu_settings": list(_gpu_settings()) if gpu else [],
    }


def _gpu_settings() -> tuple[str, ...]:
    """How the rows on a GPU are run where it matters for a comparison (the PyTorch rows' tuning, the copies), as the
    backends that declare it say."""
    return gpu_run_settings()


def _optional_versions() -> dict[str, str]:
    """Versions of the optional runtimes and peer tools that are installed (their rows depend on them)."""
    found = {}
    for name in OPTIONAL_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def device_name(gpu: bool) -> str:
    """The device a figure was measured on: the first CUDA GPU's name, else the CPU's model."""
    if gpu:
        import torch

        if torch.cuda.is_available():
            return str(torch.cuda.get_device_name(0))
    return cpu_model()
