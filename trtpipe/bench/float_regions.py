"""Which parts of each INT8 artifact were left float, and why, read from its manifest for bench's report: the
placement rules' nodes (``int8.placement``: each rule's reason) and speed-aware placement's regions
(``int8.speed_placement``: measured faster in float than in integer on the machine that made it). A row of the
report says how fast a file is; these lines say what in it is not INT8, so a reader need not open the manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtpipe.artifact.records.manifest import read_manifest
from trtpipe.vocab import Precision


def float_region_lines(paths: list[Path]) -> list[str]:
    """One line per INT8 artifact among ``paths`` that leaves anything float (none for the others)."""
    lines = []
    for path in paths:
        manifest = read_manifest(path) if path.is_file() else None
        int8 = (manifest.details.get(Precision.INT8.value) if manifest is not None else None) or {}
        if line := _line(path.name, int8):
            lines.append(line)
    return lines


def _line(name: str, int8: dict[str, Any]) -> str | None:
    parts = []
    speed = int8.get("speed_placement") or {}
    for region in speed.get("regions", []):
        if region.get("kept") == "float":
            parts.append(f"{region['region']} ({len(region.get('nodes', []))} nodes): {region['float_speedup']:.2f}x "
                         "faster in float than in integer where it was made (speed-aware placement)")
    for rule, entry in (int8.get("placement") or {}).items():
        if rule in ("speed-float", "concat-shared-scale", "concat-in-place") or not isinstance(entry, dict):
            continue  # speed's regions are said above; the Concat rules quantize, they leave nothing float
        nodes = entry.get("nodes") or []
        if nodes:
            parts.append(f"{len(nodes)} nodes by rule '{rule}' ({entry.get('why', '')})")
    if int8.get("fp32_layers"):
        parts.append(f"{len(int8['fp32_layers'])} layers kept FP32 by the accuracy budget")
    return f"{name} leaves float: " + "; ".join(parts) if parts else None
