"""Selection ranks by the table's statistic (the speedup: median of paired round ratios, with its interval) and decides
by expected value: the fastest on the point estimate, unless a simpler, smaller, more portable artifact is within 5 %
of it; it says "tied" where the chosen row's interval overlaps another's (the claim, never a veto), and flags a choice
made from an unstable measurement (amber, with the rerun hint) in the run's line, the HTML and the Markdown."""

from __future__ import annotations

from typing import Any

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.stability import load_reason, row_verdict
from trtpipe.bench.timing import LatencyStats
from trtpipe.intervals import Interval
from trtpipe.pipeline.select import choose
from trtpipe.report.html import render_html, render_markdown
from trtpipe.vocab import BackendKind, Device, Precision


def _row(variant: str, backend: BackendKind, precision: Precision, p50: float, speedup: float | None = None,
         spread: tuple[float, float] | None = None, *, size: float = 10.0, share: float | None = None) -> BenchRow:
    latency = LatencyStats(iters=200, p50_ms=p50, p90_ms=p50, p99_ms=p50 * 1.2, mean_ms=p50, std_ms=0.0,
                           min_ms=p50, max_ms=p50, throughput=1000 / p50)
    interval = Interval(spread[0], spread[1], 20, "bootstrap") if spread else None
    row = BenchRow(variant=variant, backend=backend, precision=precision, device=Device.CPU, batch=1,
                   latency=latency, artifact=None if backend is BackendKind.TORCH else f"{variant}.onnx",
                   reference=backend is BackendKind.TORCH, speedup_vs_torch_fp32=speedup, speedup_interval=interval,
                   model_size_mb=None if backend is BackendKind.TORCH else size)
    row.unstable = row_verdict(p50, None, speedup, interval, share)
    return row


def _picodet(share: float | None = None) -> list[BenchRow]:
    """The PicoDet rows of the issue: FP16's speedup higher, its interval overlapping FP32's."""
    return [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, 153.0, 1.0, share=share),
            _row("openvino-fp32", BackendKind.OPENVINO, Precision.FP32, 54.86, 2.79, (2.60, 2.95), size=4.6,
                 share=share),
            _row("openvino-fp16", BackendKind.OPENVINO, Precision.FP16, 49.7, 3.08, (2.90, 3.30), size=2.3,
                 share=share)]


def test_overlapping_intervals_are_tied_in_words_and_the_faster_point_estimate_is_chosen() -> None:
    """The issue's PicoDet: FP16 3.08x against FP32 2.79x, intervals overlapping. FP16 is 10 % faster on the point
    estimate, beyond what FP32's simplicity is worth (5 %): it is chosen, and the line says the two are tied (the
    measurement cannot be sure) rather than letting the overlap pick the slower file."""
    choice = choose(_picodet(), batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.status == "chosen" and choice.variant == "openvino-fp16"
    assert choice.reason.startswith("tied at batch 1 with openvino-fp32 2.79x (2.60-2.95) (their 95 % intervals "
                                    "overlap")
    assert "openvino-fp16 3.08x (2.90-3.30) PyTorch FP32, the median of paired rounds" in choice.reason
    assert "chosen as the fastest on the point estimate" in choice.reason
    assert choice.flagged is None


def test_a_simpler_artifact_within_the_margin_is_chosen_and_says_what_it_gives_up() -> None:
    """FP32 at 3.00x beside FP16 at 3.08x (under 5 % apart): FP32 computes as the reference does, and is chosen for
    it, naming the faster row and its figure."""
    rows = [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, 153.0, 1.0),
            _row("openvino-fp32", BackendKind.OPENVINO, Precision.FP32, 51.0, 3.00, (2.85, 3.10), size=4.6),
            _row("openvino-fp16", BackendKind.OPENVINO, Precision.FP16, 49.7, 3.08, (2.90, 3.30), size=2.3)]
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "openvino-fp32"
    assert choice.reason.startswith("tied at batch 1 with openvino-fp16 3.08x (2.90-3.30)")
    assert ("chosen as the simpler arithmetic (FP32 rather than FP16: no measurable speed is given up for a reduced "
            "precision), within 5 % of the fastest on the point estimate (openvino-fp16 3.08x (2.90-3.30))"
            in choice.reason)


