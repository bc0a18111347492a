"""ONNX Runtime execution of an ONNX artifact; CPU by default, any installed provider on request."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from trtpipe.errors import BadInput
from trtpipe.onnx_info import detect_precision, load_onnx
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.onnxruntime.providers import Providers, check_active, check_providers
from trtpipe.vocab import BackendKind, Device, dtype

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


class OnnxRuntimeBackend(Backend):
    kind = BackendKind.ONNXRUNTIME

    def __init__(
        self,
        path: Path | onnx.ModelProto,
        *,
        providers: Providers | None = None,
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
        check_active(self.providers, self.session.get_providers(), label)
        self.device = Device.CUDA if any(p.startswith(("CUDA", "Tensorrt")) for p in names) else Device.CPU
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
    entry = dtype(onnx_name=ort_type.removeprefix("tensor(").removesuffix(")"))
    return TensorInfo(node.name, entry.numpy if entry else ort_type, shape)  # type: ignore[attr-defined]
