"""PyTorch -> ONNX with a dynamic batch axis on every input and output.

Every input the model takes is exported under its name and in its dtype (a uint8 image stays uint8 in the graph).

The dynamo exporter (torch.export) is tried first: it is torch's supported path and emits cleaner graphs.
When it fails, the TorchScript exporter gets a turn and the user is told why. TorchScript modules go straight
to the TorchScript exporter, since torch.export cannot trace them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import torch

from trtpipe import console
from trtpipe.convert.checks import require_dynamic_batch
from trtpipe.errors import TrtpipeError
from trtpipe.inputs import random_batch
from trtpipe.models.loader import LoadedModel
from trtpipe.runtime.registry import module_output_names
from trtpipe.vocab import DEFAULT_OPSET

BATCH_AXIS = "batch"


@dataclass
class ExportResult:
    exporter: str  # "dynamo" or "torchscript"
    fallback_reason: str | None
    opset: int
    dynamic_batch: bool
    seconds: float


def export_onnx(loaded: LoadedModel, path: Path, *, opset: int = DEFAULT_OPSET,
                dynamic_batch: bool = True) -> ExportResult:
    """Export ``loaded`` to ``path`` (written in place: the caller hands a temporary path) and check it."""
    start = time.perf_counter()
    # A batch of 2 for tracing keeps torch.export from specialising the batch axis to the constant 1.
    batch = 2 if dynamic_batch else loaded.input_shape[0]
    # Seeded example inputs, each in its dtype and range: tracing exporters follow the branches these inputs take,
    # so they must not vary.
    example = example_inputs(loaded, batch)
    with torch.inference_mode():
        output_names = module_output_names(loaded.module(*example))  # a dict's keys, a namedtuple's fields

    fallback_reason = None
    if isinstance(loaded.module, torch.jit.ScriptModule):
        exporter, fallback_reason = "torchscript", "the model is a TorchScript module, which torch.export cannot trace"
        _export_torchscript(loaded, example, path, opset, dynamic_batch, output_names)
    else:
        try:
            exporter = "dynamo"
            _export_dynamo(loaded, example, path, opset, dynamic_batch, output_names)
        except Exception as error:  # any dynamo failure: the TorchScript exporter may still succeed
            exporter = "torchscript"
            fallback_reason = _summarise(error)
            console.warn(f"The dynamo exporter failed ({fallback_reason}); falling back to the TorchScript "
                         "exporter.")
            _export_torchscript(loaded, example, path, opset, dynamic_batch, output_names)
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:  # the checker's ValidationError and shape-inference errors
        raise TrtpipeError(f"The exported ONNX fails onnx.checker: {_summarise(error)}") from None
    model = onnx.load(str(path), load_external_data=False)
    actual_opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return ExportResult(exporter, fallback_reason, actual_opset, dynamic_batch, time.perf_counter() - start)


def example_inputs(loaded: LoadedModel, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """One seeded tensor per input, in ``forward``'s order, each in its dtype and range."""
    samples = random_batch(loaded.inputs, batch, np.random.default_rng(seed))
    arrays = [samples] if isinstance(samples, np.ndarray) else [samples[spec.name] for spec in loaded.inputs]
    return tuple(torch.from_numpy(np.ascontiguousarray(array)) for array in arrays)


def _input_names(loaded: LoadedModel) -> list[str]:
    return [spec.name for spec in loaded.inputs]


def _export_dynamo(loaded: LoadedModel, example: tuple[torch.Tensor, ...], path: Path, opset: int, dynamic: bool,
                   output_names: list[str]) -> None:
    # One batch dimension shared by every input: they are samples of the same batch.
    batch = torch.export.Dim(BATCH_AXIS)
    dynamic_shapes = tuple({0: batch} for _ in example) if dynamic else None
    with _quiet():
        torch.onnx.export(
            loaded.module, example, str(path), dynamo=True, opset_version=opset,
            input_names=_input_names(loaded), output_names=output_names, dynamic_shapes=dynamic_shapes,
            external_data=False, verbose=False,
        )
    if dynamic:  # torch.export may have specialised it without failing: then the TorchScript exporter gets a turn
        require_dynamic_batch(path, example, "dynamo")


def _export_torchscript(loaded: LoadedModel, example: tuple[torch.Tensor, ...], path: Path, opset: int,
                        dynamic: bool, output_names: list[str]) -> None:
    axes = {name: {0: BATCH_AXIS} for name in [*_input_names(loaded), *output_names]} if dynamic else None
    try:
        with _quiet(), torch.no_grad():  # no autograd: state a run under inference_mode left in the model is usable
            torch.onnx.export(
                loaded.module, example, str(path), dynamo=False, opset_version=opset,
                input_names=_input_names(loaded), output_names=output_names, dynamic_axes=axes,
            )
    except Exception as error:  # both exporters failed: name the operator and what to try
        raise TrtpipeError(_export_failure_message(error, opset)) from None
    if dynamic:
        require_dynamic_batch(path, example, "torchscript")


def _export_failure_message(error: BaseException, opset: int) -> str:
    text = str(error)
    operator = re.search(r"(aten::\w+|aten\.\w+(?:\.\w+)?|prim::\w+)", text)
    if operator:
        return (f"Export failed: operator {operator.group(1)} is not supported at opset {opset}. Try a newer "
                f"opset (--opset {max(opset + 1, 20)}), or replace the operator in the model.")
    return f"Export failed at opset {opset}: {_summarise(error)}. Try another --opset."


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the exporters' own output: progress lines, warnings, torch logging and graph dumps that the
    TorchScript exporter writes from C++ straight to file descriptor 2. What matters reaches the user through
    trtpipe's own messages."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    torch_logger = logging.getLogger(torch.__name__)
    level = torch_logger.level
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(), \
            contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch_logger.setLevel(logging.CRITICAL)
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            torch_logger.setLevel(level)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _summarise(error: BaseException) -> str:
    """The root cause's first line: the exporters wrap the real error in generic 'step N/3' messages."""
    while error.__cause__ is not None:
        error = error.__cause__
    lines = [_ANSI.sub("", line).strip() for line in str(error).strip().splitlines() if line.strip()]
    return (f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)[:300]
