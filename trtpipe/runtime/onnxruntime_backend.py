"""ONNX Runtime execution of an ONNX artifact; CPU by default, any installed provider on request."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe.errors import BadInput
from trtpipe.onnx_info import detect_precision, load_onnx
from trtpipe.runtime.base import Backend, TensorInfo

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
# --backend names for ONNX artifacts -> ONNX Runtime execution providers, in priority order.
ONNX_BACKENDS = {
    "onnxruntime": ["CPUExecutionProvider"],
    "onnxruntime-cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"],
    "onnxruntime-tensorrt": ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"],
}


def provider_list(backend: str, *, trt_workspace: int | None = None, trt_cache_dir: Path | None = None
                  ) -> list[str | tuple[str, dict[str, Any]]]:
    """Providers (with options) for a --backend name; the TensorRT EP gets workspace, engine and timing caches."""
    if backend not in ONNX_BACKENDS:
        raise BadInput(f"Unknown ONNX backend '{backend}': choose one of {', '.join(ONNX_BACKENDS)}.")
    providers: list[str | tuple[str, dict[str, Any]]] = []
    for name in ONNX_BACKENDS[backend]:
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

_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


def check_providers(providers: Sequence[str | tuple[str, dict[str, Any]]]) -> list[str]:
    """The providers' names; BadInput naming what is asked for and what exists when one is not installed."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    names = [p if isinstance(p, str) else p[0] for p in providers]
    unknown = [p for p in names if p not in available]
    if unknown:
        gpu = {"CUDAExecutionProvider", "TensorrtExecutionProvider"}
        hint = " (pip install 'trtpipe[gpu]' for the CUDA and TensorRT providers)" if (
            set(unknown) & gpu and not set(available) & gpu) else ""
        raise BadInput(f"Requested ONNX Runtime providers {', '.join(unknown)}; available providers are "
                       f"{', '.join(available)}{hint}.")
    return names


class OnnxRuntimeBackend(Backend):
    kind = "onnxruntime"

    def __init__(
        self,
        path: Path | onnx.ModelProto,
        *,
        providers: Sequence[str | tuple[str, dict[str, Any]]] | None = None,
        threads: int | None = None,
        optimization: str = "all",
        spinning: bool = True,
    ) -> None:
        import onnxruntime as ort

        # An in-memory model (optimize's candidates) runs without touching the disk.
        in_memory = isinstance(path, onnx.ModelProto)
        self.path = None if in_memory else Path(path)
        model = path if in_memory else load_onnx(self.path, load_weights=False)
        self.precision = detect_precision(model)
        source = model.SerializeToString() if in_memory else str(self.path)
        label = "the in-memory model" if in_memory else str(self.path)
        del model
        self.providers = list(providers or ["CPUExecutionProvider"])
        names = check_providers(self.providers)
        if optimization not in OPTIMIZATION_LEVELS:
            raise BadInput(f"Unknown graph optimisation level '{optimization}': choose one of "
                           f"{', '.join(OPTIMIZATION_LEVELS)}.")
        options = ort.SessionOptions()
        options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[optimization]
        options.log_severity_level = 3  # warnings about unused initialisers etc. are noise to a user
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        if not spinning:  # a server needs the CPU between requests: idle pool threads must sleep, not spin
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.optimization = optimization
        self.threads = threads
        try:
            self.session = ort.InferenceSession(source, options, providers=self.providers)
        except Exception as error:  # ORT raises its own Fail/InvalidGraph/NotImplemented types
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BadInput(f"ONNX Runtime cannot load {label}: {message}") from None
        self.device = "cuda" if any(p.startswith(("CUDA", "Tensorrt")) for p in names) else "cpu"
        self._inputs = [_info(i) for i in self.session.get_inputs()]
        self._outputs = [_info(o) for o in self.session.get_outputs()]
        self._output_names = [o.name for o in self._outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.session.run(self._output_names, feeds)

    def close(self) -> None:
        # Dropping the session stops its thread pool, so it cannot spin against the next thing measured.
        self.__dict__.pop("session", None)


def _info(node: object) -> TensorInfo:
    ort_type = node.type  # type: ignore[attr-defined]
    shape = tuple(d if isinstance(d, int) else (d or None) for d in node.shape)  # type: ignore[attr-defined]
    return TensorInfo(node.name, _ORT_TYPES.get(ort_type, ort_type), shape)  # type: ignore[attr-defined]