def test_apart_intervals_choose_the_faster_by_the_tables_statistic_not_the_p50() -> None:
    """FP16's speedup interval is above FP32's: it is chosen, quoting the table's cell. The row with the lower p50
    (over all runs pooled) is not the one ranked first where the paired median says otherwise."""
    rows = [_row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, 153.0, 1.0),
            _row("openvino-fp32", BackendKind.OPENVINO, Precision.FP32, 40.0, 2.79, (2.70, 2.90)),
            _row("onnxruntime-fp16", BackendKind.ONNXRUNTIME, Precision.FP16, 45.0, 3.50, (3.40, 3.60))]
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "onnxruntime-fp16"
    assert choice.reason.startswith("fastest at batch 1: 3.50x (3.40-3.60) PyTorch FP32")
    assert "tied" not in choice.reason


def test_equal_precision_ties_go_to_the_smaller_file_then_the_more_portable_runtime() -> None:
    reference = _row("pytorch-fp32", BackendKind.TORCH, Precision.FP32, 10.0, 1.0)
    big = _row("ov-int8-big", BackendKind.OPENVINO, Precision.INT8, 1.0, 9.0, (8.5, 9.5), size=8.0)
    small = _row("ov-int8-small", BackendKind.OPENVINO, Precision.INT8, 1.1, 8.8, (8.4, 9.2), size=2.0)
    choice = choose([reference, big, small], batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "ov-int8-small" and "the smaller file (2.0 MB" in choice.reason
    ort = _row("ort-int8", BackendKind.ONNXRUNTIME, Precision.INT8, 1.1, 8.8, (8.4, 9.2), size=8.0)
    choice = choose([reference, big, ort], batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.variant == "ort-int8"
    assert "the more portable runtime (ONNX Runtime rather than OpenVINO)" in choice.reason


def _summary(choice: Any) -> dict[str, Any]:
    return {"choice": choice.__dict__ | {"status": choice.status}}


def _report(rows: list[BenchRow]) -> dict[str, Any]:
    return {"schema": "trtpipe.bench/3", "trtpipe_version": "0", "results": [r.to_dict() for r in rows],
            "model": {"name": "picodet", "input_shape": [1, 3, 320, 320]}, "agreement_inputs": "64 images",
            "environment": {"cpu": "Test CPU", "cores": 2, "threads": 2,
                            "versions": {"torch": "2", "onnxruntime": "1"}},
            "standing": [], "standing_pytorch": []}


def test_a_choice_under_load_is_amber_with_the_rerun_hint_and_a_cached_result_keeps_it() -> None:
    """Every row of a run beside other work is flagged; the choice made from them says so (never green with a bare
    figure), and rows read back from bench.json (a cached run) choose the same, flagged."""
    rows = _picodet(share=0.85)
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and choice.status == "chosen" and choice.flagged is not None
    assert choice.flagged == (f"chosen under load ({load_reason(0.85)}): rerun with `--rebench` on a quieter "
                              "machine")
    assert choice.reason.endswith(choice.flagged)
    page = render_html(_report(rows), [], _summary(choice))
    assert '<p class="choice chosen flagged" id=choice><b>Chosen under load: openvino-fp16</b>' in page
    assert "rerun with `--rebench` on a quieter machine" in page
    assert "**Chosen under load: openvino-fp16**" in render_markdown(_report(rows), {}, _summary(choice))
    cached = [BenchRow.from_dict(row.to_dict()) for row in rows]
    again = choose(cached, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert again is not None and again.flagged == choice.flagged and again.reason == choice.reason
    quiet = choose(_picodet(), batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert quiet is not None
    assert '<p class="choice chosen" id=choice><b>Chosen: openvino-fp16</b>' in render_html(
        _report(_picodet()), [], _summary(quiet))


def test_nothing_chosen_under_load_says_the_tails_were_taken_under_load() -> None:
    rows = _picodet(share=0.70)
    choice = choose(rows, batch=1, latency_budget_ms=2.0, max_accuracy_drop=None)
    assert choice is not None and choice.status == "none"
    assert "measured under load (other processes used 70 %" in choice.reason
    assert choice.reason.endswith("rerun with `--rebench` on a quieter machine")


def test_the_choice_line_gives_the_accuracy_drop_with_its_interval() -> None:
    from trtpipe.intervals import wilson

    rows = _picodet()
    for row in rows[1:]:
        row.agreement, row.agreement_interval = 0.975, wilson(39, 40)
    choice = choose(rows, batch=1, latency_budget_ms=None, max_accuracy_drop=None)
    assert choice is not None and "loses 2.50 pp against the reference (drop 95 % CI +" in choice.reason
    assert "pp on 40 samples)" in choice.reason
