"""ONNX Runtime execution providers: which ones an execution choice asks for, with their options, and the check
that they exist here (ONNX Runtime would otherwise fall back to the CPU without a word)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trtpipe.errors import BadInput
from trtpipe.vocab import GPU_PROVIDERS, OnnxExecution

Providers = Sequence[str | tuple[str, dict[str, Any]]]


def provider_list(execution: OnnxExecution, *,
                  trt_profile: tuple[str, str, str] | None = None) -> list[str | tuple[str, dict[str, Any]]]:
    """Providers (with options) for an execution choice.

    The CUDA provider computes FP32 in FP32 (``use_tf32=0``: TF32 would be a different row). The TensorRT provider
    gets ``trt_profile``: min/opt/max shape specs such as ``input:1x3x224x224``, so it builds one
    engine for the whole batch range instead of one per new shape.
    """
    providers: list[str | tuple[str, dict[str, Any]]] = []
    for name in execution.providers:
        options: dict[str, Any] = {}
        if name == "CUDAExecutionProvider":
            options["use_tf32"] = 0
        elif name == "TensorrtExecutionProvider" and trt_profile:
            options.update(trt_profile_min_shapes=trt_profile[0], trt_profile_opt_shapes=trt_profile[1],
                           trt_profile_max_shapes=trt_profile[2])
        providers.append((name, options) if options else name)
    return providers


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
        raise BadInput(f"ONNX Runtime did not use {first} for {label} (active providers: {', '.join(active)}): "
                       f"check 'trtpipe doctor' for the CUDA/TensorRT libraries it needs{needs}.")
