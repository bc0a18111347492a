"""Per-layer timing (bench --profile-layers): TensorRT's per-layer reports summed into a summary, and the section
every report renders from the results dictionary. The profiler itself runs in tests/engine/test_gpu_runtime.py."""

from __future__ import annotations

from typing import Any

import pytest

from trtpipe.report import layer_timing
from trtpipe.runtime.tensorrt.layer_times import LayerTimes


def _collected() -> LayerTimes:
    times = LayerTimes()
    for run in range(4):  # as the profiler reports them: every layer of a run, then report_to_profiler returns
        times.add("conv1 + relu1", 0.30 + 0.02 * run)
        times.add("pool", 0.10)
        times.add("reformat (never ran)", 0.0)
        times.add("fc", 0.60)
        times.run_done()
    return times


def test_layer_times_are_averaged_per_run_and_shared_out() -> None:
    summary = _collected().summary()
    assert summary["runs"] == 4 and summary["total_ms"] == pytest.approx(0.33 + 0.10 + 0.60)
    layers = {layer["layer"]: layer for layer in summary["layers"]}
    assert list(layers) == ["conv1 + relu1", "pool", "fc"]  # the engine's order; a layer that took no time is left out
    assert layers["conv1 + relu1"]["mean_ms"] == pytest.approx(0.33)
    assert layers["conv1 + relu1"]["median_ms"] == pytest.approx(0.33)
    assert sum(layer["share"] for layer in summary["layers"]) == pytest.approx(1.0)
    assert LayerTimes().summary() == {"runs": 0, "total_ms": 0, "layers": []}


def _report(**entry: Any) -> dict[str, Any]:
    return {"layer_timing": [{"variant": "tensorrt-fp16 (m)", "batch": 8, **_collected().summary(), **entry}]}


def test_the_table_lists_the_slowest_layers_and_sums_the_rest() -> None:
    (entry,) = _report()["layer_timing"]
    assert layer_timing.table_rows(entry) == [("fc", "0.6000", "58.3 %"), ("conv1 + relu1", "0.3300", "32.0 %"),
                                             ("pool", "0.1000", "9.7 %")]
    assert layer_timing.table_rows(entry, limit=1)[1] == ("(2 other layers)", "0.4300", "41.7 %")


def test_every_report_renders_the_section_from_the_dictionary() -> None:
    report = _report()
    lines = layer_timing.markdown_lines(report)
    assert lines[0] == "#### Layer timing (TensorRT profiler)" and "without a CUDA graph" in lines[2]
    assert "tensorrt-fp16 (m), batch 8: 3 layers, 1.030 ms per run summed over them, 4 profiled runs:" in lines
    assert "| fc | 0.6000 | 58.3 % |" in lines
    html = layer_timing.html_section(report)
    assert "<h2>Layer timing (TensorRT profiler)</h2>" in html and "<td>conv1 + relu1</td>" in html
    assert layer_timing.markdown_lines({}) == [] and layer_timing.html_section({"layer_timing": []}) == ""


def test_the_bench_markdown_and_the_html_report_carry_the_section() -> None:
    """bench's own Markdown and `trtpipe report` both show the section when the results have layer timings."""
    from trtpipe.report.html import render_html, render_markdown
    from trtpipe.report.tables import to_markdown

    report = {**_results(), **_report()}
    assert "#### Layer timing (TensorRT profiler)" in to_markdown(report)
    assert "#### Layer timing (TensorRT profiler)" in render_markdown(report, {})
    assert "<h2>Layer timing (TensorRT profiler)</h2>" in render_html(report, {})
    assert "Layer timing" not in to_markdown(_results())


def test_the_terminal_prints_one_table_per_variant_and_batch() -> None:
    from rich.console import Console

    out = Console(record=True, width=140)
    layer_timing.print_layer_timing(_report(), out)
    text = out.export_text()
    assert "tensorrt-fp16 (m), batch 8" in text and "58.3 %" in text and "Per-layer times from" in text


def _results() -> dict[str, Any]:
    """The smallest bench results dictionary the reports render."""
    row = {"variant": "tensorrt-fp16 (m)", "backend": "tensorrt", "precision": "fp16", "device": "cuda", "batch": 8,
           "iters": 10, "p50_ms": 1.0, "p90_ms": 1.1, "p99_ms": 1.2, "mean_ms": 1.0, "std_ms": 0.1, "min_ms": 0.9,
           "max_ms": 1.3, "throughput": 8000.0, "cuda_graph": True}
    return {"model": {"name": "m", "source_kind": "registry", "input_shape": [1, 3, 8, 8]},
            "environment": {"cpu": "cpu", "cores": 2, "threads": 2, "versions": {"torch": "2", "onnxruntime": "1"}},
            "settings": {"warmup": 1, "iters": 10, "duration": 1.0, "rounds": 1}, "agreement_inputs": "inputs",
            "results": [row], "trtpipe_version": "0"}
