"""Bench results as a terminal table, Markdown and JSON, all from the one results dictionary and the one
column table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trtpipe import console
from trtpipe.bench.environment import OPTIONAL_PACKAGES
from trtpipe.bench.stability import ADVICE, MIN_ROUNDS, is_load_reason, verdict_reasons
from trtpipe.bench.standing import describe, describe_pytorch, headline_prefix, pytorch_standing, standing_of
from trtpipe.files import write_output
from trtpipe.report.columns import cell, legend_line, markdown_table, present_columns
from trtpipe.report.layer_timing import markdown_lines, print_layer_timing
from trtpipe.report.terminal import fit_columns
from trtpipe.runtime.registry import reference_library


def machine_line(report: dict[str, Any]) -> str:
    env = report["environment"]
    gpu = f", GPU {env['gpu']['name']}" if env.get("gpu") else ", no GPU"
    flags = f"{', '.join(env['cpu_flags'])}; " if env.get("cpu_flags") else ""
    versions = env["versions"]
    reference = reference_library()
    optional = "".join(f", {name} {versions[name]}" for name in OPTIONAL_PACKAGES if name in versions)
    return (f"{env['cpu']} ({flags}{counted(env['cores'], 'core')}, {counted(env['threads'], 'thread')} used{gpu}); "
            f"torch {versions['torch']}, {reference} {versions[reference]}{optional}")


def counted(count: int, noun: str) -> str:
    """"1 thread", "2 threads": a count with its noun agreeing."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def print_table(report: dict[str, Any], to: Console | None = None) -> None:
    """The results table as wide as the terminal allows (terminal.py: the columns a reader needs first, variant
    names folded, never a figure cut), then the rows whose rounds disagree, the machine and the standing lines."""
    out = to or console.out
    model = report["model"]
    rows = report["results"]
    table = Table(title=f"{model['name']} — latency vs {reference_of(report)}", title_justify="left")
    layout = fit_columns(present_columns(rows), rows, out.width)
    for column, width in layout.shown:
        table.add_column(column.header, justify="left" if column.text else "right", width=width, overflow="fold")
    for row in rows:
        table.add_row(*(escape(cell(row, column)) for column, _ in layout.shown))
    out.print(table)
    if layout.left_out:
        out.print(f"[dim]{escape(layout.left_out_line(out.width))}[/dim]", soft_wrap=True)
    if unstable := unstable_lines(report):
        for line in unstable:
            out.print(f"[bold yellow]unstable:[/bold yellow] {escape(line)}", soft_wrap=True)
        out.print(f"[bold yellow]To steady them:[/bold yellow] {ADVICE}.", soft_wrap=True)
    out.print(f"[dim]{escape(machine_line(report))}. Agreement on {escape(report['agreement_inputs'])}.[/dim]",
              soft_wrap=True)
    for line in standing_lines(report):
        out.print(escape(line), soft_wrap=True)
    for line in report.get("left_float") or []:
        out.print(f"[dim]{escape(line)}[/dim]", soft_wrap=True)
    print_layer_timing(report, out)


def unstable_lines(report: dict[str, Any]) -> list[str]:
    """The reasons of the rows' verdicts (their ``unstable``, stability.row_verdict): the machine-wide load once,
    for every row, then one line per row for the reasons of its own; what to do is said once after them
    (stability.ADVICE)."""
    rows = [row for row in report["results"] if row.get("unstable")]
    reasons = {id(row): verdict_reasons(row["unstable"]) for row in rows}
    load = list(dict.fromkeys(reason for row in rows for reason in reasons[id(row)] if is_load_reason(reason)))
    own = [(row, [reason for reason in reasons[id(row)] if not is_load_reason(reason)]) for row in rows]
    return ([f"every row: {reason}" for reason in load]
            + [f"{row['variant']} batch {row['batch']}: {'; '.join(mine)}" for row, mine in own if mine])


def speed_statement(report: dict[str, Any]) -> str:
    """What a speedup in the report is: the statistic (the same one the headline sentences quote) and its interval."""
    return (f"Speedups are against {reference_of(report)} in the same run: the median over timed rounds of the two "
            "rows' p50s paired round by round, with its 95 % bootstrap interval over the rounds (under 3 rounds: the "
            "ratio of the p50s, without an interval).")


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
    lines = ([f"{headline_prefix(entry)}, {describe_pytorch(entry)}" for entry in pytorch]
             + [f"Against the peers, {describe(entry)}" for entry in standing_of(report)])
    if unstable_lines(report):  # what to do is said once, after the unstable rows
        lines = [line.replace(f"; {ADVICE}", "") for line in lines]
    return [f"{line}." for line in lines]


def left_out_lines(report: dict[str, Any], summary: dict[str, Any] | None = None) -> list[str]:
    """What the run left out and why: the pipeline's skipped variants and stages, then bench's warnings."""
    return [*((summary or {}).get("left_out") or []), *(report.get("warnings") or [])]


def to_markdown(report: dict[str, Any]) -> str:
    settings = report["settings"]
    runs = f"{settings['iters']} timed runs" if settings.get("iters") else f"~{settings['duration']} s of runs"
    rounds = settings.get("rounds", 1)
    runs += " per variant and batch"
    if rounds > 1:
        runs += f" in {rounds} rounds taken in turn across the variants"
    speedup = ("the median over rounds of the ratio of p50s paired round by round, with its 95 % bootstrap interval "
               "over the rounds" if rounds >= MIN_ROUNDS else "the ratio of p50 latencies in the same run")
    lines = [
        f"### {report['model']['name']} — latency vs {reference_of(report)}",
        "",
        f"Machine: {machine_line(report)}.  ",
        *([f"GPU run settings: {'; '.join(report['environment']['gpu_settings'])}.  "]
          if report["environment"].get("gpu_settings") else []),
        f"Each cell: {settings['warmup']} warm-up runs discarded, then {runs}; "
        f"speedup is {speedup}. Agreement on {report['agreement_inputs']}.",
        "",
        *markdown_table(report["results"]),
    ]
    if unstable := unstable_lines(report):
        lines += ["", "Unstable rows (their rounds disagree):", "", *(f"- {line}" for line in unstable), "",
                  f"To steady them: {ADVICE}."]
    if standing := standing_lines(report):
        lines += ["", *(f"- {line}" for line in standing)]
    if left_float := report.get("left_float"):
        lines += ["", "What the INT8 files leave float, and why (their manifests):", "",
                  *(f"- {line}" for line in left_float)]
    if left_out := left_out_lines(report):
        lines += ["", "Not in this table, and why:", "", *(f"- {line}" for line in left_out)]
    lines += ["", legend_line(report["results"])]
    if layers := markdown_lines(report):
        lines += ["", *layers]
    return "\n".join(lines) + "\n"


def write_reports(report: dict[str, Any], json_path: Path | None, markdown_path: Path | None,
                  csv_path: Path | None = None) -> None:
    """The results as JSON, Markdown and CSV (report/csv_table.py), each to its file or, where named ``-``, to
    standard output."""
    from trtpipe.report.csv_table import to_csv

    kept = {key: value for key, value in report.items() if key != "runs"}  # every run's latency: the CSV's alone
    for path, text in ((json_path, lambda: json.dumps(kept, indent=2, default=str) + "\n"),
                       (markdown_path, lambda: to_markdown(report)), (csv_path, lambda: to_csv(report))):
        if path and write_output(path, text()):
            console.success(f"Wrote {path}")
