"""The report a user can trust at a glance: a variant outside the accuracy budget is marked in the table and in every
chart (never drawn like the chosen one), the accuracy-vs-latency chart's labels never pile on one another, a chart
with nothing to show is left out with one line saying why, and the results table stays inside a 1280 px page.

The verdicts come from select itself (outside_limits, choose) on bench rows shaped like PP-PicoDet's demo run, where
the fastest INT8 variant once kept 0.40 % of FP32's mAP.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.report.svg_text import group_style, overlapping, text_boxes
from tests.report.test_report import _row
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.pipeline.select import choose, outside_limits
from trtpipe.report.charts import all_charts, pareto_chart, svg_id
from trtpipe.report.html import write_report
from trtpipe.report.marks import CHOSEN_COLOR, OUTSIDE_COLOR, Marks, marks_of
from trtpipe.vocab import BackendKind, Precision, Target, Task

REFERENCE = "onnxruntime-fp32 (picodet_layout_cdla, reference)"
WITHIN = "openvino-fp16 (picodet_layout_cdla_fp16)"
CHOSEN = "openvino-int8-cpu (picodet_layout_cdla_int8_cpu)"
BROKEN = "openvino-int8-openvino (picodet_layout_cdla_int8_openvino)"  # the fastest, at 0.40 % mAP
MAP = "mAP@0.5 vs FP32"
# What select says of rows judged on point figures (a bench JSON without intervals, as these rows are).
POINT = " (point figure: no interval)"
BURST = " (the p99 of every run, no tail interval: one burst can swing it)"


def _report(batches: tuple[int, ...], variants: list[tuple[str, float, float]] | None = None) -> dict[str, Any]:
    """Bench results of a detector judged by mAP against the FP32 file's detections: (variant, p50 ms, agreement)."""
    variants = variants or [(WITHIN, 37.9, 0.9999), (CHOSEN, 28.1, 0.975), (BROKEN, 18.1, 0.004)]
    rows = []
    for batch in batches:
        rows.append(_row(REFERENCE, BackendKind.ONNXRUNTIME, Precision.FP32, batch, 62.0 * batch, reference=True,
                         speedup_vs_torch_fp32=1.0, agreement=1.0, agreement_name=MAP, task=Task.DETECT,
                         worst_output="transpose_7.tmp_0", model_size_mb=7.19, host_memory_mb=161.0))
        for variant, p50, agreement in variants:
            precision = Precision.FP16 if "fp16" in variant else Precision.INT8
            rows.append(_row(variant, BackendKind.OPENVINO, precision, batch, p50 * batch,
                             artifact=f"{variant.split()[-1].strip('()')}/1/model.onnx", target=Target.CPU,
                             speedup_vs_torch_fp32=62.0 / p50, max_abs_err=3.07, worst_output="transpose_5.tmp_0",
                             agreement=agreement, agreement_name=MAP, task=Task.DETECT, model_size_mb=2.71,
                             host_memory_mb=147.0, build_seconds=12.3))
    return {"schema": BENCH_SCHEMA, "trtpipe_version": "0.1.0",
            "environment": {"cpu": "Test CPU", "cpu_flags": ["avx2"], "cores": 2, "threads": 2, "gpu": None,
                            "os": "Linux", "python": "3.11", "versions": {"torch": "2.5", "onnxruntime": "1.20"},
                            "onnxruntime_providers": ["CPUExecutionProvider"]},
            "model": {"name": "picodet_layout_cdla", "source_kind": "onnx", "input_shape": [1, 3, 800, 608]},
            "reference": "the FP32 ONNX on ONNX Runtime CPU", "settings": {"iters": 20, "warmup": 2},
            "agreement_inputs": "16 synthetic document pages", "results": rows, "warnings": []}


def _select(report: dict[str, Any], max_accuracy_drop: float = 5.0) -> dict[str, Any]:
    """The run's summary as trtpipe run hands it to the report: select's choice and its verdicts."""
    rows = [BenchRow.from_dict(r) for r in report["results"]]
    batch = min(r.batch for r in rows)
    choice = choose(rows, batch=batch, latency_budget_ms=None, max_accuracy_drop=max_accuracy_drop)
    assert choice is not None
    return {"choice": choice.__dict__, "batch_advice": None, "left_out": [],
            "outside": outside_limits(rows, batch=batch, latency_budget_ms=None,
                                      max_accuracy_drop=max_accuracy_drop)}


