"""Reports as a reader gets them, from one small bench-results dictionary: every row in every format, only the
columns that have figures, the legend that says what each figure is, and what the run left out."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import error_line
from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.bench.timing import LatencyStats
from trtpipe.report.charts import Chart
from trtpipe.report.columns import COLUMNS
from trtpipe.report.html import load_results, render_html
from trtpipe.report.tables import print_table, to_markdown, write_reports
from trtpipe.vocab import BackendKind, Device, Precision, Target

SKIPPED = "OpenVINO rows skipped: OpenVINO is not installed (pip install 'trtpipe[openvino]')."


def _row(variant: str, backend: BackendKind, precision: Precision, batch: int, p50: float,
         **extra: Any) -> dict[str, Any]:
    latency = LatencyStats(iters=20, p50_ms=p50, p90_ms=p50 * 1.1, p99_ms=p50 * 1.3, mean_ms=p50 * 1.05,
                           std_ms=p50 * 0.05, min_ms=p50 * 0.9, max_ms=p50 * 1.5, throughput=batch * 1000 / p50)
    return BenchRow(variant=variant, backend=backend, precision=precision, device=Device.CPU, batch=batch,
                    latency=latency, agreement_samples=847, **extra).to_dict()


@pytest.fixture()
def report() -> dict[str, Any]:
    rows = []
    for batch, scale in ((1, 1.0), (8, 3.0)):
        rows.append(_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, batch, 2.0 * scale,
                         speedup_vs_torch_fp32=1.0, agreement=1.0, top1_accuracy=0.97))
        rows.append(_row("onnxruntime-int8", BackendKind.ONNXRUNTIME, Precision.INT8, batch, 0.5 * scale,
                         artifact="model_int8.onnx", target=Target.CPU, speedup_vs_torch_fp32=4.0,
                         max_abs_err=0.02, agreement=0.99, top1_accuracy=0.965, model_size_mb=0.31,
                         host_memory_mb=42.0))
    return {
        "schema": BENCH_SCHEMA,
        "trtpipe_version": "0.1.0",
        "environment": {"cpu": "Test CPU", "cpu_flags": ["avx2"], "cores": 2, "threads": 2, "gpu": None,
                        "os": "Linux", "python": "3.11", "versions": {"torch": "2.5", "onnxruntime": "1.20"},
                        "onnxruntime_providers": ["CPUExecutionProvider"]},
        "model": {"name": "digits_resnet", "source_kind": "trained", "parameters": 1234,
                  "input_shape": [1, 1, 32, 32]},
        "settings": {"iters": 20, "warmup": 2, "duration": 5.0},
        "agreement_inputs": "847 held-out digits",
        "results": rows,
        "warnings": [SKIPPED],
    }


def _columns(shown: bool) -> list[str]:
    """Headers of the columns the fixture's rows have figures for (shown) or lack entirely."""
    keys_with_values = {"p50_ms", "p90_ms", "p99_ms", "mean_ms", "throughput", "speedup_vs_torch_fp32",
                        "max_abs_err", "agreement", "top1_accuracy", "model_size_mb", "host_memory_mb"}
    return [c.header for c in COLUMNS if (c.always or c.key in keys_with_values) == shown]


def test_markdown_has_every_row_the_present_columns_and_their_legend(report: dict[str, Any]) -> None:
    markdown = to_markdown(report)
    lines = markdown.splitlines()
    header = next(line for line in lines if line.startswith("| Variant |"))
    assert [h.strip() for h in header.strip("|").split("|")] == _columns(shown=True)
    for start in ("| pytorch-fp32 | fp32 | 1 | 2.00 |", "| onnxruntime-int8 | int8 | 8 | 1.50 |"):
        assert any(line.startswith(start) for line in lines), start
    assert sum(line.startswith("| onnxruntime-int8 |") for line in lines) == 2
    legend = next(line for line in lines if line.startswith("Columns: "))
    for column in COLUMNS:
        if column.meaning:
            assert (f"{column.header}: {column.meaning}" in legend) == (column.header in _columns(shown=True))
    assert "Not in this table, and why:" in markdown and f"- {SKIPPED}" in lines
    assert "Test CPU (avx2; 2 cores, 2 threads used, no GPU)" in markdown


