"""``trtpipe report``: one self-contained HTML file (and the same content as Markdown) from bench results.

The HTML inlines its CSS and its charts (SVG from matplotlib), so it opens anywhere with no network. The
Markdown, for pull requests, carries the same tables and links the same charts saved as SVG files beside it.
Both mark the chosen variant and every variant outside the budget (trtpipe.report.marks) in the table and in every
chart, say in one line why a chart that would be empty is left out, and keep the results table inside the page (it
scrolls in its own box where its columns are wider than the page).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtpipe.bench.rows import BENCH_SCHEMA
from trtpipe.bench.stability import ADVICE
from trtpipe.errors import BadInput
from trtpipe.files import write_text_atomic
from trtpipe.report.columns import cell, legend, legend_line, markdown_table, present_columns
from trtpipe.report.layer_timing import html_section, markdown_lines
from trtpipe.report.marks import ACCURACY_ONLY, Marks, Standing, accuracy_only, as_drawn, choice_status, marks_of
from trtpipe.report.tables import (
    left_out_lines,
    machine_line,
    speed_statement,
    standing_lines,
    unstable_lines,
)

if TYPE_CHECKING:
    from trtpipe.report.charts import Chart  # charts imports matplotlib: only write_report needs it at run time

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222;
padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}td,th{padding:.25rem .6rem;border-bottom:1px solid #eee}
th{text-align:left;background:#f6f6f6}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td{overflow-wrap:break-word}.table-box{max-width:100%;overflow-x:auto}
#results{font-size:.8rem}#results td,#results th{padding:.25rem .4rem}#results td.variant{min-width:12rem}
tr.outside td{color:#777;background:repeating-linear-gradient(135deg,#fff 0 6px,#f1f1f1 6px 12px)}
tr.chosen td{background:#eef7ee}tr.chosen td.variant{font-weight:600;color:#1b5e20}
.mark{display:block;font-size:.75rem;font-weight:400}
.charts{display:grid;grid-template-columns:1fr;gap:1rem}.chart svg{max-width:100%;height:auto}
.chart-key td,.chart-key th{padding:.1rem .5rem}
.note{color:#555;font-size:.85rem}.choice{background:#eef7ee;padding:.6rem 1rem;border-left:4px solid #4a4}
.choice.flagged,.choice.undecided{background:#fff8e1;border-left-color:#e0a000}
.choice.none{background:#f4f4f4;border-left-color:#888}
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
        kind = str(found).split("/")[0].removeprefix("trtpipe.") if str(found).startswith("trtpipe.") else None
        if kind and kind != "bench":  # another trtpipe record (a manifest, a sidecar): not an older bench JSON
            raise BadInput(f"{path} is trtpipe's {kind} record ({found}), not bench results: give 'trtpipe report' "
                           "the JSON 'trtpipe bench --json FILE' wrote (or reports/<model>/bench.json from 'trtpipe "
                           "run').")
        raise BadInput(f"{path} has results layout {found!r}, not {BENCH_SCHEMA!r}: it was written by another (older) "
                       "trtpipe; rerun 'trtpipe bench' to produce it again.")
    return report


def _breakable(text: str) -> str:
    """Escaped ``text`` that may wrap after ``_`` and ``.`` (variant and output names are long identifiers)."""
    return html.escape(text).replace("_", "_<wbr>").replace(".", ".<wbr>")


def _choice_heading(choice: dict[str, Any]) -> str:
    """The choice box's heading: what was chosen, or that nothing was and whether noise is why."""
    status = choice_status(choice)
    if status == "chosen" and choice.get("flagged"):
        return f"Chosen under load: {choice['variant']}" if "under load" in str(choice["flagged"]) \
            else f"Chosen from an unstable measurement: {choice['variant']}"
    if status == "chosen" and "accuracy" in (choice.get("undecided") or ()):
        return f"Chosen, undecided on accuracy: {choice['variant']}"  # within the limit on the best estimate only
    if status == "chosen":
        return f"Chosen: {choice['variant']}"
    return "Nothing chosen: undecided" if status == "undecided" else "Nothing chosen"


def _accuracy_only_line(rows: list[dict[str, Any]]) -> str | None:
    """One line naming the rows drawn for their accuracy alone (their latency cells blank), or None."""
    names = list(dict.fromkeys(r["variant"] for r in rows if accuracy_only(r)))
    return f"Drawn for their accuracy alone ({ACCURACY_ONLY}): {', '.join(names)}." if names else None


