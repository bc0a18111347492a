"""Calibration ranges reused from the range cache while the model, the data and the method are unchanged.

Calibration is the slow part of INT8, so a rerun reads the ranges back instead; the cache's file (its path rule,
key, atomic write and the refusal of a damaged one) is the artifact room's calibration record
(trtpipe.artifact.records.calibration): this module only decides when to read it and when to calibrate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import onnx

from trtpipe import console
from trtpipe.artifact.records.calibration import CalibrationKey, Ranges, read_ranges, write_ranges
from trtpipe.inputs import Batch
from trtpipe.optimize.int8.calibration.calibrate import calibrate
from trtpipe.vocab import CalibMethod


def cached_ranges(model: onnx.ModelProto, batches: Callable[[], list[Batch]], data_sha256: str,
                  method: CalibMethod, *, symmetric: bool, cache: Path) -> Ranges:
    """Each tensor's range of ``model``: read from ``cache`` when it was made under the same key, else calibrated
    on ``batches()`` (only then are they made) and cached there."""
    key = CalibrationKey(hashlib.sha256(model.SerializeToString()).hexdigest(), data_sha256, method, symmetric)
    ranges = read_ranges(cache, key)
    if ranges is not None:
        console.note(f"Reusing calibration ranges from {cache} (model and data unchanged)")
        return ranges
    ranges = calibrate(model, batches(), method, symmetric=symmetric)
    write_ranges(cache, key, ranges)
    return ranges
