"""An in-memory ONNX model's outputs over a data set, on ONNX Runtime CPU: what accuracy figures are made of."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx

from trtpipe.artifact.description import TRT_SIMULATION
from trtpipe.inputs import Batch, count, named
from trtpipe.runtime.batch_axes import BatchAxes
from trtpipe.runtime.options import RunOptions
from trtpipe.runtime.registry import open_model

EVAL_BATCH = 64


@dataclass
class Meter:
    """Samples run through models while it is open (:func:`metered`)."""

    samples: int = 0


_OPEN_METERS: list[Meter] = []


@contextmanager
def metered() -> Iterator[Meter]:
    """Counts the samples every :func:`outputs_and_axes` runs while open: the work a step's judging does, which
    optimize's time budgets spend (optimize.work) instead of the clock's seconds."""
    meter = Meter()
    _OPEN_METERS.append(meter)
    try:
        yield meter
    finally:
        _OPEN_METERS.remove(meter)


def run_settings(as_written: bool) -> RunOptions:
    """How a candidate runs to be measured: ``as_written`` is the tensorrt profile's way (every op as the graph
    writes it, Q/DQ as float ops, FP16 tensors rounded as a GPU rounds them), exactly as the written file's own
    simulation runs (TRT_SIMULATION, which bench and select use), so the figures optimize prints and gates on are
    that simulation's; otherwise the reference runtime's own kernels, integer ones included."""
    return RunOptions.from_keywords(TRT_SIMULATION) if as_written else RunOptions()


def outputs(model: onnx.ModelProto, images: Batch, *, as_written: bool = False,
            batch: int | None = None, on_samples: Callable[[int], None] | None = None) -> list[np.ndarray]:
    """Every output of ``model`` over ``images`` (a batch: one array, or {input name: array}), samples first (each
    joined on its own batch axis: Backend.run_chunked); a static batch size drops the remainder that does not fill a
    batch. A float input the model takes in another float type (FP16 without --keep-io-fp32) is given the data in
    that type. ``on_samples``: told how many samples each chunk ran."""
    return outputs_and_axes(model, images, as_written=as_written, batch=batch, on_samples=on_samples)[0]


def outputs_and_axes(model: onnx.ModelProto, images: Batch, *, as_written: bool = False,
                     batch: int | None = None, on_samples: Callable[[int], None] | None = None,
                     ) -> tuple[list[np.ndarray], BatchAxes]:
    """:func:`outputs`, and which axis of each output the batch was on in the model (what the task line and the
    manifest say)."""
    for meter in _OPEN_METERS:
        meter.samples += count(images)
    with open_model(model, run_settings(as_written)) as backend:
        wanted = {t.name: np.dtype(t.dtype) for t in backend.inputs}
        named_images = named(images, list(wanted))
        if any(a.dtype != wanted[n] and a.dtype.kind == wanted[n].kind == "f" for n, a in named_images.items()
               if n in wanted):
            images = {n: a.astype(wanted[n]) if n in wanted and a.dtype.kind == wanted[n].kind == "f" else a
                      for n, a in named_images.items()}
        found = backend.run_chunked(images, batch or EVAL_BATCH, on_samples)
        return found, backend.batch_axes(images)


def logits(model: onnx.ModelProto, images: Batch, *,
           as_written: bool = False, batch: int | None = None) -> np.ndarray:
    """The first output (a classifier's logits; the one sensitivity ranking measures error on)."""
    return outputs(model, images, as_written=as_written, batch=batch)[0]
