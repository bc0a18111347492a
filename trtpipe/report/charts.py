"""Charts of a bench report, drawn with matplotlib as SVG text (no network, no JavaScript).

Every chart marks each variant's standing (trtpipe.report.marks): the chosen one in green with ★, a variant outside
the budget hatched grey with ✗, the reference with ◆, so a variant that fails the accuracy limit is never drawn like
the one chosen. A simulation (a ``-trtsim`` row: another runtime's arithmetic run here) is drawn for its accuracy
alone: never a bar or a line of latency, a dotted level in the accuracy chart, each chart saying so under it. A
chart with nothing to show is left out with one line saying why, never drawn empty. Variants sit on
the vertical axis (their names are tick labels, not a legend over the bars); the accuracy-vs-latency chart numbers
its points, placed clear of one another (trtpipe.report.labels), and keys the numbers in a table beside it.
"""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display here, and none needed

import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from trtpipe.bench.stability import verdict_word
from trtpipe.report.columns import share_text, speedup_text
from trtpipe.report.labels import place_labels
from trtpipe.report.marks import (
    ACCURACY_ONLY,
    CHOSEN_COLOR,
    HATCH,
    OUTSIDE_COLOR,
    REFERENCE_COLOR,
    Marks,
    Standing,
    accuracy_only,
)
from trtpipe.runtime.registry import is_eager

