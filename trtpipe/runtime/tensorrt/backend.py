"""TensorRT execution of a built engine, with device buffers and streams from torch's CUDA allocator.

Before TensorRT sees the engine, its sidecar (read by the artifact's description) is checked: the file's SHA-256,
the TensorRT version and the GPU's compute capability it was built for. Inputs are copied from pinned host memory on
a dedicated CUDA stream, ``set_input_shape`` picks the batch within the optimisation profile, and
``execute_async_v3`` runs the engine; with ``cuda_graph=True`` each input shape's launch is captured once and
replayed on the same stream, with the device buffers that shape was captured with (allocated once per shape and
reused).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtpipe.errors import BadInput, TrtpipeError
from trtpipe.runtime.artifacts import ArtifactDescription, describe_artifact
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.tensorrt.loader import TensorRTLogger, import_tensorrt_runtime, require_cuda_gpu
from trtpipe.runtime.tensorrt.sidecar import check_compatibility
from trtpipe.vocab import BackendKind, Device, dtype


class TensorRTBackend(Backend):
    kind = BackendKind.TENSORRT
    # threads: accepted from callers that set it for every row (bench); the engine runs on the GPU, so no CPU
    # thread pool is sized by it.
    settings = frozenset({"cuda_graph", "threads"})
    device = Device.CUDA

    def __init__(self, artifact: Path | ArtifactDescription, options: RunOptions | None = None) -> None:
        import torch

        options = self.accept(options)
        description = artifact if isinstance(artifact, ArtifactDescription) else describe_artifact(artifact)
        self.path = Path(str(description.path))
        sidecar = description.engine
        if sidecar is None:  # the description of an engine always carries its (checked) sidecar
            raise BadInput(f"{self.path} is not a TensorRT engine with a trtpipe sidecar.")
        trt, lean = import_tensorrt_runtime("Running a TensorRT engine")
        if lean and not sidecar.version_compatible:
            raise BadInput(f"{self.path} was not built with --version-compat, and only TensorRT's lean runtime is "
                           "installed here (it runs version-compatible engines only): install TensorRT or rebuild "
                           "with 'trtpipe build --version-compat'.")
        gpu_name, capability = require_cuda_gpu("Running a TensorRT engine")
        check_compatibility(sidecar, tensorrt_version=trt.__version__, compute_capability=capability,
                            gpu_name=gpu_name)
        self.precision = description.precision
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
        if self._context is None:
            raise TrtpipeError(f"TensorRT could not create an execution context for {self.path} "
                               f"({'; '.join(self._logger.errors()) or 'no message'}): the GPU may be out of memory.")
        self._stream = torch.cuda.Stream()
        self._cuda_graph = options.cuda_graph
        self._buffers: dict[ShapeKey, _Buffers] = {}  # device buffers per input shape, allocated once
        self._graphs: dict[ShapeKey, Any] = {}  # captured CUDA graphs, replayed on self._stream
        self._graph_failed: set[ShapeKey] = set()
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
        profile = self._engine.get_tensor_profile_shape(self._inputs[0].name, 0) if self._inputs else None
        self._max_batch = int(profile[2][0]) if profile else None

    @property
    def max_batch(self) -> int | None:
        """The largest batch the engine's optimisation profile accepts."""
        return self._max_batch

    def _buffers_for(self, key: ShapeKey) -> _Buffers:
        """Device inputs and outputs for one set of input shapes: allocated on first use and then reused, so a
        captured CUDA graph's addresses stay valid for every replay."""
        buffers = self._buffers.get(key)
        if buffers is None:
            torch = self._torch
            self._set_shapes(key)
            inputs = {info.name: torch.empty(shape, dtype=getattr(torch, info.dtype), device=str(Device.CUDA))
                      for info, shape in zip(self._inputs, key, strict=True)}
            outputs = {info.name: torch.empty(tuple(self._context.get_tensor_shape(info.name)),
                                              dtype=getattr(torch, info.dtype), device=str(Device.CUDA))
                       for info in self._outputs}
            buffers = self._buffers[key] = _Buffers(inputs, outputs)
        return buffers

    def _set_shapes(self, key: ShapeKey) -> None:
        for info, shape in zip(self._inputs, key, strict=True):
            if not self._context.set_input_shape(info.name, shape):
                raise BadInput(f"Input '{info.name}' shape {shape} is outside the engine's optimisation profile: "
                               "rebuild with --min-shapes/--max-shapes that cover it.")

    def _bind(self, key: ShapeKey, buffers: _Buffers) -> None:
        self._set_shapes(key)
        for name, tensor in {**buffers.inputs, **buffers.outputs}.items():
            self._context.set_tensor_address(name, tensor.data_ptr())

    def _execute(self) -> None:
        if not self._context.execute_async_v3(self._stream.cuda_stream):
            errors = "; ".join(self._logger.errors()) or "no message"
            raise TrtpipeError(f"TensorRT failed to run {self.path}: {errors}")

    def _launch(self, key: ShapeKey) -> None:
        """Run the bound engine on self._stream: plainly, or by replaying the CUDA graph captured for ``key``."""
        if not self._cuda_graph or key in self._graph_failed:
            self._execute()
            return
        torch = self._torch
        graph = self._graphs.get(key)
        if graph is None:
            self._execute()  # one plain launch first: TensorRT settles shape-dependent state outside the capture
            self._stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(graph, stream=self._stream):
                    self._execute()
            except Exception as error:  # capture is not supported for every engine (e.g. data-dependent shapes)
                from trtpipe import console

                console.warn(f"CUDA graph capture failed for {self.path} at {key} ({error}); running without it.")
                self._graph_failed.add(key)
                self._execute()
                return
            self._graphs[key] = graph
        with torch.cuda.stream(self._stream):
            graph.replay()

    def _upload(self, buffers: _Buffers, feeds: dict[str, np.ndarray]) -> None:
        torch = self._torch
        with torch.cuda.stream(self._stream):
            for name, device in buffers.inputs.items():
                host = torch.from_numpy(np.ascontiguousarray(feeds[name])).pin_memory()
                device.copy_(host, non_blocking=True)

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        key = tuple(tuple(int(d) for d in feeds[i.name].shape) for i in self._inputs)
        buffers = self._buffers_for(key)
        self._upload(buffers, feeds)
        self._bind(key, buffers)
        self._launch(key)
        with self._torch.cuda.stream(self._stream):
            host = [buffers.outputs[o.name].to(str(Device.CPU), non_blocking=True) for o in self._outputs]
        self._stream.synchronize()
        return [tensor.numpy() for tensor in host]

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None]:
        """A call that runs the engine on inputs already on the GPU: latency without host-device copies."""
        key = tuple(tuple(int(d) for d in feeds[i.name].shape) for i in self._inputs)
        buffers = self._buffers_for(key)
        self._upload(buffers, feeds)
        self._stream.synchronize()

        def run() -> None:
            self._bind(key, buffers)
            self._launch(key)
            self._stream.synchronize()

        return run

    def close(self) -> None:
        self._graphs.clear()
        self._buffers.clear()
        for attribute in ("_context", "_engine", "_runtime"):
            self.__dict__.pop(attribute, None)


ShapeKey = tuple[tuple[int, ...], ...]


@dataclass
class _Buffers:
    inputs: dict[str, Any]
    outputs: dict[str, Any]
