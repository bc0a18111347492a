"""PyTorch execution: the FP32 eager baseline every artifact is measured and verified against, and the rows a
PyTorch user would deploy instead (torch.compile, autocast, an FP16/BF16 channels_last copy, replayed from a CUDA
graph captured by hand or by ``torch.compile(mode="reduce-overhead")``).

On a GPU it runs as a PyTorch user tunes it, so that no speedup over it is inflated by a handicap: cuDNN's
benchmark mode on (each convolution's fastest algorithm found per shape, as ONNX Runtime's exhaustive search and
TensorRT's autotuning do for theirs); inputs copied from pinned host memory, as the TensorRT backend copies them;
and, for the latency without copies, inputs cast and converted to channels_last once before the timed calls, so a
hand-captured graph's timed call is its replay alone (the other rows' no-copy calls run on bound inputs too).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from trtpipe.artifact.tensors import TensorInfo
from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec
from trtpipe.runtime.base import Backend
from trtpipe.runtime.torch.settings import TorchSettings
from trtpipe.shapes import format_shape
from trtpipe.vocab import BackendKind, Device, Precision

_HALF_DTYPES = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}



class TorchBackend(Backend):
    kind = BackendKind.TORCH
    settings_type = TorchSettings

    def __init__(
        self,
        module: nn.Module,
        inputs: Sequence[InputSpec] | tuple[int, ...],
        *,
        device: Device = Device.CPU,
        threads: int | None = None,
        input_name: str = "input",
        compile: bool = False,
        autocast: Precision | None = None,
        half: Precision | None = None,
        channels_last: bool = False,
        compile_mode: str | None = None,
        cuda_graph: bool = False,
    ) -> None:
        """``inputs``: the model's inputs in ``forward``'s order (``LoadedModel.inputs``), each fed in its dtype;
        or, for a model of one float32 input, its sample shape (without the batch), the input named
        ``input_name``.

        ``half``: run a copy of the model cast to FP16 or BF16 (float inputs cast on the way in, outputs returned as
        FP32); ``channels_last``: its 4-D weights and inputs in NHWC memory order; ``compile_mode``: torch.compile's
        mode (``reduce-overhead`` replays CUDA graphs); ``cuda_graph``: capture each input shape's forward in a CUDA
        graph by hand and replay it (GPU only)."""
        _check_device(device, cuda_graph)
        if threads:
            torch.set_num_threads(threads)  # process-wide; bench sets the same count for every backend
        self.device = device
        self._torch_device = str(device)
        if device is Device.CUDA:
            torch.backends.cudnn.benchmark = True  # process-wide, as a PyTorch user sets it (CUDA_SETTINGS)
        module = module.eval().to(device)
        # Autocast: matmuls and convolutions in BF16/FP16, the rest in FP32, as PyTorch users deploy it.
        self._autocast = None if autocast is None else _HALF_DTYPES.get(autocast)
        self._half = None if half is None else _HALF_DTYPES.get(half)
        self.channels_last = channels_last
        module = self._as_configured(module)
        self.precision = (half if half is not None and self._half is not None
                          else autocast if autocast is not None and self._autocast is not None else Precision.FP32)
        self.compiled = compile or compile_mode is not None
        # Inductor compiles on the first call of each new shape (the probe below, then warm-up).
        self.module: Callable[..., Any] = torch.compile(module, mode=compile_mode) if self.compiled else module
        self._graphs: dict[tuple[tuple[int, ...], ...], _CapturedGraph] | None = {} if cuda_graph else None
        specs = _specs(inputs, input_name)
        self._inputs = [TensorInfo(spec.name, spec.dtype, ("batch", *spec.sample_shape)) for spec in specs]
        self._outputs = self._probe_outputs(specs)

    def _as_configured(self, module: nn.Module) -> nn.Module:
        """``module`` as this backend runs it: a copy cast to the half type where one is set (the caller's module
        stays FP32), in channels_last memory order where asked."""
        if self._half is not None:
            import copy

            module = copy.deepcopy(module).to(self._half)  # the caller's module stays FP32
        if self.channels_last:
            module = module.to(memory_format=torch.channels_last)
        return module

    def _probe_outputs(self, specs: list[InputSpec]) -> list[TensorInfo]:
        """The model's outputs, named and typed by one call on a batch of zeros (which also compiles the batch-1
        shape where the module is compiled)."""
        # _specs refused a dynamic dimension but the batch: every sample dimension is an int
        zeros = [np.zeros((1, *(d for d in spec.sample_shape if d is not None)), dtype=spec.dtype) for spec in specs]
        with torch.inference_mode():
            names = output_names(self._call(*(torch.from_numpy(z).to(self._torch_device) for z in zeros)))
        probe = self._forward(zeros)
        return [
            TensorInfo(name, str(array.dtype), ("batch", *array.shape[1:]))
            for name, array in zip(names, probe, strict=True)
        ]

    def _prepare(self, tensor: torch.Tensor) -> torch.Tensor:
        """An input as the model copy takes it: float inputs in its half type, 4-D ones channels_last."""
        if self._half is not None and tensor.is_floating_point():
            tensor = tensor.to(self._half)
        if self.channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    def _call(self, *tensors: torch.Tensor) -> object:
        return self._call_prepared(tuple(self._prepare(t) for t in tensors))

    def _graph(self, tensors: tuple[torch.Tensor, ...]) -> _CapturedGraph:
        """The hand-captured CUDA graph of these (prepared) inputs' shapes, captured on first use."""
        assert self._graphs is not None
        key = tuple(tuple(t.shape) for t in tensors)
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._graphs[key] = _CapturedGraph(self.module, tensors)
        return graph

    def _call_prepared(self, tensors: tuple[torch.Tensor, ...]) -> object:
        if self._graphs is not None:
            return self._graph(tensors).replay(tensors)
        if self._autocast is None:
            return self.module(*tensors)
        with torch.autocast(str(self.device), dtype=self._autocast):
            return self.module(*tensors)

    def _forward(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            result = self._call(*to_device(arrays, self.device))
            # Autocast outputs (BF16/FP16) are compared and returned as FP32, like every other row's.
            return to_host([t.detach().float() if t.dtype in (torch.bfloat16, torch.float16) else t.detach()
                            for t in flatten_outputs(result)])

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._forward([feeds[info.name] for info in self._inputs])

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None] | None:
        """On a GPU, a call on an input already in device memory, outputs left there: the baseline that engines'
        no-transfer latencies are compared with. None on the CPU, where there are no transfers."""
        if self.device is not Device.CUDA:
            return None
        with torch.inference_mode():
            tensors = tuple(self._prepare(t) for t in to_device([feeds[info.name] for info in self._inputs],
                                                                 self.device))
            if self._graphs is not None:
                replay = self._graph(tensors).bound(tensors)

                def run_graph() -> None:
                    replay()
                    torch.cuda.synchronize()

                return run_graph

        def run() -> None:
            with torch.inference_mode():
                self._call_prepared(tensors)
            torch.cuda.synchronize()

        return run


