"""What ONNX Runtime's installation offers and does: its providers here, the CUDA libraries its CUDA provider loads,
whether a session really runs where it was asked to, and ``trtpipe doctor``'s line. The one module of the folder that
imports onnxruntime for these (providers.py, the names and options, stays light for the run options)."""

from __future__ import annotations

import contextlib
import functools
import io
from typing import Any

from trtpipe.errors import BadInput
from trtpipe.runtime.onnxruntime.providers import GPU_PROVIDERS, Providers


@functools.cache
def preload_cuda_libraries() -> str | None:
    """Load the CUDA, cuBLAS and cuDNN libraries ONNX Runtime's CUDA provider needs, once per process, the way ONNX
    Runtime documents (``onnxruntime.preload_dlls()``, 1.21 and later: from the nvidia-* wheels, then the default
    library path). The provider's library has no RUNPATH to them: without this, a process that never imported torch
    (which loads them) gets a session that quietly falls back to the CPU. Returns what ``preload_dlls`` reported
    failing to load (it prints it; it is kept for the one-line refusal), or None."""
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is None:  # older than 1.21: the libraries must be on the library path
        return None
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            preload()
        except (OSError, RuntimeError) as error:  # a directory or library ONNX Runtime could not use
            print(f"Failed to preload: {error}")
    failures = [line.strip() for line in printed.getvalue().splitlines() if line.strip().startswith("Failed")]
    return failures[0] if failures else None


def check_providers(providers: Providers) -> list[str]:
    """The providers' names; BadInput naming what is asked for and what exists when one is not installed."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    names = [p if isinstance(p, str) else p[0] for p in providers]
    unknown = [p for p in names if p not in available]
    if unknown:
        hint = " (pip install 'trtpipe[gpu]' for the CUDA and TensorRT providers)" if (
            set(unknown) & GPU_PROVIDERS and not set(available) & GPU_PROVIDERS) else ""
        raise BadInput(f"Requested ONNX Runtime providers {', '.join(unknown)}; available providers are "
                       f"{', '.join(available)}{hint}.")
    return names


def check_active(requested: Providers, active: list[str], label: str) -> None:
    """ONNX Runtime quietly falls back to the CPU when a provider cannot take a model: refuse that."""
    wanted = [p if isinstance(p, str) else p[0] for p in requested]
    first = wanted[0] if wanted else None
    if first and first != "CPUExecutionProvider" and first not in active:
        needs = (" (the TensorRT provider of onnxruntime-gpu needs TensorRT 10's libnvinfer.so.10 on the library "
                 "path)") if first == "TensorrtExecutionProvider" else ""
        if first == "CUDAExecutionProvider" and preload_cuda_libraries.cache_info().currsize:
            failed = preload_cuda_libraries()
            needs = f" (onnxruntime.preload_dlls: {failed})" if failed else needs
        raise BadInput(f"ONNX Runtime did not use {first} for {label} (active providers: {', '.join(active)}): "
                       f"check 'trtpipe doctor' for the CUDA/TensorRT libraries it needs{needs}.")


def environment() -> dict[str, Any]:
    """What bench records of ONNX Runtime's installation beside its version: the providers it offers here."""
    import onnxruntime

    return {"onnxruntime_providers": onnxruntime.get_available_providers()}


def doctor_row() -> dict[str, Any]:
    """``trtpipe doctor``'s line for ONNX Runtime: its version and providers, fine where it offers a GPU one."""
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    return {"item": "ONNX Runtime", "ok": bool([p for p in providers if p in GPU_PROVIDERS]),
            "value": f"{onnxruntime.__version__}: {', '.join(providers)}",
            "fix": "pip uninstall -y onnxruntime && pip install onnxruntime-gpu (one provides the module; "
                   "onnxruntime-gpu adds the CUDA and TensorRT providers)"}