def _results_table(rows: list[dict[str, Any]], marks: Marks) -> list[str]:
    """The results table in its own scrolling box (a wide table never widens the page), each row marked by its
    variant's standing: a marker and the reason in the variant's cell, and the row's class."""
    columns = present_columns(rows)
    rows = as_drawn(rows)
    parts = ["<div class=table-box><table id=results><tr>" + "".join(
        f"<th title=\"{html.escape(c.meaning)}\">{c.header}</th>" if c.meaning else f"<th>{c.header}</th>"
        for c in columns) + "</tr>"]
    for row in rows:
        standing = marks.standing(row["variant"])
        cells = []
        simulation = "<span class=mark>accuracy only (simulation)</span>" if accuracy_only(row) else ""
        for column in columns:
            text = _breakable(cell(row, column)) if column.text else html.escape(cell(row, column))
            if column.key == "variant" and (standing is not Standing.WITHIN or simulation):
                note = marks.note(row["variant"])
                cells.append(f"<td class=variant>{_breakable(marks.label(row['variant']))}"
                             + (f"<span class=mark>{html.escape(note)}</span>" if note else "")
                             + f"{simulation}</td>")
            else:
                cells.append(f"<td class=variant>{text}</td>" if column.key == "variant"
                             else f"<td{'' if column.text else ' class=n'}>{text}</td>")
        marked = standing in (Standing.CHOSEN, Standing.OUTSIDE)
        parts.append(f"<tr class={standing.name.lower()}>" if marked else "<tr>")
        parts.append("".join(cells) + "</tr>")
    parts.append("</table></div>")
    parts += [f"<p class=legend>{html.escape(line)}</p>" for line in marks.key_lines()]
    return parts


def _chart_html(chart: Chart, marks: Marks) -> str:
    if chart.svg is None:
        return f"<p class=note id=chart-{chart.name}-left-out>{html.escape(chart.left_out or '')}</p>"
    key = ""
    if chart.key:
        key = ("<div class=table-box><table class=chart-key><tr><th>#</th><th>Variant</th><th>Figures</th>"
               "<th></th></tr>"
               + "".join(f"<tr class={marks.standing(v).name.lower()}><td class=n>{html.escape(n)}</td>"
                         f"<td>{html.escape(marks.label(v))}</td><td>{html.escape(figures)}</td>"
                         f"<td>{html.escape(marks.note(v))}</td></tr>"
                         for n, v, figures in chart.key) + "</table></div>")
    note = f"<p class=note id=chart-{chart.name}-note>{html.escape(chart.note)}</p>" if chart.note else ""
    return f"<div class=chart id=chart-{chart.name}>{chart.svg}</div>{note}{key}"


def render_html(report: dict[str, Any], charts: Sequence[Chart], summary: dict[str, Any] | None = None) -> str:
    rows = report["results"]
    model, env = report["model"], report["environment"]
    marks = marks_of(report, summary)
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8>"
             f"<meta name=viewport content=\"width=device-width,initial-scale=1\"><title>trtpipe report: "
             f"{html.escape(model['name'])}</title><style>{CSS}</style></head><body>",
             f"<h1>trtpipe report — {html.escape(model['name'])}</h1>",
             f"<p class=note>Generated {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC by trtpipe "
             f"{html.escape(str(report.get('trtpipe_version')))}. {html.escape(speed_statement(report))} Agreement on "
             f"{html.escape(report.get('agreement_inputs', ''))}."
             "</p>"]
    if summary and summary.get("choice"):
        choice = summary["choice"]
        amber = choice.get("flagged") or "accuracy" in (choice.get("undecided") or ())
        status = choice_status(choice) + (" flagged" if amber else "")  # flagged or undecided on accuracy: amber
        parts.append(f"<p class=\"choice {status}\" id=choice><b>{html.escape(_choice_heading(choice))}</b> — "
                     f"{html.escape(choice['reason'])}")
        if summary.get("decide"):
            parts.append(f"<br>{html.escape(summary['decide'])}")
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
    if env.get("gpu_settings"):  # how the GPU rows ran where it matters for a comparison
        facts.append(("GPU run settings", "; ".join(env["gpu_settings"])))
    parts += [f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts]
    parts.append("</table><h2>Results</h2>")
    parts += _results_table(rows, marks)
    if simulated := _accuracy_only_line(rows):
        parts.append(f"<p class=note id=accuracy-only>{html.escape(simulated)}</p>")
    parts += [f"<p class=standing>{html.escape(marks.flag(line))}</p>" for line in standing_lines(report)]
    if unstable := unstable_lines(report):
        parts.append("<p class=\"choice undecided\" id=unstable><b>Unstable timings</b><br>"
                     + "<br>".join(html.escape(line) for line in unstable)
                     + f"<br>What to do: {html.escape(ADVICE)}.</p>")
    notes = sorted({r["note"] for r in rows if r.get("note")})
    parts += [f"<p class=note>{html.escape(n)}</p>" for n in notes]
    parts.append("<dl class=legend>" + "".join(
        f"<dt>{html.escape(term)}</dt><dd>{html.escape(meaning)}</dd>"
        for term, meaning in legend(rows)) + "</dl>")
    parts.append(html_section(report))
    parts.append("<h2>Charts</h2><div class=charts>")
    parts += [_chart_html(chart, marks) for chart in charts]
    parts.append("</div></body></html>\n")
    return "".join(parts)


