"""The one column table every report draws from: the terminal, Markdown and HTML show the same columns.

A column is shown when some row has a value for it (accuracy only exists with labels, model size only for
artifact files). Adding a report column is one line here, naming a BenchRow field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    header: str
    key: str  # a BenchRow field
    format: str
    text: bool = False  # left-aligned words rather than right-aligned numbers
    always: bool = False  # shown even when every row lacks it


COLUMNS: tuple[Column, ...] = (
    Column("Variant", "variant", "{}", text=True, always=True),
    Column("Precision", "precision", "{}", text=True, always=True),
    Column("Batch", "batch", "{}", always=True),
    Column("p50 ms", "p50_ms", "{:.2f}"),
    Column("p90 ms", "p90_ms", "{:.2f}"),
    Column("p99 ms", "p99_ms", "{:.2f}"),
    Column("Mean ms", "mean_ms", "{:.2f}"),
    Column("Items/s", "throughput", "{:.1f}"),
    Column("Speedup", "speedup_vs_torch_fp32", "{:.2f}x"),
    Column("Max abs err", "max_abs_err", "{:.2e}"),
    Column("Top-1 agree", "top1_agreement", "{:.2%}"),
    Column("Accuracy", "top1_accuracy", "{:.2%}"),
    Column("Size MB", "model_size_mb", "{:.2f}"),
    Column("Host MB", "host_memory_mb", "{:.0f}"),
    Column("GPU MB", "device_memory_mb", "{:.0f}"),
    Column("Build s", "build_seconds", "{:.1f}"),
)


def cell(row: dict[str, Any], column: Column) -> str:
    value = row.get(column.key)
    return "–" if value is None else column.format.format(value)


def present_columns(rows: list[dict[str, Any]]) -> list[Column]:
    """The columns that have a value in some row."""
    return [c for c in COLUMNS if c.always or any(r.get(c.key) is not None for r in rows)]


def markdown_table(rows: list[dict[str, Any]]) -> list[str]:
    columns = present_columns(rows)
    return ["| " + " | ".join(c.header for c in columns) + " |",
            "|" + "|".join("---" if c.text else "---:" for c in columns) + "|",
            *("| " + " | ".join(cell(r, c) for c in columns) + " |" for r in rows)]
