"""Charts of a bench report, drawn with matplotlib as SVG text (no network, no JavaScript)."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here, and none needed

import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first

from trtpipe.vocab import BackendKind

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False})


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: the SVG is inlined into HTML


def _variants(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in rows))


def latency_chart(rows: list[dict[str, Any]]) -> str:
    """p50 latency per variant, grouped by batch, with whiskers up to p99."""
    variants, batches = _variants(rows), sorted({r["batch"] for r in rows})
    figure, axis = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / max(len(variants), 1)
    for index, variant in enumerate(variants):
        cells = [next((r for r in rows if r["variant"] == variant and r["batch"] == b), None) for b in batches]
        xs = [i + index * width for i, c in enumerate(cells) if c]
        p50 = [c["p50_ms"] for c in cells if c]
        p99 = [c["p99_ms"] - c["p50_ms"] for c in cells if c]
        axis.bar(xs, p50, width, yerr=[[0] * len(p99), p99], capsize=2, label=variant)
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(batches))], [f"batch {b}" for b in batches])
    axis.set_ylabel("latency, ms (bar p50, whisker p99)")
    axis.set_yscale("log")
    axis.legend(fontsize=7, ncols=2, frameon=False)
    axis.set_title("Latency by variant and batch")
    return _svg(figure)


def speedup_chart(rows: list[dict[str, Any]]) -> str:
    references = {r["variant"] for r in rows if r.get("reference")}
    onnx = any(r.get("reference") and r.get("backend") != BackendKind.TORCH for r in rows)  # an FP32 ONNX as MODEL
    variants = [v for v in _variants(rows) if v not in references and v != "pytorch-fp32"]
    batches = sorted({r["batch"] for r in rows})
    figure, axis = plt.subplots(figsize=(8, 3.2))
    width = 0.8 / max(len(batches), 1)
    for index, batch in enumerate(batches):
        values = [next((r["speedup_vs_torch_fp32"] or 0 for r in rows if r["variant"] == v and r["batch"] == batch),
                       0) for v in variants]
        axis.barh([i + index * width for i in range(len(variants))], values, width, label=f"batch {batch}")
    axis.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    axis.set_yticks([i + 0.4 - width / 2 for i in range(len(variants))], variants)
    axis.set_xlabel(f"speedup vs {'the FP32 ONNX' if onnx else 'PyTorch FP32 eager'} (ratio of p50)")
    axis.legend(fontsize=7, frameon=False)
    axis.set_title(f"Speedup over {'the FP32 ONNX' if onnx else 'PyTorch FP32'}")
    return _svg(figure)


def pareto_chart(rows: list[dict[str, Any]], batch: int) -> str:
    """The task's accuracy (or agreement with the reference: top-1, pixel, mAP@0.5...) against p50 latency at one
    batch; the Pareto front joined."""
    points = [r for r in rows if r["batch"] == batch]
    use_accuracy = all(r.get("top1_accuracy") is not None for r in points)
    key = "top1_accuracy" if use_accuracy else "agreement"
    name = next((r.get("agreement_name") for r in points if r.get("agreement_name")), "agreement with FP32")
    points = [r for r in points if r.get(key) is not None]
    figure, axis = plt.subplots(figsize=(6, 3.6))
    for row in points:
        axis.scatter(row["p50_ms"], 100 * row[key], s=30)
        axis.annotate(row["variant"], (row["p50_ms"], 100 * row[key]), fontsize=7, xytext=(4, 4),
                      textcoords="offset points")
    front, best = [], -1.0
    for row in sorted(points, key=lambda r: r["p50_ms"]):
        if row[key] > best:
            front.append(row)
            best = row[key]
    if len(front) > 1:
        axis.plot([r["p50_ms"] for r in front], [100 * r[key] for r in front], linestyle="--", color="grey",
                  linewidth=1)
    axis.set_xlabel(f"p50 latency at batch {batch}, ms")
    axis.set_ylabel("accuracy, %" if use_accuracy else f"{name}, %")
    axis.set_title("Accuracy vs latency (Pareto front dashed)")
    return _svg(figure)


def batch_sweep_chart(rows: list[dict[str, Any]]) -> str:
    figure, axis = plt.subplots(figsize=(6, 3.6))
    for variant in _variants(rows):
        own = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["batch"])
        axis.plot([r["batch"] for r in own], [r["throughput"] for r in own], marker="o", label=variant)
    batches = sorted({r["batch"] for r in rows})
    axis.set_xscale("log", base=2)
    axis.set_xticks(batches, [str(b) for b in batches])
    axis.minorticks_off()
    axis.set_xlabel("batch size")
    axis.set_ylabel("throughput, items/s (at p50)")
    axis.legend(fontsize=7, frameon=False)
    axis.set_title("Batch sweep")
    return _svg(figure)


def all_charts(report: dict[str, Any], batch: int) -> dict[str, str]:
    rows = report["results"]
    return {"latency": latency_chart(rows), "speedup": speedup_chart(rows), "pareto": pareto_chart(rows, batch),
            "batch_sweep": batch_sweep_chart(rows)}
