"""What convert checks besides the numbers: that a dynamic batch asked for is one, and that a failure after the
export reads as one line.

An exporter can fix the batch axis without failing. torch.export specialises the batch to the tracing one when the
model's code compares it with a number (Ultralytics' Detect head keeps the shape of its last input and rebuilds its
anchors when ``self.shape != shape``: after a run at the tracing batch, that comparison pins the batch), and
torch.onnx then writes a static input without an error. The TorchScript exporter marks every input and output
dynamic by name, but a loop over the images or a split by the batch size stays traced for the tracing batch (a
torchvision detector's post-processing), so the graph fails at any other. Both show only when the ONNX runs at
another batch, which is what :func:`require_dynamic_batch` does.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from trtpipe.errors import TrtpipeError, VerificationFailed
from trtpipe.models.detectors import unwrapped_detector_hint
from trtpipe.models.loader import LoadedModel


class FixedBatch(TrtpipeError):
    """The exporter wrote a graph whose batch is fixed although a dynamic one was asked for.

    ``str()`` is the problem alone, what the dynamo exporter's fallback warning quotes; the message adds what to do.
    """

    def __init__(self, exporter: str, problem: str, batch: int) -> None:
        self.problem = problem
        self.finding = f"The {exporter} exporter fixed the batch axis: {problem}."
        super().__init__(
            f"{self.finding} The model's code reads the batch size as a number (a loop over the images, a split or "
            f"reshape by it) or keeps state from a run at batch {batch}: convert with --static-batch to fix the "
            "batch at the --input-shape's, or make forward() independent of the batch size.")

    def __str__(self) -> str:
        return self.problem


def require_dynamic_batch(path: Path, example: Sequence[torch.Tensor], exporter: str) -> None:
    """Raise :class:`FixedBatch` unless the ONNX at ``path`` declares every input's batch axis dynamic and runs, on
    ONNX Runtime CPU, at a batch one larger than the tracing one (``example``'s, one tensor per input in order),
    with outputs of that batch."""
    from trtpipe.runtime.registry import probe_session

    batch = int(example[0].shape[0])
    try:
        session = probe_session(path, silent=True)  # the failure is reported here, in one line
    except Exception:  # a graph ONNX Runtime cannot load: onnx.checker and verification say why, in their words
        return
    for info in session.get_inputs():
        if info.shape and isinstance(info.shape[0], int):
            raise FixedBatch(exporter, f"the ONNX it wrote fixes input '{info.name}' at batch {info.shape[0]}", batch)
    if len(session.get_inputs()) != len(example):  # an input the graph dropped: which tensor feeds which is unknown
        return
    feeds = {info.name: np.concatenate([t.detach().cpu().numpy(), t[:1].detach().cpu().numpy()])
             for info, t in zip(session.get_inputs(), example, strict=True)}
    try:
        outputs = session.run(None, feeds)
    except Exception as error:  # ORT's own InvalidArgument/Fail/RuntimeException: the graph holds the tracing batch
        raise FixedBatch(exporter, f"the ONNX it wrote fails at batch {batch + 1} ({_runtime_message(error)})",
                         batch) from None
    for info, value in zip(session.get_outputs(), outputs, strict=True):
        if value.ndim and value.shape[0] == batch:
            raise FixedBatch(exporter, f"at batch {batch + 1} the ONNX it wrote still returns '{info.name}' at batch "
                             f"{batch}", batch)


@contextlib.contextmanager
def one_line_failures(loaded: LoadedModel) -> Iterator[None]:
    """A user error raised inside, with what to do for a whole torchvision detector (instead of the general advice
    on a fixed batch)."""
    try:
        yield
    except TrtpipeError as error:
        hint = unwrapped_detector_hint(loaded.module)
        if hint:
            error.message = f"{error.finding if isinstance(error, FixedBatch) else error.message} {hint}"
        raise


@contextlib.contextmanager
def runs_checked(what: str, runtime: str, after: str = "") -> Iterator[None]:
    """The runtime failing to run ``what`` during verification, as one line instead of its traceback."""
    try:
        yield
    except TrtpipeError:
        raise
    except Exception as error:  # ORT and OpenVINO raise their own types for a graph that fails on given inputs
        raise VerificationFailed(f"{what} fails to run on {runtime} during verification: "
                                 f"{_runtime_message(error)}.{after}") from None


def _runtime_message(error: BaseException, limit: int = 240) -> str:
    """The runtime's first line, without ONNX Runtime's status-code preamble, and at most ``limit`` characters."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    first = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", first)
    first = re.sub(r"^Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: ",
                   r"\1 node '\2': ", first)
    return first if len(first) <= limit else first[:limit - 3].rstrip() + "..."
