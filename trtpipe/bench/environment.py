"""What machine a benchmark ran on: numbers mean nothing without it."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

_INTERESTING_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                present = set(line.split(":", 1)[1].split())
                return [f for f in _INTERESTING_FLAGS if f in present]
    except OSError:
        pass
    return []


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def collect(threads: int) -> dict[str, Any]:
    import onnx
    import onnxruntime
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
                     "onnxruntime": onnxruntime.__version__},
        "onnxruntime_providers": onnxruntime.get_available_providers(),
    }
