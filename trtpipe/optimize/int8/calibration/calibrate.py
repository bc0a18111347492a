"""Activation ranges for INT8, by one of four methods.

minmax, entropy and percentile are ONNX Runtime's calibrators. mse is ours: no ONNX tool offers it. For each
tensor it picks the clipping range that minimises the expected squared quantisation error over the tensor's
histogram on calibration data — rounding noise (step²/12) inside the range plus clipping error outside it.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.records.calibration import Ranges
from trtpipe.inputs import Batch, concat, count, named, take
from trtpipe.onnx_info import graph_inputs
from trtpipe.optimize.graph.activations import RunningStats, float_activations, observe
from trtpipe.vocab import CalibMethod

HISTOGRAM_BINS = 2048
STREAM_BATCHES = 1  # batches whose activations ONNX Runtime's calibrators hold at once
MSE_CANDIDATES = 256


def calibrate(model: onnx.ModelProto, batches: list[Batch], method: CalibMethod, *, symmetric: bool) -> Ranges:
    """Per-tensor (low, high) ranges of every float activation of ``model`` on ``batches``."""
    if method == CalibMethod.MSE:
        return _mse_ranges(model, batches, symmetric=symmetric)
    return _onnxruntime_ranges(model, batches, method, symmetric=symmetric)


class _Reader:
    """ONNX Runtime's CalibrationDataReader protocol over our batches (one dict per batch, holding every input),
    advancing a progress bar."""

    def __init__(self, input_names: list[str], batches: list[Batch], advance: Callable[[], object]) -> None:
        self._items = iter(batches)
        self._input_names = input_names
        self._advance = advance

    def get_next(self) -> dict[str, np.ndarray] | None:
        batch = next(self._items, None)
        if batch is None:
            return None
        self._advance()
        return named(batch, self._input_names)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.get_next, None)


@contextlib.contextmanager
def quiet_onnxruntime_quantization() -> Iterator[None]:
    """ORT's quantisation tools log advice ('consider pre-processing') at WARNING on the root logger."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def _onnxruntime_ranges(model: onnx.ModelProto, batches: list[Batch], method: CalibMethod, *,
                        symmetric: bool) -> Ranges:
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator

    ort_method = {CalibMethod.MINMAX: CalibrationMethod.MinMax, CalibMethod.ENTROPY: CalibrationMethod.Entropy,
                  CalibMethod.PERCENTILE: CalibrationMethod.Percentile}[method]
    extra: dict[str, bool | float] = {"symmetric": symmetric}
    if method == CalibMethod.PERCENTILE:
        extra["percentile"] = 99.999
    with tempfile.TemporaryDirectory(prefix="trtpipe-calib-") as tmp, quiet_onnxruntime_quantization(), \
            contextlib.redirect_stdout(io.StringIO()):  # ORT's histogram calibrators print their progress
        model_path = Path(tmp) / "model.onnx"
        onnx.save(model, str(model_path))
        calibrator = create_calibrator(model_path, None, augmented_model_path=str(Path(tmp) / "augmented.onnx"),
                                       calibrate_method=ort_method, extra_options=extra)
        input_names = [i.name for i in graph_inputs(model)]
        # ORT's histogram collectors stack per-batch outputs, so every batch must have the same size.
        samples = concat(batches)
        total = count(samples)
        size = max(d for d in range(1, min(count(batches[0]), total) + 1) if total % d == 0)
        batches = [take(samples, i, i + size) for i in range(0, total, size)]
        with console.progress() as bar:
            task = bar.add_task(f"Calibrating ({method})", total=len(batches))
            # A few batches at a time: ONNX Runtime's calibrators hold every activation of what they are given, so
            # the statistics are folded in per chunk (min/max merged, histograms accumulated) and the
            # activations dropped, keeping memory flat however much data there is.
            for start in range(0, len(batches), STREAM_BATCHES):
                calibrator.collect_data(_Reader(input_names, batches[start : start + STREAM_BATCHES],
                                                lambda: bar.advance(task)))
                calibrator.clear_collected_data()
            with console.step(f"Computing {method} ranges..."):
                tensors = calibrator.compute_data()
        del calibrator
    return {name: (float(np.min(data.range_value[0])), float(np.max(data.range_value[1])))
            for name, data in tensors.items()}


def _mse_ranges(model: onnx.ModelProto, batches: list[Batch], *, symmetric: bool) -> Ranges:
    names = float_activations(model)
    with console.progress() as bar:
        first = bar.add_task("Calibrating (mse): ranges", total=len(batches))
        extremes = observe(model, names, batches, on_batch=lambda: bar.advance(first))
        second = bar.add_task("Calibrating (mse): histograms", total=len(batches))
        histograms = observe(model, names, batches, histogram_bins=HISTOGRAM_BINS, ranges=extremes,
                             on_batch=lambda: bar.advance(second))
    return {name: mse_range(histograms[name], symmetric=symmetric) for name in names}


def mse_range(stats: RunningStats, *, symmetric: bool, levels: int = 255) -> tuple[float, float]:
    """The clipping range of least expected squared quantisation error over ``stats``'s histogram."""
    if stats.histogram is None or stats.edges is None or stats.histogram.sum() == 0 or stats.abs_max == 0:
        return (min(stats.minimum, 0.0), max(stats.maximum, 0.0))
    counts = stats.histogram
    centres = (stats.edges[:-1] + stats.edges[1:]) / 2
    scale = np.linspace(1.0 / MSE_CANDIDATES, 1.0, MSE_CANDIDATES)[:, None]
    if symmetric:
        high = stats.abs_max * scale
        low = -high
    else:
        low = min(stats.minimum, 0.0) * scale
        high = max(stats.maximum, 0.0) * scale
    step = (high - low) / levels
    clipped = np.clip(centres[None, :], low, high)
    error = (centres[None, :] - clipped) ** 2 + step**2 / 12.0
    best = int(np.argmin((error * counts[None, :]).sum(axis=1)))
    return (float(low[best, 0]), float(high[best, 0]))
