"""One bench result through every renderer: the terminal table, bench.md, the HTML, the speedup chart and the JSON
give each row the same speedup, the same interval and the same stability verdict (the issue this answers: a row
`steady` in the table beside a headline calling it `unstable`).

The rows are made as bench makes them: timed rounds, their medians and intervals (stability.median_over_rounds),
the speedups paired round by round and each row's verdict (runner._speedups, runner.verdicts), here with the
other-load share a busy machine gives and without it.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from trtpipe.bench.rows import BENCH_SCHEMA, BenchRow
from trtpipe.bench.runner import _speedups, verdicts
from trtpipe.bench.stability import median_over_rounds, verdict_word
from trtpipe.bench.standing import pytorch_standing
from trtpipe.bench.timing import LatencyStats
from trtpipe.intervals import wilson
from trtpipe.report.charts import all_charts, svg_id
from trtpipe.report.columns import speedup_text
from trtpipe.report.html import load_results, render_html
from trtpipe.report.tables import print_table, write_reports
from trtpipe.vocab import BackendKind, Device, Precision

SVG = "{http://www.w3.org/2000/svg}"


def _row(variant: str, backend: BackendKind, precision: Precision, rounds: list[float], **extra: Any) -> BenchRow:
    p50, interval = median_over_rounds(rounds) or (0.0, None)
    latency = LatencyStats(iters=10 * len(rounds), p50_ms=p50, p90_ms=p50 * 1.1, p99_ms=p50 * 1.3,
                           mean_ms=p50 * 1.05, std_ms=p50 * 0.05, min_ms=min(rounds), max_ms=max(rounds),
                           throughput=1000 / p50)
    return BenchRow(variant=variant, backend=backend, precision=precision, device=Device.CPU, batch=1,
                    latency=latency, round_p50_ms=rounds, p50_interval=interval, agreement=0.8125,
                    agreement_interval=wilson(26, 32), agreement_samples=32, **extra)


def _report(other_share: float | None) -> dict[str, Any]:
    """Three rows: the reference, a steady artifact and one whose speedup's interval reaches far (a row that read
    `steady` in the table while its headline read `unstable`)."""
    rng = np.random.default_rng(0)
    torch_rounds = [2.0 + 0.01 * rng.random() for _ in range(20)]
    steady = [0.25 + 0.001 * rng.random() for _ in range(20)]
    wide = [0.5 if i % 2 else 0.05 for i in range(20)]  # the rounds split between two speeds
    rows = [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, torch_rounds, reference=True),
            _row("ort-int8", BackendKind.ONNXRUNTIME, Precision.INT8, steady, artifact="m_int8.onnx"),
            _row("ov-fp16", BackendKind.OPENVINO, Precision.FP16, wide, artifact="m_fp16.onnx")]
    _speedups(rows)
    verdicts(rows, other_share)
    results = [r.to_dict() for r in rows]
    return {"schema": BENCH_SCHEMA, "trtpipe_version": "0.1.0",
            "environment": {"cpu": "Test CPU", "cores": 2, "threads": 2, "gpu": None, "os": "Linux",
                            "python": "3.11", "versions": {"torch": "2.5", "onnxruntime": "1.20"}},
            "model": {"name": "digits_resnet", "source_kind": "trained", "input_shape": [1, 1, 32, 32]},
            "settings": {"iters": None, "warmup": 2, "duration": 2.0, "rounds": 20},
            "agreement_inputs": "64 held-out digits", "results": results, "other_load": other_share,
            "standing": [], "standing_pytorch": pytorch_standing(results), "warnings": []}


def _svg_figures(svg: str) -> dict[str, str]:
    """The text the speedup chart draws beside each bar, by its SVG id."""
    root = ElementTree.fromstring(svg)
    return {group.get("id", ""): " ".join("".join(t.itertext()).strip() for t in group.iter(f"{SVG}text"))
            for group in root.iter(f"{SVG}g") if group.get("id", "").startswith("figure-")}


@pytest.mark.parametrize("other_share", [None, 0.85])
def test_every_renderer_gives_each_row_the_same_figure_interval_and_verdict(other_share: float | None,
                                                                           tmp_path: Path) -> None:
    report = _report(other_share)
    write_reports(report, tmp_path / "bench.json", tmp_path / "bench.md")
    stored = load_results(tmp_path / "bench.json")
    console = Console(width=200, record=True, highlight=False)
    print_table(stored, to=console)
    terminal = console.export_text()
    markdown = (tmp_path / "bench.md").read_text()
    charts = all_charts(stored, 1)
    page = render_html(stored, charts)
    [speedup_chart] = [chart for chart in charts if chart.name == "speedup"]
    assert speedup_chart.svg is not None
    drawn = _svg_figures(speedup_chart.svg)
    verdicts_seen = set()
    for row, original in zip(stored["results"], report["results"], strict=True):
        assert row["unstable"] == original["unstable"]  # the JSON keeps the verdict made once
        figure, word = speedup_text(row), verdict_word(row["unstable"])
        verdicts_seen.add(word)
        [line] = [line for line in terminal.splitlines() if f" {row['variant']} " in line and "│" in line]
        assert f" {figure} " in line and f" {word} " in line, line
        [md] = [line for line in markdown.splitlines() if line.startswith(f"| {row['variant']} |")]
        assert f"| {figure} | {word} |" in md, md
        [tr] = [part for part in page.split("<tr") if re.search(f"<td class=variant>[^<]*{row['variant']}<", part)]
        assert f"<td class=n>{html.escape(figure)}</td><td>{word}</td>" in tr, tr
        if not row.get("reference"):
            text = drawn[svg_id("figure", row["variant"], 1)]
            assert text == figure + (" unstable" if row["unstable"] else ""), text
            assert svg_id("whisker", row["variant"], 1) in speedup_chart.svg
    # A quiet run has a steady row and an unstable one; a busy run's rows are all unstable, the load said once.
    assert verdicts_seen == ({"unstable"} if other_share else {"steady", "unstable"})
    if other_share:
        said = "every row: other processes used 85 %"
        assert terminal.count(said) == 1 and markdown.count(said) == 1 and page.count(said) == 1
    # The headline quotes the table's figure and interval, says what statistic it is, and carries the row's flag.
    [entry] = stored["standing_pytorch"]
    [headline] = [line for line in terminal.splitlines() if line.startswith("Against PyTorch")]
    best = next(r for r in stored["results"] if r["variant"] == entry["trtpipe"])
    assert f"runs at {speedup_text(best).split(' ')[0]} (median of 20 paired rounds, 95 % interval " in headline
    assert ("unstable:" in headline) == bool(best["unstable"])


def test_agreement_shows_its_interval_in_the_tables_and_the_charts_key(tmp_path: Path) -> None:
    """81.25 % on 32 samples is never a bare figure: its 95 % interval is beside it in the terminal, the Markdown,
    the HTML and the accuracy chart's key, which draws it as a whisker."""
    report = _report(None)
    interval = wilson(26, 32)
    text = f"81.25% ({100 * interval.low:.1f}-{100 * interval.high:.1f})"
    console = Console(width=240, record=True, highlight=False)
    print_table(report, to=console)
    charts = all_charts(report, 1)
    page = render_html(report, charts)
    write_reports(report, None, tmp_path / "bench.md")
    assert text in console.export_text() and text in (tmp_path / "bench.md").read_text()
    assert f"<td class=n>{text}</td>" in page
    [pareto] = [chart for chart in charts if chart.name == "pareto"]
    assert all(figures.endswith(text) for _, _, figures in pareto.key) and pareto.svg is not None
    assert svg_id("whisker", "ort-int8") in pareto.svg


@pytest.mark.parametrize(("fast_ms", "log"), [(0.01, True), (1.0, False)])
def test_the_speedup_axis_is_logarithmic_where_the_bars_span_more_than_ten_times(fast_ms: float, log: bool) -> None:
    """0.8x beside 200x on a linear axis leaves the slow bar a sliver at zero: past 10x the axis is logarithmic, and
    says so; within 10x it stays linear from zero."""
    rng = np.random.default_rng(1)
    rows = [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, [2.0 + 0.01 * rng.random() for _ in range(20)],
                 reference=True),
            _row("ort-fp32", BackendKind.ONNXRUNTIME, Precision.FP32, [2.5 + 0.01 * rng.random() for _ in range(20)],
                 artifact="m.onnx"),
            _row("ort-int8", BackendKind.ONNXRUNTIME, Precision.INT8,
                 [fast_ms * (1 + 0.01 * rng.random()) for _ in range(20)], artifact="m_int8.onnx")]
    _speedups(rows)
    verdicts(rows, None)
    report = _report(None) | {"results": [r.to_dict() for r in rows]}
    [chart] = [c for c in all_charts(report, 1) if c.name == "speedup"]
    assert chart.svg is not None
    assert ("log scale" in chart.svg) == log
