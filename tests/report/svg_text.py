"""Where the texts of an SVG chart land, computed from the SVG alone (no browser): each ``<text>``'s anchor, font
size, text-anchor and rotation, with DejaVu Sans' advance widths rounded up, so a box is never smaller than the
one a browser draws (the report's charts name DejaVu Sans first; fonts-dejavu-core on Debian)."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ElementTree

Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in the SVG's user units

SVG = "{http://www.w3.org/2000/svg}"
NARROW = set(" .,:;'|!ilI()[]")
WIDE = set("mwMW%@")
ASCENT, DESCENT = 0.77, 0.24  # of the font size, DejaVu Sans (glyph ascender, descender)


def _width(text: str, size: float) -> float:
    """The advance of ``text``, rounded up per glyph (DejaVu Sans: digits 0.636 em, most lower case under 0.65)."""
    return size * sum(0.34 if c in NARROW else 1.0 if c in WIDE else 0.66 for c in text)


def _piece(element: ElementTree.Element, text: str, dx: float, dy: float) -> Box:
    """The box of one run of text (a ``<text>`` or a mathtext ``<tspan>``), shifted by its groups' translation."""
    style = element.get("style", "")
    found = re.search(r"font-size:\s*([\d.]+)px", style)
    assert found, f"a text without a font size: {style!r}"
    size = float(found.group(1))
    anchor = re.search(r"text-anchor:\s*(\w+)", style)
    x, y = float(element.get("x", 0)) + dx, float(element.get("y", 0)) + dy
    width = _width(text, size)
    start = {"middle": -width / 2, "end": -width}.get(anchor.group(1) if anchor else "start", 0.0)
    corners = [(x + start, y - ASCENT * size), (x + start + width, y - ASCENT * size),
               (x + start, y + DESCENT * size), (x + start + width, y + DESCENT * size)]
    rotation = re.search(r"rotate\(([-\d.]+)", element.get("transform", ""))
    angle = math.radians(float(rotation.group(1))) if rotation else 0.0
    turned = [(x + (cx - x) * math.cos(angle) - (cy - y) * math.sin(angle),
               y + (cx - x) * math.sin(angle) + (cy - y) * math.cos(angle)) for cx, cy in corners]
    return (min(c[0] for c in turned), min(c[1] for c in turned), max(c[0] for c in turned),
            max(c[1] for c in turned))


def text_boxes(svg: str) -> list[tuple[str, Box]]:
    """(text, box) of every non-empty ``<text>`` element (a mathtext label, such as a log axis' 10², is one text
    made of the ``<tspan>`` runs inside it)."""
    boxes = []

    def walk(element: ElementTree.Element, dx: float, dy: float) -> None:
        shift = re.match(r"translate\(([-\d.]+)[ ,]+([-\d.]+)\)", element.get("transform", ""))
        if shift and element.tag != f"{SVG}text":
            dx, dy = dx + float(shift.group(1)), dy + float(shift.group(2))
        if element.tag != f"{SVG}text":
            for child in element:
                walk(child, dx, dy)
            return
        text = "".join(element.itertext()).strip()
        runs = [(span, (span.text or "").strip()) for span in element.iter(f"{SVG}tspan")]
        pieces = ([_piece(span, run, dx, dy) for span, run in runs if run] if element.get("style") is None
                  else [_piece(element, text, dx, dy)] if text else [])
        if pieces:
            boxes.append((text.replace("\n", "").replace(" ", "") if element.get("style") is None else text,
                          (min(b[0] for b in pieces), min(b[1] for b in pieces), max(b[2] for b in pieces),
                           max(b[3] for b in pieces))))

    walk(ElementTree.fromstring(svg), 0.0, 0.0)
    return boxes


def overlapping(boxes: list[tuple[str, Box]]) -> list[tuple[str, str]]:
    """Each pair of texts whose boxes share any area."""
    pairs = []
    for i, (a, box_a) in enumerate(boxes):
        for b, box_b in boxes[i + 1:]:
            if min(box_a[2], box_b[2]) > max(box_a[0], box_b[0]) and min(box_a[3], box_b[3]) > max(box_a[1],
                                                                                                    box_b[1]):
                pairs.append((a, b))
    return pairs


def group_style(svg: str, group_id: str) -> str:
    """The style of the first drawn shape inside the SVG group ``group_id`` (a bar, a point, a line)."""
    for group in ElementTree.fromstring(svg).iter(f"{SVG}g"):
        if group.get("id") == group_id:
            for shape in group.iter():
                if shape.get("style") and shape.tag in (f"{SVG}path", f"{SVG}use"):
                    return shape.get("style", "")
            raise AssertionError(f"group {group_id} draws nothing")
    raise AssertionError(f"no group {group_id} in the SVG")