def _chart_svgs(page: str) -> dict[str, str]:
    return dict(re.findall(r"<div class=chart id=chart-(\w+)>(<svg.*?</svg>)", page, re.S))


def _property(style: str, name: str) -> str:
    """One property of an SVG style attribute ("none" where it is not set)."""
    found = re.search(rf"(?:^|;)\s*{name}:\s*([^;]+)", style)
    return found.group(1).strip() if found else "none"


def _fill(style: str) -> str:
    return _property(style, "fill")


def _stroke(style: str) -> str:
    return _property(style, "stroke")


def test_a_variant_outside_the_accuracy_budget_is_marked_in_every_chart_and_the_table(tmp_path: Path) -> None:
    report = _report(batches=(1, 4))
    summary = _select(report)
    assert summary["choice"]["variant"] == CHOSEN  # the broken variant was faster, and select passed it over
    assert summary["outside"] == {BROKEN: "loses 99.60 pp > 5.0 pp (point figure: no interval)"}
    write_report(report, tmp_path / "report.html", tmp_path / "report.md", summary)
    page = (tmp_path / "report.html").read_text()

    table = page[page.index("<table id=results>"):page.index("</table>", page.index("<table id=results>"))]
    rows = {name: [r for r in table.split("<tr")[2:] if name.replace("_", "_<wbr>") in r]
            for name in (BROKEN, CHOSEN, WITHIN)}
    assert len(rows[BROKEN]) == 2 and all(r.startswith(" class=outside>") and "✗" in r
                                          and f"outside the budget: loses 99.60 pp &gt; 5.0 pp{POINT}" in r
                                          for r in rows[BROKEN])
    assert len(rows[CHOSEN]) == 2 and all(r.startswith(" class=chosen>") and "★" in r for r in rows[CHOSEN])
    assert all(r.startswith(">") for r in rows[WITHIN])  # unmarked
    assert "✗ outside the budget (accuracy, latency or memory limit it breaks in the row)" in page

    charts = _chart_svgs(page)
    assert set(charts) == {"latency", "speedup", "pareto", "batch_sweep"}
    for name in ("latency", "speedup"):
        svg, texts = charts[name], {text for text, _ in text_boxes(charts[name])}
        assert f"✗ {BROKEN}" in texts and f"★ {CHOSEN}" in texts and WITHIN in texts  # the tick labels
        for batch in (1, 4):
            broken, chosen = (group_style(svg, svg_id("bar", v, batch)) for v in (BROKEN, CHOSEN))
            within = group_style(svg, svg_id("bar", WITHIN, batch))
            assert _fill(broken).startswith("url(#h")  # hatched
            assert not _fill(chosen).startswith("url(") and _stroke(chosen) == CHOSEN_COLOR
            assert not _fill(within).startswith("url(") and _stroke(within) != CHOSEN_COLOR
    pareto = charts["pareto"]
    assert _fill(group_style(pareto, svg_id("point", BROKEN))) == OUTSIDE_COLOR
    assert _fill(group_style(pareto, svg_id("point", CHOSEN))) == CHOSEN_COLOR
    assert _fill(group_style(pareto, svg_id("point", WITHIN))) not in (OUTSIDE_COLOR, CHOSEN_COLOR)
    key = page[page.index("<table class=chart-key>"):]
    assert re.search(rf"<tr class=outside><td class=n>\d+</td><td>✗ {re.escape(BROKEN)}</td><td>18.10 ms, 0.40%",
                     key)
    sweep = charts["batch_sweep"]
    assert _stroke(group_style(sweep, svg_id("line", BROKEN))) == OUTSIDE_COLOR
    assert _stroke(group_style(sweep, svg_id("line", CHOSEN))) == CHOSEN_COLOR

    markdown = (tmp_path / "report.md").read_text()
    assert markdown.count(f"| ✗ {BROKEN} (loses 99.60 pp > 5.0 pp (point figure: no interval)) |") == 2
    assert markdown.count(f"| ★ {CHOSEN} |") == 2 and f"✗ {BROKEN}: 18.10 ms, 0.40%" in markdown
    for name in charts:
        assert (tmp_path / f"report_{name}.svg").read_text().strip() == charts[name]  # the Markdown's are the same


