"""PyTorch eager execution: the FP32 baseline every artifact is measured and verified against."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import nn

from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec
from trtpipe.runtime.base import Backend, TensorInfo
from trtpipe.shapes import format_shape
from trtpipe.vocab import BackendKind, Device, Precision


class TorchBackend(Backend):
    kind = BackendKind.TORCH
    settings = frozenset({"threads"})

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
    ) -> None:
        """``inputs``: the model's inputs in ``forward``'s order (``LoadedModel.inputs``), each fed in its dtype;
        or, for a model of one float32 input, its sample shape (without the batch), the input named
        ``input_name``."""
        if device is Device.CUDA and not torch.cuda.is_available():
            raise BadInput("The torch backend was asked for CUDA, but torch sees no CUDA GPU here.")
        if threads:
            torch.set_num_threads(threads)  # process-wide; bench sets the same count for every backend
        self.device = device
        self._torch_device = str(device)
        self.module = module.eval().to(device)
        # Autocast: matmuls and convolutions in BF16/FP16, the rest in FP32, as PyTorch users deploy it.
        self._autocast = {Precision.BF16: torch.bfloat16, Precision.FP16: torch.float16}.get(autocast)  # type: ignore[arg-type]
        self.precision = autocast if autocast is not None and self._autocast is not None else Precision.FP32
        self.compiled = compile
        if compile:  # Inductor compiles on the first call of each new shape (the probe below, then warm-up)
            self.module = torch.compile(self.module)
        specs = _specs(inputs, input_name)
        self._inputs = [TensorInfo(spec.name, spec.dtype, ("batch", *spec.sample_shape)) for spec in specs]
        zeros = [np.zeros((1, *spec.sample_shape), dtype=spec.dtype) for spec in specs]
        with torch.inference_mode():
            names = output_names(self._call(*(torch.from_numpy(z).to(self._torch_device) for z in zeros)))
        probe = self._forward(zeros)
        self._outputs = [
            TensorInfo(name, str(array.dtype), ("batch", *array.shape[1:]))
            for name, array in zip(names, probe, strict=True)
        ]

    def _call(self, *tensors: torch.Tensor) -> object:
        if self._autocast is None:
            return self.module(*tensors)
        with torch.autocast(str(self.device), dtype=self._autocast):
            return self.module(*tensors)

    def _forward(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        with torch.inference_mode():
            result = self._call(*(torch.from_numpy(a).to(self._torch_device) for a in arrays))
            tensors = flatten_outputs(result)
            # .cpu() waits for the GPU; synchronize anyway so timings never count queued work as done.
            if self.device is Device.CUDA:
                torch.cuda.synchronize()
            # Autocast outputs (BF16/FP16) are compared and returned as FP32, like every other row's.
            return [t.detach().float().cpu().numpy() if t.dtype in (torch.bfloat16, torch.float16)
                    else t.detach().cpu().numpy() for t in tensors]

    def _run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self._forward([feeds[info.name] for info in self._inputs])

    def device_resident_call(self, feeds: dict[str, np.ndarray]) -> Callable[[], None] | None:
        """On a GPU, a call on an input already in device memory, outputs left there: the baseline that engines'
        no-transfer latencies are compared with. None on the CPU, where there are no transfers."""
        if self.device is not Device.CUDA:
            return None
        tensors = [torch.from_numpy(feeds[info.name]).to(self._torch_device) for info in self._inputs]

        def run() -> None:
            with torch.inference_mode():
                self._call(*tensors)
            torch.cuda.synchronize()

        return run


def _specs(inputs: Sequence[InputSpec] | tuple[int, ...], name: str) -> list[InputSpec]:
    """The inputs as specs: a bare sample shape is one float32 input called ``name``."""
    specs = [item for item in inputs if isinstance(item, InputSpec)]
    if not specs:
        return [InputSpec(name, (None, *(int(d) for d in inputs)))]  # type: ignore[arg-type]
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
