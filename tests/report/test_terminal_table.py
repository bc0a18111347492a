"""The terminal table at common widths: every figure it shows whole (no cell cut to an ellipsis), the columns a
reader needs first kept, variant names folded rather than cut, and one line naming what was left out."""

from __future__ import annotations

import re

import pytest
from rich.console import Console

from trtpipe.bench.stability import ADVICE, row_verdict
from trtpipe.intervals import Interval
from trtpipe.report.columns import COLUMNS, cell, present_columns
from trtpipe.report.tables import print_table

BOX = "│┃"


def _row(variant: str, batch: int, p50: float, **extra: object) -> dict[str, object]:
    return {"variant": variant, "precision": "int8" if "int8" in variant else "fp32", "batch": batch,
            "p50_ms": p50, "p90_ms": p50 * 1.2, "p99_ms": p50 * 1.9, "tail_ms": p50 * 1.5, "mean_ms": p50 * 1.1,
            "throughput": batch * 1000 / p50, "max_abs_err": 3.2e-3, "worst_output": "transpose_5.tmp_0",
            "agreement": 0.9917, "top1_accuracy": 0.9882, "host_memory_mb": 112.0, "model_size_mb": 13.4,
            "build_seconds": 41.7, "round_p50_ms": [p50] * 20,
            "p50_interval": Interval(p50 * 0.97, p50 * 1.04, 20, "bootstrap").to_dict()} | extra


def _report() -> dict[str, object]:
    """A report as wide as real ones get: long variant and output names, a peer, an unstable row, every column."""
    speedup = Interval(1710.0, 2936.4, 20, "bootstrap").to_dict()
    rows = [
        _row("pytorch-fp32", 1, 0.91, speedup_vs_torch_fp32=1.0, reference=True),
        _row("pytorch-fp32", 32, 802.2, speedup_vs_torch_fp32=1.0, reference=True,
             unstable=f"its 20 rounds' p50s disagree: ...; {ADVICE}"),
        _row("onnxruntime-int8-cpu (efficientnet_lite0_int8_cpu)", 1, 0.13, speedup_vs_torch_fp32=1913.36,
             speedup_interval=speedup, artifact="e.onnx"),
        _row("openvino-int8-tensorrt (efficientnet_lite0_int8_trt)", 32, 31.36, speedup_vs_torch_fp32=25.58,
             speedup_interval=Interval(8.41, 29.79, 20, "bootstrap").to_dict(), artifact="t.onnx"),
        _row("peer: onnxruntime-int8 (quantize_static U8S8)", 32, 40.1, speedup_vs_torch_fp32=20.0,
             speedup_interval=Interval(19.5, 20.6, 20, "bootstrap").to_dict(), peer="onnxruntime.quantization"),
    ]
    for row in rows[2:]:  # each row's one verdict, as bench makes it
        row["unstable"] = row_verdict(row["p50_ms"], Interval.from_dict(row["p50_interval"]),  # type: ignore[arg-type]
                                      row["speedup_vs_torch_fp32"], Interval.from_dict(row["speedup_interval"]),  # type: ignore[arg-type]
                                      None)
    return {"model": {"name": "efficientnet_lite0"}, "reference": "PyTorch FP32 eager", "results": rows,
            "environment": {"cpu": "AMD EPYC", "cores": 2, "threads": 2,
                            "versions": {"torch": "2", "onnxruntime": "1"}},
            "agreement_inputs": "847 held-out images", "standing": [], "standing_pytorch": []}


def _cells(text: str) -> list[list[str]]:
    """The table's body rows as lists of cell texts (a folded name's continuation lines joined back)."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if not line.startswith("│"):
            continue
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[1] == "" and rows:  # a continuation line: only folded names carry on
            rows[-1] = [(a + (" " if a and b and not a.endswith("-") else "") + b).strip()
                        for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    return rows


@pytest.mark.parametrize("width", [80, 100, 120])
def test_the_table_fits_the_terminal_and_cuts_no_figure(width: int) -> None:
    report = _report()
    console = Console(width=width, record=True, highlight=False)
    print_table(report, to=console)
    text = console.export_text()
    table_lines = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines and all(len(line) <= width for line in table_lines)
    assert "…" not in text
    header = " ".join(line for line in table_lines if line.startswith("┃"))
    shown = [c for c in COLUMNS if all(word in header for word in c.header.split())]
    # The figures a reader needs first are always there, and every cell of them whole.
    assert {"Variant", "Batch", "p50 ms", "Speedup (95% CI)", "Stability"} <= {c.header for c in shown}
    body = _cells(text)
    rows = report["results"]
    assert len(body) == len(rows)  # type: ignore[arg-type]
    for row, cells in zip(rows, body, strict=True):  # type: ignore[call-overload]
        assert re.sub(r"\s", "", cells[0]) == re.sub(r"\s", "", row["variant"])
        for column in shown[1:]:
            if column.key != "variant":
                assert cell(row, column) in cells, (column.header, cells)
    assert "1913x (1710-2936)" in text and "unstable" in text
    left_out = [c.header for c in COLUMNS if c not in shown and any(r.get(c.key) is not None for r in rows)]  # type: ignore[attr-defined]
    if left_out:
        assert f"At {width} columns the table leaves out {', '.join(left_out)}" in text
    assert "unstable: pytorch-fp32 batch 32: its 20 rounds' p50s disagree" in text
    assert text.count(ADVICE) == 1  # what to do, said once


def test_a_wide_terminal_shows_every_column() -> None:
    console, report = Console(width=240, record=True, highlight=False), _report()
    print_table(report, to=console)
    text = console.export_text()
    assert "leaves out" not in text and "…" not in text
    header = " ".join(line for line in text.splitlines() if line.startswith("┃"))
    assert all(word in header for c in present_columns(report["results"]) for word in c.header.split())


def test_markdown_carries_the_intervals_and_the_flags() -> None:
    """The Markdown has every column, the speedup's interval beside it, each row's flag, and what to do once."""
    from trtpipe.report.tables import to_markdown

    report = _report() | {"settings": {"warmup": 5, "iters": None, "duration": 4.0, "rounds": 20}}
    text = to_markdown(report)
    assert "| 1913x (1710-2936) | unstable |" in text and "| 1.00x | unstable |" in text
    assert "| 20.0x (19.5-20.6) | steady |" in text  # a speedup whose interval is narrow, on a quiet machine
    assert "- onnxruntime-int8-cpu (efficientnet_lite0_int8_cpu) batch 1: its speedup's 95 % interval" in text
    assert "- pytorch-fp32 batch 32: its 20 rounds' p50s disagree" in text and text.count(ADVICE) == 1
    assert "speedup is the median over rounds of the ratio of p50s paired round by round, with its 95 %" in text
    assert "~4.0 s of runs per variant and batch in 20 rounds taken in turn across the variants" in text
