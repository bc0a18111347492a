"""Rank fallback units by sensitivity (step 2 of the accuracy budget, :mod:`sensitivity`).

First every unit by the error it removes where it is computed (:func:`removed_errors`, one run over the probe);
then the first MEASURED_UNITS of those, each kept alone in FP32 and scored by the share of the output error that
removes, on a quarter of the probe. The probe is calibration data, not the eval data the budget is judged on, so
the ranking does not fit the test. The search that consumes the ranking lives in :mod:`fallback_search`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx

from trtpipe import console
from trtpipe.inputs import Batch, count, take
from trtpipe.optimize.int8.qdq.keep_fp32 import keep_in_fp32
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.int8.steps.budget.error_probe import removed_errors
from trtpipe.optimize.int8.steps.budget.fallback_units import fallback_units
from trtpipe.optimize.judging.evaluate import outputs

PROBE_SAMPLES = 64  # the most calibration samples the ranking runs on (the caller hands over at most this many)
PROBE_ELEMENTS = PROBE_SAMPLES * 3 * 224 * 224  # input values the ranking reads: fewer samples for larger inputs
MIN_PROBE_SAMPLES = 4
MEASURED_UNITS = 128  # units (the largest own errors first) whose effect on the output is measured one by one
MIN_MEASURE_SAMPLES = 2  # probe samples each of those measurements runs on, at least (a quarter of the probe)


def probe_samples(probe: Batch) -> int:
    """How many of ``probe``'s samples the ranking reads: PROBE_SAMPLES at 224x224 RGB, fewer for larger inputs
    (the ranking's cost is the pixels it computes), never fewer than MIN_PROBE_SAMPLES."""
    arrays = [probe] if isinstance(probe, np.ndarray) else list(probe.values())
    per_sample = max((int(np.prod(a.shape[1:])) for a in arrays), default=1) or 1
    wanted = max(MIN_PROBE_SAMPLES, min(PROBE_SAMPLES, PROBE_ELEMENTS // per_sample))
    return min(wanted, count(probe))


def probe_count(probe: Batch, batch: int | None) -> int:
    """:func:`probe_samples`, in whole batches of a static batch size."""
    samples = probe_samples(probe) if count(probe) else 0
    if batch:
        samples = max(batch, samples - samples % batch) if count(probe) >= batch else 0
    return samples


def measure_count(probe: Batch, batch: int | None) -> int:
    """Samples for measuring each unit alone: a quarter of the ranking's probe, at least MIN_MEASURE_SAMPLES."""
    available = count(probe)
    samples = min(available, max(MIN_MEASURE_SAMPLES, probe_samples(probe) // 4)) if available else 0
    if batch:
        samples = max(batch, samples - samples % batch) if available >= batch else 0
    return samples



def output_gains(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile,
                 units: Sequence[tuple[str, ...]], probe: Batch, batch: int | None,
                 on_unit: Callable[[], None] | None = None) -> list[float]:
    """For each unit, the share of ``quantized``'s output error on ``probe`` that keeping that unit alone in FP32
    removes (1.0: all of it; 0 or less: none). The error is each output's mean squared error relative to the
    FP32 output's mean square, summed over the outputs (a detector's heads all count)."""
    as_written = profile.measured_as_written
    reference = outputs(fp32, probe, batch=batch)

    def error(model: onnx.ModelProto) -> float:
        values = outputs(model, probe, as_written=as_written, batch=batch)
        return sum(float(np.mean((np.asarray(v, np.float64) - r[: len(v)]) ** 2) / (np.mean(r.astype(np.float64) ** 2)
                                                                                   or 1.0))
                   for v, r in zip(values, reference, strict=True))

    full = error(quantized)
    gains = []
    for unit in units:
        gains.append((full - error(keep_in_fp32(quantized, fp32, unit, profile))) / (full or 1.0))
        if on_unit is not None:
            on_unit()
    return gains


def rank_layers(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, probe: Batch,
                batch: int | None) -> list[tuple[tuple[str, ...], float]]:
    """Fallback units, most sensitive first. The first MEASURED_UNITS by their own error (:func:`removed_errors`,
    one run) are then each kept alone in FP32 and scored by the share of the output error that removes
    (:func:`output_gains`), on a few probe samples; the rest follow in own-error order, scored 0."""
    units = fallback_units(fp32, profile, quantized)
    samples = probe_count(probe, batch)
    alone = measure_count(probe, batch)
    with console.progress() as bar:
        task = bar.add_task(f"Sensitivity: every unit's own INT8 error, in one run over {samples} calibration "
                            "samples", total=samples)
        own = removed_errors(fp32, quantized, profile, units, take(probe, 0, samples), batch,
                             on_chunk=lambda n: bar.advance(task, n)) if samples else [0.0] * len(units)
    by_own = sorted(zip(units, own, strict=True), key=lambda item: item[1], reverse=True)
    measured = [unit for unit, _ in by_own[:MEASURED_UNITS]] if alone else []
    with console.progress() as bar:
        task = bar.add_task(f"Sensitivity: each unit alone in FP32, on {alone} calibration sample(s)",
                            total=len(measured))
        gains = output_gains(fp32, quantized, profile, measured, take(probe, 0, alone), batch,
                             on_unit=lambda: bar.advance(task)) if measured else []
    # A unit whose fallback alone does not help (or hurts) may still be needed once others are in: its error is
    # masked by theirs (the readers of an outlier tensor and the Add that wrote it). Those are ordered by their
    # own error, which sees them regardless.
    own_of = dict(zip(units, own, strict=True))
    ranked = sorted(zip(measured, gains, strict=True), key=lambda item: (max(item[1], 0.0), own_of[item[0]]),
                    reverse=True)
    return ranked + [(unit, 0.0) for unit, _ in by_own[len(measured):]]
