"""torch.export of a model as the package will compute it, and AOTInductor's compilation of that program.

What is exported is the model wrapped so that the package keeps the model's interface whatever it computes in:
float inputs arrive in FP32 NCHW and are cast to the package's precision (and put in channels_last order) inside
the compiled code, where Inductor fuses the conversions into the first kernels, and float outputs leave in FP32.
The batch dimension of every input is one ``torch.export.Dim`` with the declared range (a range of one size
exports a static batch). A model torch.export cannot take (data-dependent control flow, a batch the code fixes)
is refused in one line with the first line of torch's reason.
"""

from __future__ import annotations

import copy
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trtpipe.compile.options import CompileOptions
from trtpipe.errors import BadInput
from trtpipe.inputs import random_batch
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.aoti.logs import quiet_torch
from trtpipe.vocab import Precision

_DTYPES = {Precision.FP32: torch.float32, Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}
EXAMPLE_BATCH = 2  # the batch the program is traced at, within the range (not 1: torch.export specialises it)


class _AsPackaged(nn.Module):
    """The model as the package computes it: float inputs cast to ``dtype`` (4-D ones in channels_last order),
    float outputs cast back to FP32, so the package is fed and read like the FP32 model."""

    def __init__(self, model: nn.Module, dtype: torch.dtype, channels_last: bool) -> None:
        super().__init__()
        self.model = model
        self.dtype = dtype
        self.channels_last = channels_last

    def forward(self, *inputs: torch.Tensor) -> Any:
        prepared = [self._prepared(x) for x in inputs]
        return torch.utils._pytree.tree_map(self._fp32, self.model(*prepared))

    def _prepared(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        if self.channels_last and tensor.dim() == 4:
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        return tensor

    @staticmethod
    def _fp32(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dtype != torch.float32:
            return value.float()
        return value


@dataclass(frozen=True)
class Compiled:
    """A package compiled into a temporary folder, and how long each step took."""

    path: Path
    export_seconds: float
    compile_seconds: float


def example_batch(batch_range: tuple[int, int]) -> int:
    low, high = batch_range
    return min(max(EXAMPLE_BATCH, low), high)


def export_program(loaded: LoadedModel, options: CompileOptions) -> torch.export.ExportedProgram:
    """``loaded`` as the package computes it, traced by torch.export with the declared batch range."""
    device = torch.device(str(options.device))
    model = copy.deepcopy(loaded.module).eval().to(device=device, dtype=_DTYPES[options.precision])
    if options.channels_last:
        model = model.to(memory_format=torch.channels_last)
    wrapped = _AsPackaged(model, _DTYPES[options.precision], options.channels_last).eval()
    batch = random_batch(loaded.inputs, example_batch(options.batch_range), np.random.default_rng(0))
    arrays = [batch] if isinstance(batch, np.ndarray) else [batch[s.name] for s in loaded.inputs]
    example = tuple(torch.from_numpy(a).to(device) for a in arrays)
    low, high = options.batch_range
    dynamic = None
    if low != high:
        dim = torch.export.Dim("batch", min=low, max=high)
        dynamic = (tuple({0: dim} for _ in example),)  # one entry: forward's *inputs
    try:
        with quiet_torch(compiling=True), torch.no_grad():
            return torch.export.export(wrapped, example, dynamic_shapes=dynamic)
    except Exception as error:  # torch.export raises UserError, GuardOnDataDependentSymNode, Unsupported...
        reason = _reason(error)
        fix = ("the model's code fixes the batch size: compile that one size (--batch-range N), or change the code"
               if reason.startswith("Constraints violated (batch)") else "an AOTInductor package needs a model "
               "torch.export can trace: convert it to ONNX instead, or change the code it names")
        raise BadInput(f"torch.export cannot take {loaded.name}: {reason} ({fix}).") from None


def compile_package(loaded: LoadedModel, options: CompileOptions, folder: Path) -> Compiled:
    """Export ``loaded`` and compile it with AOTInductor into ``folder``/model.pt2."""
    start = time.perf_counter()
    program = export_program(loaded, options)
    exported = time.perf_counter()
    target = Path(folder) / "model.pt2"  # AOTInductor insists on the suffix
    try:
        with quiet_torch(compiling=True):
            torch._inductor.aoti_compile_and_package(program, package_path=str(target))
    except Exception as error:  # a compiler error, an operator Inductor cannot lower...
        raise BadInput(f"AOTInductor cannot compile {loaded.name} for {options.device}: {_reason(error)}") from None
    return Compiled(target, exported - start, time.perf_counter() - exported)


def _reason(error: BaseException) -> str:
    """torch's first line, and the line that says why where a constraint violation lists it below (``- You marked
    batch as dynamic but your code specialized it...``)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    why = next((line[2:] for line in lines[1:] if line.startswith("- ")), None)
    if why is None:
        return lines[0]
    return f"{_sentence(lines[0])}: {_sentence(why)}"


def _sentence(text: str) -> str:
    """The first sentence of ``text``, without its full stop (torch appends advice about its own APIs)."""
    return re.split(r"(?<=[.!])\s", text, maxsplit=1)[0].rstrip(".!")

