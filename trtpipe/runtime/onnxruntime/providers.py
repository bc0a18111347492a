"""ONNX Runtime execution providers: which ones an execution choice asks for, with their options. Names and options
only, importing no onnxruntime (the run options read them); installation.py checks them against what is here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from trtpipe.vocab import OnnxExecution

Provider = str | tuple[str, dict[str, Any]]  # an execution provider: its name, or its name and its options
Providers = Sequence[Provider]
CPU_PROVIDER, CUDA_PROVIDER, TENSORRT_PROVIDER = ("CPUExecutionProvider", "CUDAExecutionProvider",
                                                  "TensorrtExecutionProvider")
# The providers each way of running a file takes, the first preferred (ONNX Runtime places each node on the first
# that has a kernel for it).
PROVIDERS: dict[OnnxExecution, tuple[str, ...]] = {
    OnnxExecution.CPU: (CPU_PROVIDER,), OnnxExecution.CUDA: (CUDA_PROVIDER, CPU_PROVIDER),
    OnnxExecution.TENSORRT: (TENSORRT_PROVIDER, CUDA_PROVIDER, CPU_PROVIDER)}
GPU_PROVIDERS = frozenset({CUDA_PROVIDER, TENSORRT_PROVIDER})


class CudaSettings(Protocol):
    """The run settings the CUDA provider's options are made from (RunOptions at the edge, the backend's own
    settings inside it: both have them)."""

    @property
    def cuda_graph(self) -> bool: ...

    @property
    def prefer_nhwc(self) -> bool: ...

    @property
    def cudnn_search(self) -> Any: ...  # CudnnSearch | None (settings.py, which imports this module)


def provider_names(providers: Providers) -> list[str]:
    """Execution providers by name."""
    return [p if isinstance(p, str) else p[0] for p in providers]


def execution_for(names: Sequence[str]) -> OnnxExecution | None:
    """The way of running a file that providers ``names`` make (the first decides; none: the CPU), or None for a
    first provider no execution starts with."""
    first = names[0] if names else CPU_PROVIDER
    return next((execution for execution, listed in PROVIDERS.items() if listed[0] == first), None)


def provider_list(execution: OnnxExecution, *, trt_profile: tuple[str, str, str] | None = None,
                  trt_workspace: int | None = None,
                  trt_cache_dir: Path | None = None) -> list[str | tuple[str, dict[str, Any]]]:
    """Providers (with options) for an execution choice; None means the provider's default.

    The CUDA provider computes FP32 in FP32 (``use_tf32=0``: TF32 would be a different row). The TensorRT provider
    gets :func:`tensorrt_provider_options`: the profile, the workspace limit and the caches.
    """
    providers: list[str | tuple[str, dict[str, Any]]] = []
    for name in PROVIDERS[execution]:
        options: dict[str, Any] = {}
        if name == "CUDAExecutionProvider":
            options["use_tf32"] = 0
        elif name == "TensorrtExecutionProvider":
            options = tensorrt_provider_options(trt_profile=trt_profile, workspace=trt_workspace,
                                                cache_dir=trt_cache_dir)
        providers.append((name, options) if options else name)
    return providers


def tensorrt_provider_options(*, trt_profile: tuple[str, str, str] | None = None, workspace: int | None = None,
                              cache_dir: Path | None = None) -> dict[str, Any]:
    """ONNX Runtime TensorRT provider options (names from ONNX Runtime's TensorRT execution provider page,
    https://onnxruntime.ai/docs/execution-providers/TensorRT-ExecutionProvider.html, and OrtTensorRTProviderOptions):

    - ``trt_profile``: min/opt/max shape specs such as ``input:1x3x224x224``, so the provider builds one engine for
      the whole batch range instead of one per new shape;
    - ``workspace``: ``trt_max_workspace_size`` in bytes, the same limit ``trtpipe build --workspace`` gives
      TensorRT (the provider's default is the GPU's memory since ONNX Runtime 1.19);
    - ``cache_dir``: engine and timing caches there (``trt_engine_cache_*``, ``trt_timing_cache_*``), so a second
      session reuses the engine instead of building it again for minutes.
    """
    options: dict[str, Any] = {}
    if trt_profile:
        options.update(trt_profile_min_shapes=trt_profile[0], trt_profile_opt_shapes=trt_profile[1],
                       trt_profile_max_shapes=trt_profile[2])
    if workspace is not None:
        options["trt_max_workspace_size"] = int(workspace)
    if cache_dir is not None:
        options.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(cache_dir),
                       trt_timing_cache_enable=True, trt_timing_cache_path=str(cache_dir))
    return options


def with_tensorrt_options(providers: Providers, *, workspace: int | None = None,
                          cache_dir: Path | None = None) -> tuple[str | tuple[str, dict[str, Any]], ...]:
    """``providers`` (a RunOptions' providers) with the TensorRT provider given ``workspace`` and ``cache_dir``
    on top of the options it has, so a run that already chose its providers still gets the build's --workspace.
    Providers other than TensorRT's are returned as they are."""
    extra = tensorrt_provider_options(workspace=workspace, cache_dir=cache_dir)
    result: list[str | tuple[str, dict[str, Any]]] = []
    for provider in providers:
        name, options = (provider, {}) if isinstance(provider, str) else (provider[0], dict(provider[1]))
        if name == "TensorrtExecutionProvider" and extra:
            result.append((name, {**options, **extra}))
        else:
            result.append(provider)
    return tuple(result)


def cuda_provider_options(options: CudaSettings) -> dict[str, Any]:
    """The CUDA provider's options for a run's settings (names from ONNX Runtime's CUDA execution provider page,
    https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html): ``enable_cuda_graph``,
    ``prefer_nhwc``, ``cudnn_conv_algo_search`` where the run sets it, and ``cudnn_conv_use_max_workspace`` on, so
    cuDNN may pick algorithms that need a large workspace (the fastest ones for large batches)."""
    chosen: dict[str, Any] = {"cudnn_conv_use_max_workspace": "1",
                              "enable_cuda_graph": "1" if options.cuda_graph else "0",
                              "prefer_nhwc": "1" if options.prefer_nhwc else "0"}
    if options.cudnn_search is not None:
        chosen["cudnn_conv_algo_search"] = options.cudnn_search.onnxruntime_name
    return chosen


def with_run_settings(providers: Providers, options: CudaSettings) -> list[str | tuple[str, dict[str, Any]]]:
    """``providers`` with the CUDA provider's options set from the run's settings (:func:`cuda_provider_options`)
    over the ones it was given; the other providers as they are."""
    result: list[str | tuple[str, dict[str, Any]]] = []
    for provider in providers:
        name, given = (provider, {}) if isinstance(provider, str) else (provider[0], dict(provider[1]))
        if name == "CUDAExecutionProvider":
            result.append((name, {**given, **cuda_provider_options(options)}))
        else:
            result.append(provider)
    return result


def without_cuda_graph(providers: Providers) -> list[str | tuple[str, dict[str, Any]]]:
    """``providers`` with the CUDA provider's graph capture off and every other option as it was (the fallback
    when a graph cannot be captured keeps the run's ``prefer_nhwc`` and cuDNN search)."""
    result: list[str | tuple[str, dict[str, Any]]] = []
    for provider in providers:
        name, given = (provider, {}) if isinstance(provider, str) else (provider[0], dict(provider[1]))
        result.append((name, {**given, "enable_cuda_graph": "0"}) if name == "CUDAExecutionProvider" else provider)
    return result