def test_html_has_every_row_the_legend_and_escapes_names(report: dict[str, Any]) -> None:
    report["results"][0]["variant"] = "pytorch-fp32 <b>"
    page = render_html(report, [Chart("latency", "Latency", "<svg>chart</svg>")])
    assert page.count("<td class=variant>onnxruntime-int8</td>") == 2
    assert "<td class=variant>pytorch-fp32 &lt;b&gt;</td>" in page and "pytorch-fp32 <b>" not in page
    for header in _columns(shown=True):
        assert f">{header}</th>" in page
    for header in _columns(shown=False):
        assert f">{header}</th>" not in page
    for column in COLUMNS:
        if column.meaning and column.header in _columns(shown=True):
            assert f"<dt>{column.header}</dt><dd>{html.escape(column.meaning)}</dd>" in page
    assert "Not in this report, and why" in page and html.escape(SKIPPED) in page
    assert "<div class=chart id=chart-latency><svg>chart</svg></div>" in page


def test_terminal_table_shows_every_variant_and_the_machine(report: dict[str, Any],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    print_table(report)
    shown = capsys.readouterr().out
    assert "digits_resnet — latency vs PyTorch FP32 eager" in shown
    rows = "\n".join(line for line in shown.splitlines() if line.startswith("│"))
    assert rows.count("onnxruntime-int8") == 2 and rows.count("pytorch-fp32") == 2
    assert "Test CPU" in shown and "847 held-out digits" in shown
    assert "Against PyTorch, cpu batch 1: trtpipe's fastest" in shown  # the standing line under the table


def test_bench_files_read_back(report: dict[str, Any], tmp_path: Path) -> None:
    """bench --json/--markdown: the JSON is what `trtpipe report` reads, the Markdown is the table above."""
    json_path, markdown_path = tmp_path / "bench.json", tmp_path / "bench.md"
    write_reports(report, json_path, markdown_path)
    assert load_results(json_path) == json.loads(json.dumps(report))
    assert markdown_path.read_text() == to_markdown(report)


def test_report_command_writes_html_markdown_and_charts(report: dict[str, Any], tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "bench.json"
    results.write_text(json.dumps(report))
    result = run_cli("report", results, "-o", tmp_path / "report.html", "--markdown", tmp_path / "report.md")
    assert result.exit_code == 0, result.output
    page = (tmp_path / "report.html").read_text()
    markdown = (tmp_path / "report.md").read_text()
    for chart in ("latency", "speedup", "pareto", "batch_sweep"):
        assert f"id=chart-{chart}><svg" in page  # inlined: the page needs no other file
        assert f"](report_{chart}.svg)" in markdown
        assert (tmp_path / f"report_{chart}.svg").read_text().startswith("<svg")
    assert "| onnxruntime-int8 | int8 | 1 |" in markdown and "Columns: " in markdown
    said = " ".join(result.output.split())  # what was written, not only the file's name
    assert f"Wrote {tmp_path / 'report.html'} and {tmp_path / 'report.md'}: digits_resnet, 4 rows, 4 charts (" in said


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "is not JSON"),
    (json.dumps({"schema": "trtpipe.bench/1", "results": []}), "has results layout 'trtpipe.bench/1'"),
])
def test_report_refuses_what_bench_did_not_write(content: str, message: str, tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    results = tmp_path / "bench.json"
    results.write_text(content)
    result = run_cli("report", results, "-o", tmp_path / "report.html")
    assert result.exit_code == 1 and message in error_line(result.output)
    assert not (tmp_path / "report.html").exists()


def test_unstable_rows_are_named_with_what_to_do_in_html_and_markdown(report: dict[str, Any]) -> None:
    """A row whose rounds disagreed is said to be unstable in every format, with the advice once; a steady report
    says nothing of the kind."""
    from trtpipe.bench.stability import ADVICE
    from trtpipe.report.html import render_markdown

    assert "Unstable timings" not in render_html(report, [])
    report["results"][1]["unstable"] = f"its 95 % interval reaches 41 % from its figure; {ADVICE}"
    page = render_html(report, [])
    assert "<b>Unstable timings</b><br>onnxruntime-int8 batch 1: its 95 % interval reaches 41 %" in page
    assert page.count(html.escape(ADVICE)) == 1
    markdown = render_markdown(report, {})
    assert "- onnxruntime-int8 batch 1: its 95 % interval reaches 41 % from its figure" in markdown
    assert f"What to do: {ADVICE}." in markdown