plt.rcParams.update({"svg.fonttype": "none", "font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                     "hatch.color": "#777777", "hatch.linewidth": 0.6})

UNDECIDED_COLOR = "#e0a000"  # the amber of the report's undecided choice box
OUTSIDE_MARKERS = ("X", "s", "^", "v", "P", "d", "<", ">", "h")  # the batch sweep's lines outside the budget
OUTSIDE_DASHES = (":", (0, (4, 2)), (0, (1, 2, 4, 2)), (0, (6, 2, 1, 2)), (0, (2, 4)))
BATCH_COLORS = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#e377c2")
WITHIN_COLOR = BATCH_COLORS[0]
WIDTH_IN = 8.0


@dataclass(frozen=True)
class Chart:
    """One chart of the report, or the line saying why it was left out."""

    name: str  # its id in the page and its file's suffix (report_<name>.svg)
    title: str
    svg: str | None = None
    left_out: str | None = None  # why there is no chart (svg is None)
    key: tuple[tuple[str, str, str], ...] = ()  # (label drawn on the chart, the variant, its figures in words)
    note: str | None = None  # a line under the chart (what it leaves out: simulations' latency)


def svg_id(kind: str, variant: str, batch: int | None = None) -> str:
    """The SVG id of a variant's bar, line or point ("bar-onnxruntime-int8-b1"): a reader's tools and the tests
    find what a chart drew for a variant by it."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", variant).strip("-")
    return f"{kind}-{slug}" + (f"-b{batch}" if batch is not None else "")


def _svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: the SVG is inlined into HTML


def _variants(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["variant"] for r in rows))


def _batches(rows: list[dict[str, Any]]) -> list[int]:
    return sorted({r["batch"] for r in rows})


def _row(rows: list[dict[str, Any]], variant: str, batch: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["variant"] == variant and r["batch"] == batch), None)


def _timed(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """The rows whose latency a chart may draw, and the line saying which simulations it leaves out (None if none)."""
    simulated = list(dict.fromkeys(r["variant"] for r in rows if accuracy_only(r)))
    note = f"Not drawn here ({ACCURACY_ONLY}): {', '.join(simulated)}." if simulated else None
    return [r for r in rows if not accuracy_only(r)], note


def _bar_style(standing: Standing, color: str, single: bool) -> dict[str, Any]:
    """How a bar of a variant with this standing is drawn; ``color`` is its batch's (several batches)."""
    if standing is Standing.OUTSIDE:
        return {"color": OUTSIDE_COLOR if single else color, "alpha": 1.0 if single else 0.35,
                "hatch": HATCH[standing], "edgecolor": "#777777", "linewidth": 0.6}
    if standing is Standing.CHOSEN:
        return {"color": CHOSEN_COLOR if single else color, "edgecolor": CHOSEN_COLOR, "linewidth": 2.0}
    if standing is Standing.REFERENCE:
        return {"color": REFERENCE_COLOR if single else color}
    return {"color": color}


def _label_ticks(axis: Any, variants: list[str], marks: Marks) -> None:
    """Variant names as the vertical axis' tick labels, each with its marker; chosen in bold green, outside grey."""
    for tick, variant in zip(axis.get_yticklabels(), variants, strict=True):
        standing = marks.standing(variant)
        if standing is Standing.OUTSIDE:
            tick.set_color("#777777")
        elif standing is Standing.CHOSEN:
            tick.set_color(CHOSEN_COLOR)
            tick.set_fontweight("bold")


def _standing_handles(variants: list[str], marks: Marks, single: bool) -> list[Patch]:
    """Legend entries for the standings this chart shows (nothing for plain variants)."""
    shown = {marks.standing(v) for v in variants}
    handles = []
    if Standing.CHOSEN in shown:
        handles.append(Patch(facecolor=CHOSEN_COLOR if single else "white", edgecolor=CHOSEN_COLOR, linewidth=2.0,
                             label=f"★ chosen: {marks.chosen}"))
    if Standing.OUTSIDE in shown:
        handles.append(Patch(facecolor=OUTSIDE_COLOR, hatch=HATCH[Standing.OUTSIDE], edgecolor="#777777",
                             label="✗ outside the budget (accuracy, latency or memory; why in the table)"))
    if Standing.REFERENCE in shown and single:
        handles.append(Patch(facecolor=REFERENCE_COLOR, label="◆ reference"))
    return handles


def _figure(height: float) -> tuple[Any, Any]:
    """A figure the report's width; constrained layout keeps a legend below the axes clear of the axis title."""
    return plt.subplots(figsize=(WIDTH_IN, height), layout="constrained")


def _legend_below(figure: Any, handles: list[Any] | None = None, columns: int = 1) -> None:
    """The legend under the chart, outside the axes: it never covers a bar, a point or a label."""
    if handles is None:
        handles = figure.axes[0].get_legend_handles_labels()[0]
    if handles:
        figure.legend(handles=handles, fontsize=7.5, frameon=False, loc="outside lower left", ncols=columns)


def _horizontal_bars(rows: list[dict[str, Any]], variants: list[str], marks: Marks, value: Any) -> tuple[Any, Any]:
    """A figure of one horizontal bar per variant and batch (``value(row)``), variants top to bottom."""
    batches = _batches(rows)
    single = len(batches) == 1
    height = 0.8 / len(batches)
    figure, axis = _figure(1.2 + len(variants) * (0.16 + 0.14 * len(batches)))
    for index, batch in enumerate(batches):
        for position, variant in enumerate(variants):
            row = _row(rows, variant, batch)
            if row is None or value(row) is None:
                continue
            style = _bar_style(marks.standing(variant), BATCH_COLORS[index % len(BATCH_COLORS)], single)
            axis.barh(position + index * height, value(row), height, gid=svg_id("bar", variant, batch), **style)
    axis.set_yticks([i + 0.4 - height / 2 for i in range(len(variants))], [marks.label(v) for v in variants])
    axis.invert_yaxis()
    _label_ticks(axis, variants, marks)
    batch_handles = [] if single else [Patch(facecolor=BATCH_COLORS[i % len(BATCH_COLORS)], label=f"batch {b}")
                                       for i, b in enumerate(batches)]
    _legend_below(figure, batch_handles + _standing_handles(variants, marks, single), columns=1)
    return figure, axis


def latency_chart(rows: list[dict[str, Any]], marks: Marks) -> Chart:
    """p50 latency per variant and batch, whiskers up to p99."""
    title = "Latency by variant and batch"
    rows, note = _timed(rows)
    variants = _variants(rows)
    figure, axis = _horizontal_bars(rows, variants, marks, lambda r: r["p50_ms"])
    height = 0.8 / len(_batches(rows))
    for index, batch in enumerate(_batches(rows)):
        for position, variant in enumerate(variants):
            if row := _row(rows, variant, batch):
                axis.errorbar(row["p50_ms"], position + index * height, xerr=[[0], [row["p99_ms"] - row["p50_ms"]]],
                              fmt="none", ecolor="#333333", elinewidth=0.8, capsize=2)
    axis.set_xscale("log")
    axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))  # 1-2-5 ticks, plain figures: never 3×10¹
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(NullFormatter())
    axis.set_xlabel("latency, ms (bar p50, whisker p99; log scale)")
    axis.set_title(title)
    return Chart("latency", title, _svg(figure), note=note)


