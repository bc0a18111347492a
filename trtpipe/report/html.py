"""``trtpipe report``: one self-contained HTML file (and the same content as Markdown) from bench results.

The HTML inlines its CSS and its charts (SVG from matplotlib), so it opens anywhere with no network. The
Markdown, for pull requests, carries the same tables and links the same charts saved as SVG files beside it.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path
from typing import Any

from trtpipe.bench.rows import BENCH_SCHEMA
from trtpipe.errors import BadInput
from trtpipe.files import write_text_atomic
from trtpipe.report.columns import cell, legend, legend_line, markdown_table, present_columns
from trtpipe.report.layer_timing import html_section, markdown_lines
from trtpipe.report.tables import left_out_lines, machine_line, reference_of, standing_lines

CHART_TITLES = {"latency": "Latency by variant and batch", "speedup": "Speedup over {reference}",
                "pareto": "Accuracy vs latency", "batch_sweep": "Batch sweep"}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}td,th{padding:.25rem .6rem;border-bottom:1px solid #eee}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums}
.charts{display:grid;grid-template-columns:1fr;gap:1rem}.chart svg{max-width:100%;height:auto}
.note{color:#555;font-size:.85rem}.choice{background:#eef7ee;padding:.6rem 1rem;border-left:4px solid #4a4}
.legend{color:#555;font-size:.8rem}.legend dt{font-weight:600;float:left;clear:left;margin-right:.4rem}
.legend dt:after{content:":"}.legend dd{margin:0 0 .15rem 0}
"""


def load_results(path: Path) -> dict[str, Any]:
    if not Path(path).is_file():
        raise BadInput(f"Results file {path} does not exist.")
    try:
        report = json.loads(Path(path).read_text())
    except ValueError as error:
        raise BadInput(f"{path} is not JSON ({error}).") from None
    if not isinstance(report, dict) or report.get("schema") != BENCH_SCHEMA:
        found = report.get("schema") if isinstance(report, dict) else None
        raise BadInput(f"{path} has results layout {found!r}, not {BENCH_SCHEMA!r}: it was written by another (older) "
                       "trtpipe; rerun 'trtpipe bench' to produce it again.")
    return report


def render_html(report: dict[str, Any], charts: dict[str, str], summary: dict[str, Any] | None = None) -> str:
    rows, columns = report["results"], present_columns(report["results"])
    model, env = report["model"], report["environment"]
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>trtpipe report: "
             f"{html.escape(model['name'])}</title><style>{CSS}</style></head><body>",
             f"<h1>trtpipe report — {html.escape(model['name'])}</h1>",
             f"<p class=note>Generated {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by trtpipe "
             f"{html.escape(str(report.get('trtpipe_version')))}. Speedups are ratios of p50 latency against "
             f"{html.escape(reference_of(report))} measured in the same run. Agreement on "
             f"{html.escape(report.get('agreement_inputs', ''))}."
             "</p>"]
    if summary and summary.get("choice"):
        choice = summary["choice"]
        parts.append(f"<p class=choice><b>Chosen: {html.escape(choice['variant'])}</b> — "
                     f"{html.escape(choice['reason'])}")
        if summary.get("batch_advice"):
            parts.append(f"<br>Batch advice: {html.escape(summary['batch_advice']['reason'])}")
        parts.append("</p>")
    if left_out := left_out_lines(report, summary):
        parts.append("<h2>Not in this report, and why</h2><ul class=note>"
                     + "".join(f"<li>{html.escape(line)}</li>" for line in left_out) + "</ul>")
    parts.append("<h2>Environment</h2><table>")
    facts = [("Machine", machine_line(report)), ("OS", env.get("os")), ("Python", env.get("python")),
             ("ONNX Runtime providers", ", ".join(env.get("onnxruntime_providers", []))),
             ("Model", f"{model['name']} ({model.get('source_kind')}, "
                       + (f"{model['parameters']:,} parameters, " if model.get("parameters") is not None else "")
                       + f"input {'x'.join(map(str, model.get('input_shape', [])))})")]
    parts += [f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts]
    parts.append("</table><h2>Results</h2><table><tr>" + "".join(
        f"<th title=\"{html.escape(c.meaning)}\">{c.header}</th>" if c.meaning else f"<th>{c.header}</th>"
        for c in columns) + "</tr>")
    for row in rows:
        cells = "".join(f"<td{'' if column.text else ' class=n'}>{html.escape(cell(row, column))}</td>"
                        for column in columns)
        parts.append(f"<tr>{cells}</tr>")
    parts.append("</table>")
    parts += [f"<p class=standing>{html.escape(line)}</p>" for line in standing_lines(report)]
    notes = sorted({r["note"] for r in rows if r.get("note")})
    parts += [f"<p class=note>{html.escape(n)}</p>" for n in notes]
    parts.append("<dl class=legend>" + "".join(
        f"<dt>{html.escape(term)}</dt><dd>{html.escape(meaning)}</dd>"
        for term, meaning in legend(rows)) + "</dl>")
    parts.append(html_section(report))
    parts.append("<h2>Charts</h2><div class=charts>")
    parts += [f"<div class=chart id=chart-{name}>{svg}</div>" for name, svg in charts.items()]
    parts.append("</div></body></html>\n")
    return "".join(parts)


def render_markdown(report: dict[str, Any], chart_files: dict[str, str], summary: dict[str, Any] | None = None) -> str:
    rows = report["results"]
    lines = [f"## trtpipe report — {report['model']['name']}", "", f"Machine: {machine_line(report)}.  ",
             f"Speedups are ratios of p50 latency against {reference_of(report)} in the same run; agreement on "
             f"{report.get('agreement_inputs', '')}.", ""]
    if summary and summary.get("choice"):
        lines += [f"**Chosen: {summary['choice']['variant']}** — {summary['choice']['reason']}", ""]
        if summary.get("batch_advice"):
            lines += [f"Batch advice: {summary['batch_advice']['reason']}", ""]
    if left_out := left_out_lines(report, summary):
        lines += ["Not in this report, and why:", "", *(f"- {line}" for line in left_out), ""]
    lines += [*markdown_table(rows), ""]
    if standing := standing_lines(report):
        lines += [*(f"- {line}" for line in standing), ""]
    lines += [legend_line(rows), ""]
    if layers := markdown_lines(report):
        lines += layers
    reference = str(report.get("reference") or "PyTorch FP32")
    lines += [f"![{CHART_TITLES[name].format(reference=reference)}]({file})" for name, file in chart_files.items()]
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], html_path: Path, markdown_path: Path | None = None,
                 summary: dict[str, Any] | None = None, batch: int | None = None) -> None:
    from trtpipe.report.charts import all_charts

    charts = all_charts(report, batch or min(r["batch"] for r in report["results"]))
    write_text_atomic(html_path, render_html(report, charts, summary))
    if markdown_path:
        files = {}
        for name, svg in charts.items():
            chart_path = markdown_path.with_name(f"{markdown_path.stem}_{name}.svg")
            write_text_atomic(chart_path, svg)
            files[name] = chart_path.name
        write_text_atomic(markdown_path, render_markdown(report, files, summary))
