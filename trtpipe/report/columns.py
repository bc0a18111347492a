"""The one column table every report draws from: the terminal, Markdown and HTML show the same columns.

A column is shown when some row has a value for it (accuracy only exists with labels, model size only for
artifact files). Adding a report column is one line here, naming a BenchRow field and saying what it measures:
every report prints the meanings of the columns it shows, so no figure needs the README to be read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trtpipe.bench.other_load import BUSY_SHARE
from trtpipe.bench.stability import REACH, format_speedup, verdict_word
from trtpipe.intervals import Interval
from trtpipe.report.marks import Marks, Standing


@dataclass(frozen=True)
class Column:
    header: str
    key: str  # a BenchRow field (a row without a value for it has none in this column)
    format: str
    text: bool = False  # left-aligned words rather than right-aligned numbers
    always: bool = False  # shown even when every row lacks it
    meaning: str = ""  # what the figure is and how it was taken (the reports' legend)
    render: Callable[[dict[str, Any]], str] | None = None  # the cell from the whole row, where one field is not enough


def speedup_text(row: dict[str, Any]) -> str:
    """The speedup with its interval beside it (the figure the headline prints too, and the speedup chart beside
    its bar)."""
    interval = row.get("speedup_interval")
    return format_speedup(row["speedup_vs_torch_fp32"], Interval.from_dict(interval) if interval else None)


def share_text(value: float, interval: dict[str, Any] | Interval | None) -> str:
    """``81.25% (64.7-91.1)``: an agreement or accuracy with its 95 % interval over the samples, as every table,
    chart key and choice line prints it (the bare figure where no interval was measured)."""
    text = f"{100 * value:.2f}%"
    if isinstance(interval, dict):
        interval = Interval.from_dict(interval)
    return f"{text} ({100 * interval.low:.1f}-{100 * interval.high:.1f})" if interval is not None else text


def _agreement(row: dict[str, Any]) -> str:
    return share_text(row["agreement"], row.get("agreement_interval"))


def _accuracy(row: dict[str, Any]) -> str:
    return share_text(row["top1_accuracy"], row.get("accuracy_interval"))


def _stability(row: dict[str, Any]) -> str:
    """The row's one verdict (stability.row_verdict), the same word every report and chart prints."""
    return verdict_word(row.get("unstable"))


COLUMNS: tuple[Column, ...] = (
    Column("Variant", "variant", "{}", text=True, always=True),
    Column("Precision", "precision", "{}", text=True, always=True),
    Column("Batch", "batch", "{}", always=True),
    Column("p50 ms", "p50_ms", "{:.2f}",
           meaning="median latency of one call at that batch, warm-up runs discarded: the median of the timed rounds' "
                   "p50s (with fewer than 3 rounds, of all runs; p90, p99 and the mean are over all runs)"),
    Column("p90 ms", "p90_ms", "{:.2f}"),
    Column("p99 ms", "p99_ms", "{:.2f}"),
    Column("Tail ms", "tail_ms", "{:.2f}",
           meaning="the median of the rounds' p99s: a burst of load that hits a minority of rounds cannot move it"),
    Column("Mean ms", "mean_ms", "{:.2f}"),
    Column("Items/s", "throughput", "{:.1f}", meaning="batch items per second at the p50 latency"),
    Column("Speedup (95% CI)", "speedup_vs_torch_fp32", "{}", render=speedup_text,
           meaning="how many times faster than the reference (PyTorch FP32 eager, or the FP32 ONNX the report names) "
                   "at the same batch in the same run: the median over rounds of the two rows' p50s paired round by "
                   "round, and in brackets its 95 % bootstrap interval over the rounds"),
    Column("Stability", "p50_interval", "{}", text=True, render=_stability,
           meaning=f"the row's one verdict, the same in every report, chart, choice and the JSON: unstable where the "
                   f"95 % interval of its p50 or of its speedup over the rounds reaches more than {100 * REACH:.0f} % "
                   f"from the figure, or where other processes used more than {100 * BUSY_SHARE:.0f} % of the "
                   "machine's CPU while the rounds ran; else steady (the lines under the table say why and what to "
                   "do)"),
    Column("Max abs err", "max_abs_err", "{:.2e}",
           meaning="largest absolute difference from the reference's outputs on the agreement samples, over every "
                   "output"),
    Column("Worst output", "worst_output", "{}", text=True,
           meaning="of a model with several outputs, the one furthest from the reference's (lowest cosine)"),
    Column("Agreement", "agreement", "{:.2%}", render=_agreement,
           meaning="how much of the reference's answer the row gives, by the model's task: top-1 agreement "
                   "(classify), pixel agreement (segment), mAP@0.5 of its detections against the reference's "
                   "(detect), F1 of the map (dense), mean cosine (embed); the heading names the one used; in "
                   "brackets its 95 % interval over the agreement samples"),
    Column("Accuracy", "top1_accuracy", "{:.2%}", render=_accuracy,
           meaning="the task's accuracy against the samples' labels (top-1, pixel accuracy, mAP@0.5), in brackets "
                   "its 95 % interval over the samples"),
    Column("Size MB", "model_size_mb", "{:.2f}", meaning="the artifact file's size"),
    Column("Host MB", "host_memory_mb", "{:.0f}",
           meaning="peak resident memory the variant added while loading and running up to this batch; artifact "
                   "and peer rows on the CPU measured alone in a fresh process that imported their runtime first, "
                   "PyTorch rows in the bench's process with their weights added"),
    Column("GPU MB", "device_memory_mb", "{:.0f}",
           meaning="device memory the variant held beyond what was in use before it loaded (engine, weights, "
                   "activations, workspace)"),
    Column("Build s", "build_seconds", "{:.1f}", meaning="seconds the stage that made the artifact took"),
)


def cell(row: dict[str, Any], column: Column) -> str:
    value = row.get(column.key)
    if value is None:
        return "–"
    return column.render(row) if column.render else column.format.format(value)


def present_columns(rows: list[dict[str, Any]]) -> list[Column]:
    """The columns that have a value in some row."""
    return [c for c in COLUMNS if c.always or any(r.get(c.key) is not None for r in rows)]


def legend(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(header, meaning) for each column shown that needs saying."""
    return [(c.header, c.meaning) for c in present_columns(rows) if c.meaning]


def legend_line(rows: list[dict[str, Any]]) -> str:
    """The legend as one Markdown paragraph."""
    return "Columns: " + "; ".join(f"{header}: {meaning}" for header, meaning in legend(rows)) + "."


def markdown_table(rows: list[dict[str, Any]], marks: Marks | None = None) -> list[str]:
    """The table as Markdown lines; with ``marks``, each marked variant's cell carries its marker (and, outside the
    budget, the limits it breaks)."""
    columns = present_columns(rows)

    def text(row: dict[str, Any], column: Column) -> str:
        if column.key != "variant" or marks is None:
            return cell(row, column)
        variant = row["variant"]
        why = marks.outside.get(variant) if marks.standing(variant) is Standing.OUTSIDE else None
        return marks.label(variant) + (f" ({why})" if why else "")

    return ["| " + " | ".join(c.header for c in columns) + " |",
            "|" + "|".join("---" if c.text else "---:" for c in columns) + "|",
            *("| " + " | ".join(text(r, c).replace("|", "\\|") for c in columns) + " |" for r in rows)]