def _decades(rows: list[dict[str, Any]], variants: list[str]) -> tuple[float, float] | None:
    """The smallest and largest of the bars and their whiskers where they span more than 10x (then the speedup
    axis is logarithmic), else None."""
    ends: list[float] = []
    for row in rows:
        if row["variant"] in variants and (value := row.get("speedup_vs_torch_fp32")):
            interval = row.get("speedup_interval") or {}
            ends += [v for v in (value, interval.get("low"), interval.get("high")) if v and v > 0]
    return (min(ends), max(ends)) if ends and max(ends) > 10 * min(ends) else None


def speedup_chart(rows: list[dict[str, Any]], marks: Marks) -> Chart:
    references = {r["variant"] for r in rows if r.get("reference")}
    onnx = any(r.get("reference") and not is_eager(r.get("backend")) for r in rows)  # an FP32 ONNX as MODEL
    reference = "the FP32 ONNX" if onnx else "PyTorch FP32"
    title = f"Speedup over {reference}"
    rows, note = _timed(rows)
    variants = [v for v in _variants(rows) if v not in references and v != "pytorch-fp32"
                and any(r["variant"] == v and r.get("speedup_vs_torch_fp32") for r in rows)]
    if not variants:
        return Chart("speedup", title, left_out=f"{title} left out: no variant besides the reference has a speedup "
                                                f"figure.")
    figure, axis = _horizontal_bars(rows, variants, marks, lambda r: r.get("speedup_vs_torch_fp32"))
    batches = _batches(rows)
    height = 0.8 / len(batches)
    for index, batch in enumerate(batches):  # each bar's 95 % interval as a whisker, and beside it the table's cell
        for position, variant in enumerate(variants):
            row = _row(rows, variant, batch)
            if not row or not row.get("speedup_vs_torch_fp32"):
                continue
            value, y = row["speedup_vs_torch_fp32"], position + index * height
            if interval := row.get("speedup_interval"):
                spread = [[max(value - interval["low"], 0.0)], [max(interval["high"] - value, 0.0)]]
                axis.errorbar(value, y, xerr=spread,
                              fmt="none", ecolor="#333333", elinewidth=0.8, capsize=2,
                              gid=svg_id("whisker", variant, batch))
            if len(batches) <= 3:  # more bars than that and the figures crowd
                flag = f" {verdict_word(row.get('unstable'))}" if row.get("unstable") else ""
                axis.annotate(f"{speedup_text(row)}{flag}", (interval["high"] if interval else value, y),
                              xytext=(3, 0), textcoords="offset points", va="center", fontsize=7,
                              color="#b26a00" if flag else "#333333", gid=svg_id("figure", variant, batch))
    span = _decades(rows, variants)
    log = span is not None
    if span is not None:  # 0.8x beside 200x: on a linear axis the slow bars vanish against the fast one
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}×"))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.set_xlim(min(span[0], 1.0) / 1.5, span[1] * (4.0 if len(batches) <= 3 else 1.3))  # room for figures
    elif len(batches) <= 3:
        axis.set_xlim(0, axis.get_xlim()[1] * 1.3)
    axis.axvline(1.0, color="grey", linewidth=1, linestyle="--")
    axis.set_xlabel(f"speedup vs {'the FP32 ONNX' if onnx else 'PyTorch FP32 eager'} (median of paired round "
                    f"ratios, whisker its 95 % interval; dashed: 1×{'; log scale' if log else ''})")
    axis.set_title(title)
    return Chart("speedup", title, _svg(figure), note=note)


def _accuracy_key(points: list[dict[str, Any]]) -> tuple[str, str] | None:
    """(row field, axis name) of the accuracy figure every point has: accuracy against labels, else agreement."""
    if points and all(r.get("top1_accuracy") is not None for r in points):
        return "top1_accuracy", "accuracy, %"
    if any(r.get("agreement") is not None for r in points):
        name = next((r.get("agreement_name") for r in points if r.get("agreement_name")), "agreement with FP32")
        return "agreement", f"{name}, %"
    return None


