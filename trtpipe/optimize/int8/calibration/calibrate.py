"""Activation ranges for INT8, by one of four methods.

minmax, entropy and percentile are the reference runtime's calibrators (ONNX Runtime's, asked through the
registry: runtime/onnxruntime/quantization.py). mse is ours: no ONNX tool offers it. For each tensor it picks the
clipping range that minimises the expected squared quantisation error over the tensor's histogram on calibration
data — rounding noise (step²/12) inside the range plus clipping error outside it.
"""

from __future__ import annotations

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.records.calibration import Ranges
from trtpipe.inputs import Batch
from trtpipe.optimize.graph.activations import RunningStats, float_activations, observe
from trtpipe.runtime.registry import quantization_tools
from trtpipe.vocab import CalibMethod

HISTOGRAM_BINS = 2048
MSE_CANDIDATES = 256


def calibrate(model: onnx.ModelProto, batches: list[Batch], method: CalibMethod, *, symmetric: bool) -> Ranges:
    """Per-tensor (low, high) ranges of every float activation of ``model`` on ``batches``."""
    if method == CalibMethod.MSE:
        return _mse_ranges(model, batches, symmetric=symmetric)
    return quantization_tools().ranges(model, batches, str(method), symmetric=symmetric)


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
