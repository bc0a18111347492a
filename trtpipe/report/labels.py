"""Point labels that do not pile on one another: each label goes to the first spot around its point, nearest first,
where it overlaps no label already placed, no point and nothing outside the axes (measured with matplotlib's own
text extents); a label pushed away from its point gets a thin leader line back to it.

Variants cluster (FP32 and FP16 of one model land on the same latency and accuracy), so labels are short (a
number keyed to a table beside the chart) and placement searches rings further out rather than accepting overlap.
"""

from __future__ import annotations

import math
from typing import Any

RINGS_PT = (6.0, 9.0, 12.0, 16.0, 21.0, 28.0, 36.0, 46.0)  # distances from the point tried in turn, in points
DIRECTIONS = 12  # spots tried on each ring
POINT_RADIUS_PT = 4.5  # room kept clear around every marker
LEADER_FROM_PT = 12.0  # a label placed this far or further gets a line back to its point
PAD_PT = 1.5  # room kept around each label: a browser's font metrics differ from matplotlib's by a pixel or so


def _box(extent: Any, pad: float = 0.0) -> tuple[float, float, float, float]:
    return extent.x0 - pad, extent.y0 - pad, extent.x1 + pad, extent.y1 + pad


def _overlap(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    return width * height if width > 0 and height > 0 else 0.0


def _outside(box: tuple[float, float, float, float], frame: tuple[float, float, float, float]) -> float:
    """How much of ``box`` lies outside ``frame`` (area)."""
    area = (box[2] - box[0]) * (box[3] - box[1])
    return area - _overlap(box, frame)


def place_labels(axis: Any, points: list[tuple[float, float]], texts: list[str], *, fontsize: float = 8.0,
                 radii_pt: list[float] | None = None, gid_prefix: str | None = None,
                 color: str = "#222222") -> list[Any]:
    """Annotate each of ``points`` (data coordinates) with its text, placed clear of every marker and of the labels
    placed before it; returns the annotations. ``radii_pt``: each marker's half-size in points (a big star needs
    more room than a dot). ``gid_prefix``: each label's SVG group id is ``{gid_prefix}{index}``, so a test can find
    it."""
    figure = axis.figure
    renderer = figure.canvas.get_renderer()
    to_pixels = figure.dpi / 72.0
    centres = [axis.transData.transform(point) for point in points]
    pad = PAD_PT * to_pixels
    radii = [r * to_pixels for r in (radii_pt or [POINT_RADIUS_PT] * len(points))]
    taken = [(x - r, y - r, x + r, y + r) for (x, y), r in zip(centres, radii, strict=True)]
    frame = _box(axis.get_window_extent(renderer))
    spots = [(0.0, 0.0)] + [(ring * math.cos(2 * math.pi * k / DIRECTIONS + math.pi / 4),
                             ring * math.sin(2 * math.pi * k / DIRECTIONS + math.pi / 4))
                            for ring in RINGS_PT for k in range(DIRECTIONS)]
    spots = spots[1:]  # never on the point itself: the marker would hide it
    annotations = []
    for index, (point, text) in enumerate(zip(points, texts, strict=True)):
        label = axis.annotate(text, point, xytext=spots[0], textcoords="offset points", ha="center", va="center",
                              fontsize=fontsize, color=color, annotation_clip=False)
        best, best_cost = spots[0], math.inf
        for spot in spots:
            label.xyann = spot
            box = _box(label.get_window_extent(renderer), pad)
            cost = sum(_overlap(box, other) for other in taken) + 4 * _outside(box, frame)
            if cost == 0:
                best, best_cost = spot, 0.0
                break
            if cost < best_cost:
                best, best_cost = spot, cost
        label.xyann = best
        taken.append(_box(label.get_window_extent(renderer), pad))
        if math.hypot(*best) >= LEADER_FROM_PT:
            axis.annotate("", point, xytext=best, textcoords="offset points",
                          arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.6, "shrinkA": 5,
                                      "shrinkB": 3})
        if gid_prefix is not None:
            label.set_gid(f"{gid_prefix}{index}")
        annotations.append(label)
    return annotations