def _far_below(ys: list[float], within: list[float]) -> float | None:
    """The value under which a point is drawn at the chart's floor rather than where it is: a variant outside the
    budget far below the others (a broken INT8 at 0.4 %) would otherwise squash every other point into one line."""
    if not within:
        return None
    low, high = min(within), max(within)
    floor = low - max(8.0 * (high - low), 15.0)  # points, on a percent axis
    return floor if min(ys) < floor else None


def _on_the_floor(ys: list[float], standings: list[Standing]) -> tuple[list[float], list[bool], float | None]:
    """The y of every point as drawn, which points sit on the chart's floor, and that floor (None when no point is far
    below the rest): a point far below the others is drawn at the bottom axis so the rest keep the chart's height."""
    floor = _far_below(ys, [y for y, s in zip(ys, standings, strict=True) if s is not Standing.OUTSIDE])
    far = [floor is not None and y < floor for y in ys]
    shown = [y for y, f in zip(ys, far, strict=True) if not f]
    if floor is None:
        return ys, far, None
    pad = max((max(shown) - min(shown)) * 0.12, 0.3)
    bottom = min(shown) - 2 * pad
    return [bottom if f else y for y, f in zip(ys, far, strict=True)], far, bottom  # on the floor: the bottom axis


def _point_styles() -> dict[Standing, dict[str, Any]]:
    """The marker of each standing in the accuracy-vs-latency chart (scatter's keywords; ``s`` is the area)."""
    return {
        Standing.WITHIN: {"marker": "o", "color": WITHIN_COLOR, "s": 36},
        Standing.UNDECIDED: {"marker": "o", "facecolors": "none", "edgecolors": UNDECIDED_COLOR, "linewidths": 1.4,
                             "s": 40},
        Standing.CHOSEN: {"marker": "*", "color": CHOSEN_COLOR, "s": 150},
        Standing.OUTSIDE: {"marker": "X", "color": OUTSIDE_COLOR, "s": 44, "edgecolors": "#777777"},
        Standing.REFERENCE: {"marker": "D", "color": REFERENCE_COLOR, "s": 30}}


def _draw_points(axis: Any, points: list[dict[str, Any]], xy: tuple[list[float], list[float]],
                 standings: list[Standing], far: list[bool], marks: Marks) -> None:
    """Each point as its own SVG group (found by svg_id), styled by its standing (▼ where it sits on the floor), and
    one legend entry per standing drawn, under the points."""
    xs, ys = xy
    judged = bool(marks.chosen or marks.outside)
    labels = {Standing.WITHIN: "within the budget" if judged else "variant",
              Standing.UNDECIDED: "? undecided (a limit could not be judged)",
              Standing.CHOSEN: f"★ chosen: {marks.chosen}", Standing.OUTSIDE: "✗ outside the budget",
              Standing.REFERENCE: "◆ reference"}
    for standing, style in _point_styles().items():
        own = [i for i, s in enumerate(standings) if s is standing]
        for i in own:  # one scatter per point: each its own SVG group, found by svg_id
            axis.scatter([xs[i]], [ys[i]], zorder=3, gid=svg_id("point", points[i]["variant"]), clip_on=not far[i],
                         **(style | ({"marker": "v"} if far[i] else {})))
        if near := [i for i in own if not far[i]]:  # the legend's entries, drawn under the points
            axis.scatter([xs[near[0]]], [ys[near[0]]], label=labels[standing], zorder=1, **style)
        if below := [i for i in own if far[i]]:
            axis.scatter([xs[below[0]]], [ys[below[0]]], zorder=1, clip_on=False,
                         **(style | {"marker": "v"}), label=f"{labels[standing]}, far below the others: on the "
                                                            "floor, its figure beside it")


def _whiskers(axis: Any, points: list[dict[str, Any]], key: str, xy: tuple[list[float], list[float]],
              far: list[bool]) -> None:
    """Each point's 95 % intervals as whiskers: its accuracy's over the samples (up and down) and its p50's over the
    rounds (left and right), where measured; none on a point drawn on the floor (its figure is not where it sits)."""
    interval = "accuracy_interval" if key == "top1_accuracy" else "agreement_interval"
    for row, x, y, on_floor in zip(points, *xy, far, strict=True):
        accuracy, p50 = row.get(interval), row.get("p50_interval")
        if on_floor or (accuracy is None and p50 is None):
            continue
        yerr = [[max(y - 100 * accuracy["low"], 0.0)], [max(100 * accuracy["high"] - y, 0.0)]] if accuracy else None
        xerr = [[max(x - p50["low"], 0.0)], [max(p50["high"] - x, 0.0)]] if p50 else None
        axis.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="none", ecolor="#888888", elinewidth=0.7, capsize=1.5,
                      zorder=2, gid=svg_id("whisker", row["variant"]))


