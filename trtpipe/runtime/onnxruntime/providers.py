"""ONNX Runtime execution providers: which ones an execution choice asks for, with their options, and the check
that they exist here (ONNX Runtime would otherwise fall back to the CPU without a word)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtpipe.errors import BadInput
from trtpipe.vocab import GPU_PROVIDERS, OnnxExecution

Providers = Sequence[str | tuple[str, dict[str, Any]]]


def provider_list(execution: OnnxExecution, *, trt_workspace: int | None = None, trt_cache_dir: Path | None = None
                  ) -> list[str | tuple[str, dict[str, Any]]]:
    """Providers (with options) for an execution choice; the TensorRT EP gets workspace, engine and timing caches."""
    providers: list[str | tuple[str, dict[str, Any]]] = []
    for name in OnnxExecution(execution).providers:
        if name == "TensorrtExecutionProvider":
            options: dict[str, Any] = {}
            if trt_workspace:
                options["trt_max_workspace_size"] = trt_workspace
            if trt_cache_dir:
                options.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(trt_cache_dir),
                               trt_timing_cache_enable=True, trt_timing_cache_path=str(trt_cache_dir))
            providers.append((name, options))
        else:
            providers.append(name)
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
