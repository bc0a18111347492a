"""Calibration ranges cached on disk, reused while the model and the data are unchanged.

Calibration is the slow part of INT8 (a pass over the data per method, two for mse); the key holds every
input that changes the ranges, so a stale cache can never be used by mistake.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtpipe.files import write_json_atomic
from trtpipe.optimize.int8.calibrate import Ranges

CACHE_SCHEMA = "trtpipe.calibration/1"


def cache_key(model_sha256: str, data_sha256: str, method: str, symmetric: bool) -> dict[str, Any]:
    return {"schema": CACHE_SCHEMA, "model_sha256": model_sha256, "data_sha256": data_sha256,
            "method": method, "symmetric": symmetric}


def load_ranges(path: Path, key: dict[str, Any]) -> Ranges | None:
    """The cached ranges when ``path`` holds ones made under the same ``key``; None otherwise."""
    try:
        cached = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cached, dict) or cached.get("key") != key:
        return None
    return {name: (float(low), float(high)) for name, (low, high) in cached["ranges"].items()}


def save_ranges(path: Path, key: dict[str, Any], ranges: Ranges) -> None:
    write_json_atomic(path, {"key": key, "ranges": {name: [low, high] for name, (low, high) in ranges.items()}})
