"""Bench results as a terminal table, Markdown and JSON, all from the one results dictionary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe._files import write_json_atomic, write_text_atomic

_COLUMNS = [
    ("Variant", "variant", "{}"),
    ("Precision", "precision", "{}"),
    ("Batch", "batch", "{}"),
    ("p50 ms", "p50_ms", "{:.2f}"),
    ("p90 ms", "p90_ms", "{:.2f}"),
    ("p99 ms", "p99_ms", "{:.2f}"),
    ("Mean ms", "mean_ms", "{:.2f}"),
    ("Items/s", "throughput", "{:.1f}"),
    ("Speedup", "speedup_vs_torch_fp32", "{:.2f}x"),
    ("Max abs err", "max_abs_err", "{:.2e}"),
    ("Top-1 agree", "top1_agreement", "{:.2%}"),
    ("Accuracy", "top1_accuracy", "{:.2%}"),
]


Column = tuple[str, str, str]  # header, row key, format
_ALWAYS = ("variant", "precision", "batch")


def cell(row: dict[str, Any], key: str, fmt: str) -> str:
    value = row.get(key)
    return "–" if value is None else fmt.format(value)


def present_columns(columns: list[Column], rows: list[dict[str, Any]]) -> list[Column]:
    """The columns that have a value in some row (accuracy only exists with labels, size only for files)."""
    return [c for c in columns if c[1] in _ALWAYS or any(r.get(c[1]) is not None for r in rows)]


def markdown_table(columns: list[Column], rows: list[dict[str, Any]]) -> list[str]:
    return ["| " + " | ".join(h for h, _, _ in columns) + " |",
            "|" + "|".join("---" if k in ("variant", "precision") else "---:" for _, k, _ in columns) + "|",
            *("| " + " | ".join(cell(r, k, f) for _, k, f in columns) + " |" for r in rows)]


def _columns(results: list[dict[str, Any]]) -> list[Column]:
    return present_columns(_COLUMNS, results)


def machine_line(report: dict[str, Any]) -> str:
    env = report["environment"]
    gpu = f", GPU {env['gpu']['name']}" if env.get("gpu") else ", no GPU"
    flags = f"{', '.join(env['cpu_flags'])}; " if env.get("cpu_flags") else ""
    return (f"{env['cpu']} ({flags}{env['cores']} cores, {env['threads']} threads used{gpu}); torch "
            f"{env['versions']['torch']}, onnxruntime {env['versions']['onnxruntime']}")


def print_table(report: dict[str, Any]) -> None:
    model = report["model"]
    table = Table(title=f"{model['name']} — latency vs PyTorch FP32 eager", title_justify="left")
    columns = _columns(report["results"])
    for header, _, _ in columns:
        table.add_column(header, justify="left" if header in ("Variant", "Precision") else "right")
    for row in report["results"]:
        table.add_row(*(escape(cell(row, key, fmt)) for _, key, fmt in columns))
    console.out.print(table)
    console.out.print(f"[dim]{escape(machine_line(report))}. Agreement on {escape(report['agreement_inputs'])}.[/dim]",
                      soft_wrap=True)


def to_markdown(report: dict[str, Any]) -> str:
    columns = _columns(report["results"])
    settings = report["settings"]
    runs = f"{settings['iters']} timed runs" if settings.get("iters") else f"~{settings['duration_s']} s of runs"
    lines = [
        f"### {report['model']['name']} — latency vs PyTorch FP32 eager",
        "",
        f"Machine: {machine_line(report)}.  ",
        f"Each cell: {settings['warmup']} warm-up runs discarded, then {runs} per variant and batch; "
        f"speedup is the ratio of p50 latencies in the same run. Agreement on {report['agreement_inputs']}.",
        "",
        *markdown_table(columns, report["results"]),
    ]
    return "\n".join(lines) + "\n"


def write_reports(report: dict[str, Any], json_path: Path | None, markdown_path: Path | None) -> None:
    if json_path:
        write_json_atomic(json_path, report)
        console.success(f"Wrote {json_path}")
    if markdown_path:
        write_text_atomic(markdown_path, to_markdown(report))
        console.success(f"Wrote {markdown_path}")
