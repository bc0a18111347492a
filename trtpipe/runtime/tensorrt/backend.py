"""TensorRT execution of a built engine, with device buffers and streams from torch's CUDA allocator.

Before TensorRT sees the engine, its sidecar is checked: the file's SHA-256, the TensorRT version and the GPU's
compute capability it was built for. Inputs are copied from pinned host memory on a dedicated CUDA stream,
``set_input_shape`` picks the batch within the optimisation profile, and ``execute_async_v3`` runs the engine;
with ``cuda_graph=True`` each input shape's launch is captured once and replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.errors import BadInput, TrtpipeError
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.tensorrt.loader import TensorRTLogger, import_tensorrt_runtime, require_cuda_gpu
from trtpipe.runtime.tensorrt.sidecar import check_compatibility, check_engine_file, read_sidecar
from trtpipe.vocab import BackendKind, Device, Precision, dtype


class TensorRTBackend(Backend):
    kind = BackendKind.TENSORRT
    device = Device.CUDA

    def __init__(self, path: Path, *, cuda_graph: bool = False, threads: int | None = None, **_: Any) -> None:
        import torch

        self.path = Path(path)
        sidecar = read_sidecar(self.path)
        check_engine_file(self.path, sidecar)
        trt, lean = import_tensorrt_runtime("Running a TensorRT engine")
        if lean and not sidecar.version_compatible:
            raise BadInput(f"{self.path} was not built with --version-compat, and only TensorRT's lean runtime is "
                           "installed here (it runs version-compatible engines only): install TensorRT or rebuild "
                           "with 'trtpipe build --version-compat'.")
        gpu_name, capability = require_cuda_gpu("Running a TensorRT engine")
        check_compatibility(sidecar, tensorrt_version=trt.__version__, compute_capability=capability,
                            gpu_name=gpu_name)
        self.precision = Precision(sidecar.precision)
        self._trt, self._torch = trt, torch
        self._logger = TensorRTLogger(trt)
        self._runtime = trt.Runtime(self._logger.trt_logger)
        if lean or sidecar.version_compatible:
            self._runtime.engine_host_code_allowed = True
        self._engine = self._runtime.deserialize_cuda_engine(self.path.read_bytes())
        if self._engine is None:
            errors = "; ".join(self._logger.errors()) or "no message"
            raise TrtpipeError(f"TensorRT could not deserialise {self.path} ({errors}): rebuild it with 'trtpipe "
                               "build' on this machine.")
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream()
        self._cuda_graph = cuda_graph
        self._graphs: dict[tuple[tuple[int, ...], ...], Any] = {}
        self._inputs, self._outputs = [], []
        for index in range(self._engine.num_io_tensors):
            name = self._engine.get_tensor_name(index)
            trt_dtype = self._engine.get_tensor_dtype(name)
            entry = dtype(tensorrt=str(trt_dtype).rsplit(".", 1)[-1])
            if entry is None:
                raise BadInput(f"{self.path}: IO tensor '{name}' has TensorRT type {trt_dtype}, which trtpipe cannot "
                               "exchange with numpy: rebuild with FP32/FP16/INT8/INT32/INT64/BOOL inputs and outputs.")
            shape = tuple(None if d < 0 else int(d) for d in self._engine.get_tensor_shape(name))
            is_input = self._engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            (self._inputs if is_input else self._outputs).append(TensorInfo(name, entry.numpy, shape))

    def _prepare(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Device buffers for one call: inputs uploaded from pinned memory, outputs sized by TensorRT."""
        torch = self._torch
        device_inputs = {}
        with torch.cuda.stream(self._stream):
            for info in self._inputs:
                host = torch.from_numpy(np.ascontiguousarray(feeds[info.name])).pin_memory()
                device_inputs[info.name] = host.to(str(Device.CUDA), non_blocking=True)
                if not self._context.set_input_shape(info.name, tuple(host.shape)):
                    raise BadInput(f"Input '{info.name}' shape {tuple(host.shape)} is outside the engine's "
                                   "optimisation profile: rebuild with --min-shapes/--max-shapes that cover it.")
            device_outputs = {}
            for info in self._outputs:
                shape = tuple(self._context.get_tensor_shape(info.name))
                device_outputs[info.name] = torch.empty(shape, dtype=getattr(torch, info.dtype),
                                                        device=str(Device.CUDA))
        for name, tensor in {**device_inputs, **device_outputs}.items():
            self._context.set_tensor_address(name, tensor.data_ptr())
        return device_inputs, device_outputs

    def _launch(self, key: tuple[tuple[int, ...], ...]) -> None:
        if not self._cuda_graph:
            if not self._context.execute_async_v3(self._stream.cuda_stream):
                raise TrtpipeError(f"TensorRT failed to run {self.path}: {'; '.join(self._logger.errors())}")
            return
        graph = self._graphs.get(key)
        if graph is None:
            self._context.execute_async_v3(self._stream.cuda_stream)  # one plain launch settles shapes
            graph = self._torch.cuda.CUDAGraph()
            with self._torch.cuda.graph(graph, stream=self._stream):
                self._context.execute_async_v3(self._stream.cuda_stream)
            self._graphs[key] = graph
        graph.replay()

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        _, device_outputs = self._prepare(feeds)
        self._launch(tuple(tuple(feeds[i.name].shape) for i in self._inputs))
        with self._torch.cuda.stream(self._stream):
            host = [device_outputs[o.name].to(str(Device.CPU), non_blocking=True) for o in self._outputs]
        self._stream.synchronize()
        return [tensor.numpy() for tensor in host]

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs the engine on inputs already on the GPU: latency without host-device copies."""
        buffers = self._prepare(feeds)
        key = tuple(tuple(feeds[i.name].shape) for i in self._inputs)

        def run() -> None:
            self._launch(key)
            self._stream.synchronize()

        run.buffers = buffers  # type: ignore[attr-defined]  # keep the device buffers alive
        return run

    def close(self) -> None:
        self._graphs.clear()
        for attribute in ("_context", "_engine", "_runtime"):
            self.__dict__.pop(attribute, None)
