"""OpenVINO execution of an ONNX artifact on the CPU (optional extra ``[openvino]``, imported when opened).

OpenVINO reads our ONNX files directly: FP32, FP16 (weights decompressed) and INT8 Q/DQ, which it turns into its
own low-precision kernels. Its CPU plugin silently computes in BF16 on CPUs that have AVX512-BF16 or AMX unless
told otherwise, so the inference precision is always set: f32 for every artifact except a BF16 one, whose
description asks for bf16. Threads and the latency/throughput hint are settable like ONNX Runtime's threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.artifact.description import ArtifactDescription, describe_artifact
from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput, MissingDependency
from trtpipe.runtime.base import Backend
from trtpipe.runtime.openvino.settings import OpenVinoSettings, PerformanceHint
from trtpipe.runtime.options import RunOptions
from trtpipe.vocab import BackendKind, Device, Precision, Target

INSTALL = "pip install 'trtpipe[openvino]'"
HINTS = {PerformanceHint.LATENCY: "LATENCY", PerformanceHint.THROUGHPUT: "THROUGHPUT"}
# trtpipe's precision -> OpenVINO's INFERENCE_PRECISION_HINT (OpenVINO spells BF16 as trtpipe does)
INFERENCE_PRECISIONS = {Precision.FP32: "f32", Precision.BF16: str(Precision.BF16)}


def import_openvino(purpose: str) -> Any:
    try:
        import openvino
    except ImportError:
        raise MissingDependency("OpenVINO", purpose, INSTALL) from None
    return openvino


class OpenVinoBackend(Backend):
    kind = BackendKind.OPENVINO
    settings_type = OpenVinoSettings
    device = Device.CPU

    def __init__(self, artifact: Path | ArtifactDescription, options: RunOptions | OpenVinoSettings | None = None
                 ) -> None:
        """``artifact``: a trtpipe ONNX (or its description), or an OpenVINO IR ``.xml`` (what bench --peers has
        NNCF write), which is OpenVINO's own format and has no trtpipe description."""
        own: OpenVinoSettings = self.accept(options)
        ov = import_openvino("Running an ONNX artifact on OpenVINO")
        ir = None if isinstance(artifact, ArtifactDescription) or Path(artifact).suffix.lower() != ".xml" else artifact
        description = None
        if ir is not None:
            self.path = Path(ir)
        else:
            description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(artifact)
            if description.precision is Precision.INT8 and description.target is Target.TENSORRT:
                raise BadInput(f"{description.path} is TensorRT-target INT8: OpenVINO's integer kernels would not "
                               "compute TensorRT's arithmetic. Run it on onnxruntime, or optimize with --target cpu.")
            self.path = Path(str(description.path))
        if own.inference_precision not in INFERENCE_PRECISIONS:
            raise BadInput(f"Unknown OpenVINO inference precision '{own.inference_precision}': choose "
                           f"{' or '.join(map(str, INFERENCE_PRECISIONS))}.")
        config: dict[str, Any] = {"PERFORMANCE_HINT": HINTS[own.hint],
                                  "INFERENCE_PRECISION_HINT": INFERENCE_PRECISIONS[own.inference_precision]}
        if own.threads:
            config["INFERENCE_NUM_THREADS"] = own.threads
        self.threads, self.hint = own.threads, own.hint
        try:
            core = ov.Core()
            model = core.read_model(str(self.path))
            if description is not None:
                precision = description.precision
            else:
                fake_quantized = any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
                precision = Precision.INT8 if fake_quantized else Precision.FP32
            self.compiled = core.compile_model(model, "CPU", config)
        except Exception as error:  # OpenVINO raises its own RuntimeError subclasses
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BadInput(f"OpenVINO cannot load {self.path}: {message}") from None
        self.precision = Precision.BF16 if own.inference_precision is Precision.BF16 else precision
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