def test_without_a_budget_no_variant_is_marked_outside(tmp_path: Path) -> None:
    """``trtpipe report`` on bench results alone knows no budget: only the reference is marked."""
    report = _report(batches=(1,))
    write_report(report, tmp_path / "report.html")
    page = (tmp_path / "report.html").read_text()
    assert "class=outside" not in page and "✗" not in page and "class=chosen" not in page
    assert f"◆ {REFERENCE.replace('_', '_<wbr>')}" in page


def test_accuracy_vs_latency_labels_do_not_pile_on_one_another() -> None:
    """Eleven variants within a millisecond and a point of one another, as FP32 and FP16 of one model land: every
    point is numbered, and no text of any chart overlaps another (boxes computed from the SVG as drawn: tick labels,
    axis titles, legends, the numbers)."""
    crowd = [(f"openvino-fp16 (picodet_layout_cdla_fp16_{i})", 38.0 + 0.07 * i, 0.999 - 0.0004 * i)
             for i in range(8)] + [(CHOSEN, 28.1, 0.975), (BROKEN, 18.1, 0.004), (WITHIN, 38.2, 0.9996)]
    report = _report(batches=(1,), variants=crowd)
    marks = marks_of(report, _select(report))
    chart = pareto_chart(report["results"], 1, marks)
    assert chart.svg is not None
    numbers = [n for n, _, _ in chart.key]
    assert numbers == [str(i) for i in range(1, 13)] and chart.key[0][1] == REFERENCE
    labels = [text for text, _ in text_boxes(chart.svg)]
    for index, number in enumerate(numbers):
        assert f'<g id="pareto-label-{index}">' in chart.svg
        assert any(label.split()[0] == number for label in labels)
    assert "11 ▼0.4 %" in labels  # the broken variant sits on the chart's floor, its figure beside it
    two_batches = _report(batches=(1, 4))  # a latency axis over most of a decade: log ticks' labels crowd there
    for drawn in [*all_charts(report, 1, marks), *all_charts(two_batches, 1, marks_of(two_batches))]:
        if drawn.svg is not None:
            assert overlapping(text_boxes(drawn.svg)) == [], drawn.name


