"""The calibration range cache of an INT8 artifact: ``model.onnx`` -> ``model.calib.json``, read and written here only.

Calibration is the slow part of INT8 (a pass over the data per method, two for mse), so optimize keeps each
tensor's range beside its output and reuses it on a rerun. The file holds the key it was made under (every input
that changes the ranges: the FP32 model's and the data's SHA-256, the method, symmetric activations) and the ranges:
``{"key": {"schema": "trtpipe.calibration/1", ...}, "ranges": {"tensor": [low, high], ...}}``. A cache made under
another key (the model, data or method changed) is stale: it reads as None and is rewritten, so a stale cache can
never be used by mistake. A file there that is not such a cache (not JSON, another kind of file, a cache of this
key whose ranges are not pairs of numbers) is refused in one line: it was damaged or the path names another file,
and overwriting it or failing deep inside quantisation would both hide that.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtpipe.artifact.records.document import Unreadable, read_document
from trtpipe.errors import BadInput
from trtpipe.files import write_json_atomic

CALIBRATION_SCHEMA = "trtpipe.calibration/1"

Ranges = dict[str, tuple[float, float]]  # each tensor's calibrated (low, high)


def calibration_path(artifact: Path, chosen: Path | None = None) -> Path:
    """Where the ranges of ``artifact`` are cached: ``chosen`` (``--calib-cache``) when given, else
    ``model.calib.json`` beside ``model.onnx``."""
    return Path(chosen) if chosen is not None else Path(artifact).with_suffix(".calib.json")


@dataclass(frozen=True)
class CalibrationKey:
    """Every input that changes the ranges; a cache is reused only under an equal key."""

    model_sha256: str
    data_sha256: str
    method: str
    symmetric: bool

    def to_dict(self) -> dict[str, Any]:
        return {"schema": CALIBRATION_SCHEMA, "model_sha256": self.model_sha256, "data_sha256": self.data_sha256,
                "method": str(self.method), "symmetric": self.symmetric}


def read_ranges(path: Path, key: CalibrationKey) -> Ranges | None:
    """The ranges cached at ``path`` under ``key``; None when there is no file or it was made under another key
    (calibrate afresh and :func:`write_ranges`). BadInput, in one line naming the file, for a file that is not a
    calibration cache or whose ranges are not pairs of numbers."""
    path = Path(path)
    try:
        cached = read_document(path)
    except Unreadable as error:
        reason = {"read": f"cannot be read: {error.detail}", "nested": error.detail,
                  "json": f"not valid JSON: {error.detail}"}[error.stage]
        raise _damaged(path, reason) from None
    if cached is None:
        return None
    recorded = cached.get("key") if isinstance(cached, dict) else None
    schema = recorded.get("schema") if isinstance(recorded, dict) else None
    if not isinstance(schema, str) or not schema.startswith(CALIBRATION_SCHEMA.split("/")[0] + "/"):
        raise _damaged(path, "no calibration key in it")
    if recorded != key.to_dict():
        return None  # stale: made for another model, other data or another method
    return _ranges(path, cached.get("ranges"))


def write_ranges(path: Path, key: CalibrationKey, ranges: Ranges) -> None:
    """Cache ``ranges`` at ``path`` under ``key``, atomically (a killed run leaves the old file or none)."""
    write_json_atomic(path, {"key": key.to_dict(),
                             "ranges": {name: [low, high] for name, (low, high) in ranges.items()}})


def _ranges(path: Path, value: object) -> Ranges:
    """``{"tensor": [low, high]}`` as Ranges; BadInput naming the first entry that is not a pair of numbers."""
    if not isinstance(value, dict):
        raise _damaged(path, f"'ranges' is {type(value).__name__}, not an object")
    ranges: Ranges = {}
    for name, pair in value.items():
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)):
            raise _damaged(path, f"'ranges.{name}' is not a [low, high] pair of numbers")
        ranges[name] = (float(pair[0]), float(pair[1]))
    return ranges


def _damaged(path: Path, why: str) -> BadInput:
    return BadInput(f"{path} is not a trtpipe calibration cache ({why}): delete it (calibration then runs afresh) "
                    "or choose another --calib-cache.")
