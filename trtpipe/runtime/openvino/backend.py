"""OpenVINO execution of an ONNX artifact on the CPU (optional extra ``[openvino]``, imported when opened).

OpenVINO reads our ONNX files directly: FP32, FP16 (weights decompressed) and INT8 Q/DQ, which it turns into its
own low-precision kernels. Its CPU plugin silently computes in BF16 on CPUs that have AVX512-BF16 or AMX unless
told otherwise, so the inference precision is always set: f32 for every artifact except a BF16 one, whose
manifest asks for bf16. Threads and the latency/throughput hint are settable like ONNX Runtime's threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.errors import BadInput, MissingDependency
from trtpipe.manifest import read_manifest
from trtpipe.onnx_info import detect_precision, load_onnx
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.vocab import BackendKind, Device, Precision, Target

INSTALL = "pip install 'trtpipe[openvino]'"
HINTS = {"latency": "LATENCY", "throughput": "THROUGHPUT"}
# trtpipe's spelling -> OpenVINO's INFERENCE_PRECISION_HINT (OpenVINO spells BF16 as trtpipe does)
INFERENCE_PRECISIONS = {"f32": "f32", str(Precision.BF16): str(Precision.BF16)}


def import_openvino(purpose: str) -> Any:
    try:
        import openvino
    except ImportError:
        raise MissingDependency("OpenVINO", purpose, INSTALL) from None
    return openvino


class OpenVinoBackend(Backend):
    kind = BackendKind.OPENVINO
    device = Device.CPU

    def __init__(self, path: Path, *, threads: int | None = None, hint: str = "latency",
                 inference_precision: str = "f32", **_: Any) -> None:
        ov = import_openvino("Running an ONNX artifact on OpenVINO")
        self.path = Path(path)
        ir = self.path.suffix.lower() == ".xml"  # OpenVINO's own format: what bench --peers has NNCF write
        precision = Precision.FP32
        if not ir:
            manifest = read_manifest(self.path)
            if manifest and manifest.precision is Precision.INT8 and manifest.target is Target.TENSORRT:
                raise BadInput(f"{self.path} is TensorRT-target INT8: OpenVINO's integer kernels would not compute "
                               "TensorRT's arithmetic. Run it on onnxruntime, or optimize with --target cpu.")
            model = load_onnx(self.path, load_weights=False)  # trtpipe's external-data path checks come first
            precision = detect_precision(model)
            del model
        if hint not in HINTS:
            raise BadInput(f"Unknown OpenVINO hint '{hint}': choose {' or '.join(HINTS)}.")
        if inference_precision not in INFERENCE_PRECISIONS:
            raise BadInput(f"Unknown OpenVINO inference precision '{inference_precision}': choose "
                           f"{' or '.join(INFERENCE_PRECISIONS)}.")
        config: dict[str, Any] = {"PERFORMANCE_HINT": HINTS[hint],
                                  "INFERENCE_PRECISION_HINT": INFERENCE_PRECISIONS[inference_precision]}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        self.threads, self.hint = threads, hint
        try:
            core = ov.Core()
            model = core.read_model(str(self.path))
            if ir and any(op.get_type_name() == "FakeQuantize" for op in model.get_ops()):
                precision = Precision.INT8
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as error:  # OpenVINO raises its own RuntimeError subclasses
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BadInput(f"OpenVINO cannot load {self.path}: {message}") from None
        self.precision = Precision.BF16 if inference_precision == Precision.BF16 else precision
        self._request = self.compiled.create_infer_request()
        self._inputs = [_info(port) for port in self.compiled.inputs]
        self._outputs = [_info(port) for port in self.compiled.outputs]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        results = self._request.infer({info.name: feeds[info.name] for info in self._inputs})
        # Copies: the request reuses its output buffers on the next call.
        return [np.array(results[port], dtype=info.dtype) for port, info in zip(self.compiled.outputs, self._outputs,
                                                                                 strict=True)]

    def close(self) -> None:
        self.__dict__.pop("_request", None)
        self.__dict__.pop("compiled", None)


def _info(port: Any) -> TensorInfo:
    shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
    dtype = np.dtype(port.get_element_type().to_dtype()).name
    if dtype == "bfloat16" or not dtype.startswith(("float", "int", "uint", "bool")):
        dtype = "float32"  # a BF16 output is handed back as FP32, like every other row's
    return TensorInfo(port.get_any_name(), dtype, shape)
