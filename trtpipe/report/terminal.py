"""Which columns of the results table a terminal of a given width shows, and how wide each is.

Every figure is shown whole or not at all: a cell cut to ``…`` is a figure nobody can read. The columns a reader
needs first (the variant, its batch, its p50, its speedup with its interval, whether its rounds agree, its
agreement) are kept first; the others follow while they fit, and one line names those left out (the Markdown and
JSON keep every column). Variant and output names fold onto more lines rather than push a figure out; numbers and
their headers' words never break.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtpipe.report.columns import Column, cell

# The columns in the order a narrow terminal keeps them; a column not named here comes after these.
PRIORITY = ("variant", "batch", "p50_ms", "speedup_vs_torch_fp32", "p50_interval", "agreement", "p99_ms",
            "precision", "throughput", "top1_accuracy", "tail_ms", "host_memory_mb", "model_size_mb",
            "device_memory_mb", "worst_output", "max_abs_err", "p90_ms", "mean_ms", "build_seconds")
FOLDED = {"variant": 16, "worst_output": 12}  # names that fold onto more lines, down to this many characters
EDGE, PER_COLUMN = 1, 3  # rich's box: the left border, and per column a space either side and its right border


@dataclass(frozen=True)
class Layout:
    shown: list[tuple[Column, int]]  # each column shown, in the table's order, with its width in characters
    left_out: list[Column]

    def left_out_line(self, width: int) -> str:
        return (f"At {width} columns the table leaves out {', '.join(c.header for c in self.left_out)}: "
                "--json and --markdown keep every column (or widen the terminal).")


def fit_columns(columns: list[Column], rows: list[dict[str, Any]], width: int) -> Layout:
    """The columns that fit in ``width`` characters, the ones a reader needs first kept first, each as wide as its
    widest cell (a folded name column: what is left, between its minimum and its longest name)."""
    order = sorted(columns, key=lambda c: PRIORITY.index(c.key) if c.key in PRIORITY else len(PRIORITY))
    widths = {c.key: _widest(c, rows) for c in columns}
    least = {c.key: _least(c, rows) for c in columns}
    kept: list[Column] = []
    used = EDGE
    for column in order:
        if used + least[column.key] + PER_COLUMN <= width or not kept:
            kept.append(column)
            used += least[column.key] + PER_COLUMN
    spare = width - used
    sizes = {}
    for column in kept:  # the spare room widens columns in priority order up to their widest (names unfolded
        grow = max(min(spare, widths[column.key] - least[column.key]), 0)  # first, then headers on one line)
        sizes[column.key] = least[column.key] + grow
        spare -= grow
    return Layout(shown=[(c, sizes[c.key]) for c in columns if c in kept],
                  left_out=[c for c in columns if c not in kept])


def _widest(column: Column, rows: list[dict[str, Any]]) -> int:
    """The column's width with nothing folded: its header on one line or its widest cell."""
    return max([len(column.header), *(len(cell(r, column)) for r in rows)])


def _least(column: Column, rows: list[dict[str, Any]]) -> int:
    """The narrowest the column can be with every figure whole: its widest cell and its header's longest word
    (headers wrap between words); a name column folds down to its minimum."""
    header_word = max(len(word) for word in column.header.split())
    if column.key in FOLDED:
        return max(header_word, min(FOLDED[column.key], _widest(column, rows)))
    return max([header_word, *(len(cell(r, column)) for r in rows)])
