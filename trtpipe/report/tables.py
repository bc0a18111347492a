"""Bench results as a terminal table, Markdown and JSON, all from the one results dictionary and the one
column table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe.bench.environment import OPTIONAL_PACKAGES
from trtpipe.bench.standing import describe, describe_pytorch, pytorch_standing, standing_of
from trtpipe.files import write_json_atomic, write_text_atomic
from trtpipe.report.columns import cell, legend_line, markdown_table, present_columns
from trtpipe.report.layer_timing import markdown_lines, print_layer_timing


def machine_line(report: dict[str, Any]) -> str:
    env = report["environment"]
    gpu = f", GPU {env['gpu']['name']}" if env.get("gpu") else ", no GPU"
    flags = f"{', '.join(env['cpu_flags'])}; " if env.get("cpu_flags") else ""
    versions = env["versions"]
    optional = "".join(f", {name} {versions[name]}" for name in OPTIONAL_PACKAGES if name in versions)
    return (f"{env['cpu']} ({flags}{env['cores']} cores, {env['threads']} threads used{gpu}); torch "
            f"{versions['torch']}, onnxruntime {versions['onnxruntime']}{optional}")


def print_table(report: dict[str, Any]) -> None:
    model = report["model"]
    table = Table(title=f"{model['name']} — latency vs {reference_of(report)}", title_justify="left")
    columns = present_columns(report["results"])
    for column in columns:
        table.add_column(column.header, justify="left" if column.text else "right")
    for row in report["results"]:
        table.add_row(*(escape(cell(row, column)) for column in columns))
    console.out.print(table)
    console.out.print(f"[dim]{escape(machine_line(report))}. Agreement on {escape(report['agreement_inputs'])}.[/dim]",
                      soft_wrap=True)
    for line in standing_lines(report):
        console.out.print(escape(line), soft_wrap=True)
    print_layer_timing(report, console.out)


def reference_of(report: dict[str, Any]) -> str:
    """What every speedup and agreement in the report is measured against; an FP32 ONNX that trtpipe converted
    names the PyTorch model and weights it was converted from."""
    reference = str(report.get("reference") or "PyTorch FP32 eager")
    origin = (report.get("model") or {}).get("converted_from")
    if isinstance(origin, dict) and origin.get("weights_sha256"):
        reference += (f" (converted from {origin.get('source') or origin.get('name')}, weights SHA-256 "
                      f"{str(origin['weights_sha256'])[:12]})")
    return reference


def standing_lines(report: dict[str, Any]) -> list[str]:
    """Where trtpipe stands against PyTorch's fastest row (a line per device and batch) and against the peers (a
    line per batch; nothing when the run had no peers)."""
    stored = report.get("standing_pytorch")
    pytorch = stored if stored is not None else pytorch_standing(report["results"])
    return ([f"Against PyTorch, {describe_pytorch(entry)}." for entry in pytorch]
            + [f"Against the peers, {describe(entry)}." for entry in standing_of(report)])


def left_out_lines(report: dict[str, Any], summary: dict[str, Any] | None = None) -> list[str]:
    """What the run left out and why: the pipeline's skipped variants and stages, then bench's warnings."""
    return [*((summary or {}).get("left_out") or []), *(report.get("warnings") or [])]


def to_markdown(report: dict[str, Any]) -> str:
    settings = report["settings"]
    runs = f"{settings['iters']} timed runs" if settings.get("iters") else f"~{settings['duration']} s of runs"
    if settings.get("rounds", 1) > 1:
        runs += f" in {settings['rounds']} rounds taken in turn across the variants"
    lines = [
        f"### {report['model']['name']} — latency vs {reference_of(report)}",
        "",
        f"Machine: {machine_line(report)}.  ",
        f"Each cell: {settings['warmup']} warm-up runs discarded, then {runs} per variant and batch; "
        f"speedup is the ratio of p50 latencies in the same run. Agreement on {report['agreement_inputs']}.",
        "",
        *markdown_table(report["results"]),
    ]
    if standing := standing_lines(report):
        lines += ["", *(f"- {line}" for line in standing)]
    if left_out := left_out_lines(report):
        lines += ["", "Not in this table, and why:", "", *(f"- {line}" for line in left_out)]
    lines += ["", legend_line(report["results"])]
    if layers := markdown_lines(report):
        lines += ["", *layers]
    return "\n".join(lines) + "\n"


def write_reports(report: dict[str, Any], json_path: Path | None, markdown_path: Path | None) -> None:
    if json_path:
        write_json_atomic(json_path, report)
        console.success(f"Wrote {json_path}")
    if markdown_path:
        write_text_atomic(markdown_path, to_markdown(report))
        console.success(f"Wrote {markdown_path}")