class _CapturedGraph:
    """One input shape's forward captured in a CUDA graph (PyTorch's documented recipe: warm up on a side stream,
    capture into static tensors, then copy each call's inputs into them and replay)."""

    def __init__(self, module: Callable[..., Any], example: tuple[torch.Tensor, ...]) -> None:
        self.inputs = tuple(t.clone() for t in example)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(side):
            for _ in range(3):
                module(*self.inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self.graph):
            self.outputs = module(*self.inputs)

    def replay(self, tensors: tuple[torch.Tensor, ...]) -> object:
        for static, given in zip(self.inputs, tensors, strict=True):
            if static.data_ptr() != given.data_ptr():
                static.copy_(given)
        self.graph.replay()
        return self.outputs

    def bound(self, tensors: tuple[torch.Tensor, ...]) -> Callable[[], None]:
        """The replay alone, ``tensors`` copied into the graph's inputs once now: what a timing loop repeats."""
        for static, given in zip(self.inputs, tensors, strict=True):
            static.copy_(given)
        return self.graph.replay


def to_device(arrays: Sequence[np.ndarray], device: Device) -> list[torch.Tensor]:
    """Host arrays as tensors on ``device``; to a GPU from pinned host memory, without blocking (what the TensorRT
    backend does, so rows with copies compare copies of the same kind)."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    if device is not Device.CUDA:
        return tensors
    return [t.pin_memory().to(str(device), non_blocking=True) for t in tensors]


def to_host(tensors: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """Tensors as host arrays; from a GPU into pinned memory, then one wait for the device, so a timing never
    counts queued work as done."""
    if not any(t.is_cuda for t in tensors):
        return [t.numpy() for t in tensors]
    host = [t.to(str(Device.CPU), non_blocking=True) for t in tensors]
    torch.cuda.synchronize()
    return [t.numpy() for t in host]


def _check_device(device: Device, cuda_graph: bool) -> None:
    """Refuse, before the model moves, a CUDA run where torch sees no GPU and a CUDA graph off the GPU."""
    if device is Device.CUDA and not torch.cuda.is_available():
        raise BadInput("The torch backend was asked for CUDA, but torch sees no CUDA GPU here.")
    if cuda_graph and device is not Device.CUDA:
        raise BadInput("A CUDA graph needs the torch backend on cuda.")


def _specs(inputs: Sequence[InputSpec] | tuple[int, ...], name: str) -> list[InputSpec]:
    """The inputs as specs: a bare sample shape is one float32 input called ``name``."""
    specs = [item for item in inputs if isinstance(item, InputSpec)]
    if not specs:
        return [InputSpec(name, (None, *(int(d) for d in inputs if not isinstance(d, InputSpec))))]
    for spec in specs:
        if any(d is None for d in spec.sample_shape):
            raise BadInput(f"Input '{spec.name}' has dynamic dimensions ({format_shape(spec.shape)}): the torch "
                           "backend needs every dimension but the batch fixed.")
    return specs


def output_names(result: object) -> list[str]:
    """A name for each tensor :func:`flatten_outputs` returns, in its order: a dict's keys and a namedtuple's fields
    (joined with ``_`` when nested), ``output_<i>`` for positions in a plain tuple or list, ``output`` for a lone
    tensor, so an exported graph and every report name the outputs as the model does."""
    names: list[str] = []

    def walk(value: object, prefix: str) -> None:
        if isinstance(value, torch.Tensor):
            names.append(prefix or "output")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{prefix}_{key}" if prefix else str(key))
        elif isinstance(value, (list, tuple)):
            fields = getattr(value, "_fields", None)
            for index, item in enumerate(value):
                part = str(fields[index]) if fields else str(index)
                walk(item, f"{prefix}_{part}" if prefix else (part if fields else f"output_{part}"))

    walk(result, "")
    return names


def flatten_outputs(result: object) -> list[torch.Tensor]:
    """A model's outputs (a tensor, or tensors nested in tuples, lists and dicts) as a flat list."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, dict):
        return [t for value in result.values() for t in flatten_outputs(value)]
    if isinstance(result, (list, tuple)):
        return [t for value in result for t in flatten_outputs(value)]
    raise BadInput(f"The model returned a {type(result).__name__}; trtpipe needs tensors.")