def render_markdown(report: dict[str, Any], chart_files: dict[str, str], summary: dict[str, Any] | None = None,
                    charts: Sequence[Chart] = ()) -> str:
    """``chart_files``: chart name -> the SVG file beside the Markdown, for each of ``charts`` drawn (the others get
    their line saying why they were left out)."""
    rows = report["results"]
    marks = marks_of(report, summary)
    lines = [f"## trtpipe report — {report['model']['name']}", "", f"Machine: {machine_line(report)}.  ",
             f"{speed_statement(report)} Agreement on {report.get('agreement_inputs', '')}.", ""]
    if summary and summary.get("choice"):
        lines += [f"**{_choice_heading(summary['choice'])}** — {summary['choice']['reason']}", ""]
        if summary.get("decide"):
            lines += [summary["decide"], ""]
        if summary.get("batch_advice"):
            lines += [f"Batch advice: {summary['batch_advice']['reason']}", ""]
    if left_out := left_out_lines(report, summary):
        lines += ["Not in this report, and why:", "", *(f"- {line}" for line in left_out), ""]
    lines += [*markdown_table(as_drawn(rows), marks), ""]
    if simulated := _accuracy_only_line(rows):
        lines += [simulated, ""]
    if key := marks.key_lines():
        lines += ["  \n".join(key), ""]
    if standing := standing_lines(report):
        lines += [*(f"- {marks.flag(line)}" for line in standing), ""]
    if unstable := unstable_lines(report):
        lines += ["**Unstable timings:**", "", *(f"- {line}" for line in unstable), "", f"What to do: {ADVICE}.", ""]
    lines += [legend_line(rows), ""]
    if layers := markdown_lines(report):
        lines += layers
    for chart in charts:
        if chart.name not in chart_files:
            lines += [chart.left_out or "", ""]
            continue
        lines += [f"![{chart.title}]({chart_files[chart.name]})", ""]
        if chart.note:
            lines += [chart.note, ""]
        if chart.key:
            lines += [*(f"{n}. {marks.label(v)}: {figures}" + (f" ({marks.note(v)})" if marks.note(v) else "")
                        for n, v, figures in chart.key), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_report(report: dict[str, Any], html_path: Path, markdown_path: Path | None = None,
                 summary: dict[str, Any] | None = None, batch: int | None = None) -> list[str]:
    """The HTML (and Markdown with its SVGs); returns the titles of the charts drawn (the others' lines say why
    they were left out)."""
    from trtpipe.report.charts import all_charts

    charts = all_charts(report, batch or min(r["batch"] for r in report["results"]), marks_of(report, summary))
    write_text_atomic(html_path, render_html(report, charts, summary))
    if markdown_path:
        files = {}
        for chart in charts:
            chart_path = markdown_path.with_name(f"{markdown_path.stem}_{chart.name}.svg")
            if chart.svg is None:
                chart_path.unlink(missing_ok=True)  # an earlier run's chart would contradict the line saying why
                continue
            write_text_atomic(chart_path, chart.svg)
            files[chart.name] = chart_path.name
        write_text_atomic(markdown_path, render_markdown(report, files, summary, charts))
    return [chart.title for chart in charts if chart.svg is not None]