def test_overlap_check_finds_labels_that_pile_up() -> None:
    """The check itself: two labels drawn at one spot are found."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg"><text style="font-size: 8px" x="10" y="10">openvino-fp16</text>'
           '<text style="font-size: 8px" x="30" y="12">openvino-fp32</text></svg>')
    assert overlapping(text_boxes(svg)) == [("openvino-fp16", "openvino-fp32")]


def test_a_one_batch_run_leaves_the_batch_sweep_out_with_one_line(tmp_path: Path) -> None:
    report = _report(batches=(1,))
    (tmp_path / "report_batch_sweep.svg").write_text("<svg>an earlier run's sweep</svg>")
    write_report(report, tmp_path / "report.html", tmp_path / "report.md", _select(report))
    page, markdown = (tmp_path / "report.html").read_text(), (tmp_path / "report.md").read_text()
    line = "Batch sweep left out: the run benched one batch size (1), so there is no sweep."
    assert "id=chart-batch_sweep>" not in page and f"<p class=note id=chart-batch_sweep-left-out>{line}</p>" in page
    assert line in markdown.splitlines() and "report_batch_sweep.svg" not in markdown
    assert not (tmp_path / "report_batch_sweep.svg").exists()
    assert set(_chart_svgs(page)) == {"latency", "speedup", "pareto"}


def test_charts_without_figures_are_left_out_with_their_reason() -> None:
    report = _report(batches=(1,))
    for row in report["results"]:
        row["agreement"] = row["speedup_vs_torch_fp32"] = None
    charts = {c.name: c for c in all_charts(report, 1, Marks())}
    assert charts["latency"].svg is not None
    assert charts["speedup"].svg is None and charts["speedup"].left_out == (
        "Speedup over the FP32 ONNX left out: no variant besides the reference has a speedup figure.")
    assert charts["pareto"].svg is None and charts["pareto"].left_out == (
        "Accuracy vs latency left out: no row at batch 1 has an accuracy or agreement figure.")


def test_results_table_scrolls_in_its_own_box(tmp_path: Path) -> None:
    report = _report(batches=(1,))
    write_report(report, tmp_path / "report.html", summary=_select(report))
    page = (tmp_path / "report.html").read_text()
    assert "<div class=table-box><table id=results>" in page and ".table-box{max-width:100%;overflow-x:auto}" in page
    assert "transpose_<wbr>5.<wbr>tmp_<wbr>0" in page  # long identifiers may wrap at their separators


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed here")
def test_report_check_in_chromium_page_fits_1280_px_and_no_chart_text_overlaps(tmp_path: Path) -> None:
    """make report-check's script on the PicoDet-shaped report: Chromium's own layout and font metrics."""
    report = _report(batches=(1, 4))
    folder = tmp_path / "picodet_layout_cdla"
    folder.mkdir()
    write_report(report, folder / "report.html", summary=_select(report))
    script = Path(__file__).parents[2] / "scripts" / "report_check.py"
    result = subprocess.run([sys.executable, str(script), str(folder / "report.html")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 charts, 1280 px wide at 1280 px, 0 overlapping texts" in result.stdout
    assert (folder / "report.png").stat().st_size > 50_000


def test_select_marks_what_breaks_a_limit_and_says_which() -> None:
    """What the report marks comes from select's own limits: a simulation's accuracy counts (it is the arithmetic
    of the runtime it stands for), its latency does not; every limit a variant breaks is named."""
    report = _report(batches=(1, 4))
    rows = [BenchRow.from_dict(r) for r in report["results"]]
    for row in rows:
        if row.variant == WITHIN:
            row.simulated = True  # e.g. the TensorRT FP16 simulation on the CPU: never deployable
    outside = outside_limits(rows, batch=1, latency_budget_ms=30.0, max_accuracy_drop=2.0)
    assert outside == {BROKEN: f"loses 99.60 pp > 2.0 pp{POINT}",
                       CHOSEN: f"p99 36.53 ms > 30.0 ms{BURST}; loses 2.50 pp > 2.0 pp{POINT}"}
    # At batch 4 the simulated FP16 row's p99 (197 ms) is over the budget too, but no one would deploy it.
    assert outside_limits(rows, batch=4, latency_budget_ms=100.0, max_accuracy_drop=None) == {
        CHOSEN: f"p99 146.12 ms > 100.0 ms{BURST}"}
    assert outside_limits(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None) == {}


def test_a_simulation_is_drawn_for_its_accuracy_alone(tmp_path: Path) -> None:
    """A -trtsim row's latency is not the runtime's it simulates: no bar, no speedup, no sweep line, no point on the
    latency axis, blank latency cells; its accuracy is a dotted level in the accuracy chart, keyed like a point."""
    report = _report(batches=(1, 4))
    for row in report["results"]:
        if row["variant"] == WITHIN:
            row["simulated"] = True
    write_report(report, tmp_path / "report.html", tmp_path / "report.md", _select(report))
    page, markdown = (tmp_path / "report.html").read_text(), (tmp_path / "report.md").read_text()
    charts = _chart_svgs(page)
    for batch in (1, 4):
        assert svg_id("bar", WITHIN, batch) not in charts["latency"] + charts["speedup"]
        assert svg_id("bar", CHOSEN, batch) in charts["latency"] and svg_id("bar", CHOSEN, batch) in charts["speedup"]
    assert svg_id("line", WITHIN) not in charts["batch_sweep"] and svg_id("point", WITHIN) not in charts["pareto"]
    assert svg_id("level", WITHIN) in charts["pareto"] and svg_id("point", CHOSEN) in charts["pareto"]
    for name in ("latency", "speedup", "batch_sweep"):
        assert re.search(rf"<p class=note id=chart-{name}-note>Not drawn here \(accuracy only: .*{re.escape(WITHIN)}",
                         page.replace("_<wbr>", "_"))
    assert re.search(rf"<td>{re.escape(WITHIN)}</td><td>accuracy only, 99\.99% \(a simulation: no latency\)", page)
    table = page[page.index("<table id=results>"):page.index("</table>", page.index("<table id=results>"))]
    simulated = [r for r in table.split("<tr")[2:] if WITHIN.replace("_", "_<wbr>") in r]
    assert len(simulated) == 2 and all("accuracy only (simulation)" in r and "<td class=n>–</td>" in r
                                       and "99.99%" in r for r in simulated)
    lines = [line for line in markdown.splitlines() if line.startswith(f"| {WITHIN} |")]
    assert len(lines) == 2 and all(line.split(" | ")[3:5] == ["–", "–"] for line in lines)  # latency cells blank
    assert "Drawn for their accuracy alone (accuracy only: a simulation" in markdown and WITHIN in markdown


@pytest.mark.parametrize(("choice", "status", "heading"), [
    ({"variant": CHOSEN, "artifact": "a.onnx", "reason": "fastest", "status": "chosen"}, "chosen", f"Chosen: {CHOSEN}"),
    ({"variant": "none", "artifact": None, "reason": "could not decide: x too noisy", "status": "undecided"},
     "undecided", "Nothing chosen: undecided"),
    ({"variant": "none", "artifact": None, "reason": "no variant meets the budget: x"}, "none", "Nothing chosen"),
    ({"variant": CHOSEN, "artifact": "a.onnx", "reason": "fastest; chosen under load (x)", "status": "chosen",
      "flagged": "chosen under load (x): rerun with `--rebench` on a quieter machine"}, "chosen flagged",
     f"Chosen under load: {CHOSEN}"),
    ({"variant": CHOSEN, "artifact": "a.onnx", "reason": "fastest; UNDECIDED: loses nothing (drop 95 % CI +0.00 to "
      "+10.72 pp on 32 samples): within 0.5 pp on the best estimate", "status": "chosen", "undecided": ["accuracy"]},
     "chosen flagged", f"Chosen, undecided on accuracy: {CHOSEN}"),
])
def test_the_choice_box_is_green_only_when_something_was_chosen(choice: dict[str, Any], status: str, heading: str,
                                                                tmp_path: Path) -> None:
    report = _report(batches=(1,))
    summary = {"choice": choice, "batch_advice": None, "outside": {}, "decide": "To decide: measure again."}
    write_report(report, tmp_path / "report.html", tmp_path / "report.md", summary)
    page = (tmp_path / "report.html").read_text()
    assert f'<p class="choice {status}" id=choice><b>{heading}</b>' in page and "To decide: measure again." in page
    assert "Chosen: none" not in page and "Chosen: none" not in (tmp_path / "report.md").read_text()
    css = {"chosen": "#eef7ee", "undecided": "#fff8e1", "none": "#f4f4f4", "chosen flagged": "#fff8e1"}[status]
    selector = {"chosen": "", "chosen flagged": r"\.flagged,\.choice\.undecided"}.get(status, rf"\.{status}")
    assert re.search(r"\.choice" + selector + r"\{background:" + css, page)


def test_an_undecided_variant_is_drawn_and_named_undecided_never_within_the_budget(tmp_path: Path) -> None:
    """A variant whose accuracy interval straddles the limit is neither within the budget nor outside it: the
    accuracy chart's legend and point, and the table, say "undecided" with the limit that could not be judged."""
    from trtpipe.intervals import Interval
    from trtpipe.pipeline.select import undecided_limits

    report = _report(batches=(1,))
    for row in report["results"]:
        if row["variant"] == WITHIN:
            row["agreement"], row["agreement_interval"] = 0.96, Interval(0.90, 0.99, 16, "wilson").to_dict()
    rows = [BenchRow.from_dict(r) for r in report["results"]]
    summary = _select(report) | {"undecided": undecided_limits(rows, batch=1, latency_budget_ms=None,
                                                               max_accuracy_drop=5.0)}
    assert list(summary["undecided"]) == [WITHIN] and "straddles 5.0 pp" in summary["undecided"][WITHIN]
    write_report(report, tmp_path / "report.html", tmp_path / "report.md", summary)
    page = (tmp_path / "report.html").read_text()
    pareto = _chart_svgs(page)["pareto"]
    assert "? undecided (a limit could not be judged)" in pareto
    assert _property(group_style(pareto, svg_id("point", WITHIN)), "stroke") == "#e0a000"
    assert f"? {WITHIN}" in page and "undecided: " in page
    assert re.search(r">\s*within the budget\s*<", pareto) is None  # no point is labelled within the budget