def _pareto_front(xs: list[float], ys: list[float], standings: list[Standing]) -> list[int]:
    """Indices of the points within the budget that no faster point beats on accuracy, fastest first."""
    front, best = [], -1.0
    for index in sorted(range(len(xs)), key=lambda i: xs[i]):
        if standings[index] is not Standing.OUTSIDE and ys[index] > best:
            front.append(index)
            best = ys[index]
    return front


def _set_accuracy_limits(axis: Any, ys: list[float], bottom: float | None) -> None:
    """The y axis's range: down to the floor where a point sits on it; a point's width either side where every point
    has one figure (not a zoom into nothing); no room above 100 % when nothing can be there."""
    axis.margins(x=0.08, y=0.12)
    low, high = axis.get_ylim()
    if max(ys) - min(ys) < 1.0:  # every point on one figure: a point either side, not a zoom into nothing
        low, high = min(ys) - 1.0, max(ys) + 1.0
    if max(ys) <= 100.0:  # no room above 100 %: there is nothing there
        high = min(high, 100.0 + 0.06 * (high - low))
    axis.set_ylim(bottom if bottom is not None else low, high)


def pareto_chart(rows: list[dict[str, Any]], batch: int, marks: Marks) -> Chart:
    """The task's accuracy (or agreement with the reference: top-1, pixel, mAP@0.5...) against p50 latency at one
    batch; the Pareto front of the variants within the budget joined. Points are numbered, the numbers keyed in the
    chart's table; a variant outside the budget far below the rest sits on the chart's floor as ▼."""
    title = "Accuracy vs latency"
    points = [r for r in rows if r["batch"] == batch]
    found = _accuracy_key(points)
    if found is None:
        return Chart("pareto", title, left_out=f"{title} left out: no row at batch {batch} has an accuracy or "
                                               "agreement figure.")
    key, name = found
    levels = [r for r in points if r.get(key) is not None and accuracy_only(r)]
    points = [r for r in points if r.get(key) is not None and not accuracy_only(r)]
    if not points:
        return Chart("pareto", title, left_out=f"{title} left out: at batch {batch} only simulations have an accuracy "
                                               f"figure ({ACCURACY_ONLY}).")
    xs = [r["p50_ms"] for r in points]
    standings = [marks.standing(r["variant"]) for r in points]
    ys, far, bottom = _on_the_floor([100 * r[key] for r in points], standings)
    figure, axis = _figure(4.4)
    _draw_points(axis, points, (xs, ys), standings, far, marks)
    _whiskers(axis, points, key, (xs, ys), far)
    if max(xs) > 10 * min(xs):  # a range over 10x on a linear axis squeezes the fast points into one
        axis.set_xscale("log")
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.xaxis.set_minor_formatter(NullFormatter())
    front = _pareto_front(xs, ys, standings)
    if len(front) > 1:
        axis.plot([xs[i] for i in front], [ys[i] for i in front], linestyle="--", color="grey", linewidth=1,
                  zorder=2, label="Pareto front (within the budget)")
    level_ys = [max(100 * r[key], bottom) if bottom is not None else 100 * r[key] for r in levels]
    _set_accuracy_limits(axis, ys + level_ys, bottom)
    first = len(points) + 1
    for offset, (row, y) in enumerate(zip(levels, level_ys, strict=True)):
        outside = marks.standing(row["variant"]) is Standing.OUTSIDE
        axis.axhline(y, color=OUTSIDE_COLOR if outside else "#8a6d00", linestyle=":", linewidth=1.2, zorder=1,
                     gid=svg_id("level", row["variant"]),
                     label="accuracy only (a simulation: its level, no latency)" if offset == 0 else None)
        axis.annotate(str(first + offset), (1.0, y), xycoords=("axes fraction", "data"), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8, color="#8a6d00", annotation_clip=False,
                      gid=f"pareto-level-{offset}")
    log = axis.get_xscale() == "log"
    axis.set_xlabel(f"p50 latency at batch {batch}, ms{' (log scale)' if log else ''}; whiskers: 95 % intervals")
    axis.set_ylabel("accuracy, %" if key == "top1_accuracy" else name)
    axis.set_title(f"{title}: points numbered, keyed in the table below")
    _legend_below(figure, columns=2)
    figure.canvas.draw()  # lay the figure out, then hold it: labels are placed where they will be drawn
    figure.set_layout_engine("none")
    numbers = [str(i + 1) for i in range(len(points))]
    texts = [f"{n} ▼{100 * r[key]:.1f} %" if f else n for n, r, f in zip(numbers, points, far, strict=True)]
    styles = _point_styles()
    sizes = [math.sqrt(styles[s]["s"]) / 2 + 1.5 for s in standings]  # a marker's half-width, in points
    place_labels(axis, list(zip(xs, ys, strict=True)), texts, radii_pt=sizes, gid_prefix="pareto-label-")
    interval = "accuracy_interval" if key == "top1_accuracy" else "agreement_interval"
    key_rows = [(n, r["variant"], f"{r['p50_ms']:.2f} ms, {share_text(r[key], r.get(interval))}")
                for n, r in zip(numbers, points, strict=True)]
    key_rows += [(str(first + i), r["variant"], f"accuracy only, {share_text(r[key], r.get(interval))} (a "
                                                "simulation: no latency)")
                 for i, r in enumerate(levels)]
    note = (f"Dotted levels ({', '.join(r['variant'] for r in levels)}): {ACCURACY_ONLY}." if levels else None)
    return Chart("pareto", title, _svg(figure), key=tuple(key_rows), note=note)


def batch_sweep_chart(rows: list[dict[str, Any]], marks: Marks) -> Chart:
    title = "Batch sweep"
    rows, note = _timed(rows)
    batches = _batches(rows)
    if len(batches) < 2:
        return Chart("batch_sweep", title, left_out=f"{title} left out: the run benched one batch size "
                                                    f"({batches[0] if batches else 'none'}), so there is no sweep.")
    figure, axis = _figure(3.6 + 0.12 * len(_variants(rows)))
    cycle = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4)
    outside = 0
    for variant in _variants(rows):
        own = sorted((r for r in rows if r["variant"] == variant), key=lambda r: r["batch"])
        standing = marks.standing(variant)
        style: dict[str, Any] = {"marker": "o", "linewidth": 1.2, "markersize": 4}
        if standing is Standing.OUTSIDE:  # grey as everywhere, but each its own dashes and marker: nine alike
            style |= {"color": OUTSIDE_COLOR, "markeredgecolor": "#777777",  # would be one blur in the legend
                      "linestyle": OUTSIDE_DASHES[outside % len(OUTSIDE_DASHES)],
                      "marker": OUTSIDE_MARKERS[outside % len(OUTSIDE_MARKERS)]}
            outside += 1
        elif standing is Standing.CHOSEN:
            style |= {"color": CHOSEN_COLOR, "linewidth": 2.6, "marker": "*", "markersize": 10}
        elif standing is Standing.REFERENCE:
            style |= {"color": REFERENCE_COLOR, "linestyle": "--", "marker": "D", "markersize": 4}
        else:
            style |= {"color": next(c for c in cycle if c not in ("#2ca02c", "#7f7f7f"))}
        axis.plot([r["batch"] for r in own], [r["throughput"] for r in own], label=marks.label(variant),
                  gid=svg_id("line", variant), **style)
    axis.set_xscale("log", base=2)
    axis.set_xticks(batches, [str(b) for b in batches])
    axis.minorticks_off()
    axis.set_xlabel("batch size")
    axis.set_ylabel("throughput, items/s (at p50)")
    axis.set_title(title)
    _legend_below(figure, columns=1 if len(_variants(rows)) < 6 else 2)
    return Chart("batch_sweep", title, _svg(figure), note=note)


def all_charts(report: dict[str, Any], batch: int, marks: Marks | None = None) -> list[Chart]:
    rows, marks = report["results"], marks or Marks()
    return [latency_chart(rows, marks), speedup_chart(rows, marks), pareto_chart(rows, batch, marks),
            batch_sweep_chart(rows, marks)]
