"""The layer-timing section of bench's reports (``trtpipe bench --profile-layers``): the terminal, Markdown and HTML
render the same tables from the results dictionary's ``layer_timing`` list, so a results JSON read back by
``trtpipe report`` shows what the bench run printed. Nothing here measures; every figure comes from the dictionary.
"""

from __future__ import annotations

import html
from typing import Any

from rich.markup import escape
from rich.table import Table

SHOWN_LAYERS = 15  # the slowest layers listed per variant and batch; the rest are summed in one line
EXPLANATION = ("Per-layer times from TensorRT's profiler (IProfiler), over runs separate from the timed ones, on an "
               "execution context without a CUDA graph: the profiler adds events and a synchronisation per layer, "
               "so read the times as each layer's share of the engine, not as the rows' latency. Layers are "
               "TensorRT's, fused from the ONNX nodes their names list.")


def entries(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's layer timings, one per TensorRT variant and batch (none when bench was not asked for them)."""
    return [e for e in report.get("layer_timing") or [] if isinstance(e, dict)]


def table_rows(entry: dict[str, Any], limit: int = SHOWN_LAYERS) -> list[tuple[str, str, str]]:
    """(layer, mean ms, share %) of the ``limit`` slowest layers, slowest first, then one line for the others."""
    layers = sorted(entry.get("layers") or [], key=lambda layer: -float(layer.get("mean_ms") or 0.0))
    rows = [(str(layer.get("layer")), f"{float(layer['mean_ms']):.4f}", f"{100 * float(layer['share']):.1f} %")
            for layer in layers[:limit]]
    rest = layers[limit:]
    if rest:
        rows.append((f"({len(rest)} other layers)", f"{sum(float(layer['mean_ms']) for layer in rest):.4f}",
                     f"{100 * sum(float(layer['share']) for layer in rest):.1f} %"))
    return rows


def heading(entry: dict[str, Any]) -> str:
    layers = len(entry.get("layers") or [])
    return (f"{entry.get('variant')}, batch {entry.get('batch')}: {layers} layers, "
            f"{float(entry.get('total_ms') or 0.0):.3f} ms per run summed over them, {entry.get('runs')} profiled runs")


def print_layer_timing(report: dict[str, Any], out: Any) -> None:
    """The section on the terminal (``out``: a rich Console)."""
    for entry in entries(report):
        table = Table(title=escape(heading(entry)), title_justify="left")
        table.add_column("Layer", justify="left")
        table.add_column("Mean ms", justify="right")
        table.add_column("Share", justify="right")
        for row in table_rows(entry):
            table.add_row(*(escape(cell) for cell in row))
        out.print(table)
    if entries(report):
        out.print(f"[dim]{escape(EXPLANATION)}[/dim]", soft_wrap=True)


def markdown_lines(report: dict[str, Any]) -> list[str]:
    """The section as Markdown lines (none without layer timings)."""
    if not entries(report):
        return []
    lines = ["#### Layer timing (TensorRT profiler)", "", EXPLANATION, ""]
    for entry in entries(report):
        lines += [f"{heading(entry)}:", "", "| Layer | Mean ms | Share |", "|---|---:|---:|",
                  *(f"| {layer.replace('|', '/')} | {mean} | {share} |" for layer, mean, share in table_rows(entry)),
                  ""]
    return lines


def html_section(report: dict[str, Any]) -> str:
    """The section as HTML (empty without layer timings)."""
    if not entries(report):
        return ""
    parts = ["<h2>Layer timing (TensorRT profiler)</h2>", f"<p class=note>{html.escape(EXPLANATION)}</p>"]
    for entry in entries(report):
        parts.append(f"<h3>{html.escape(heading(entry))}</h3><table><tr><th>Layer</th><th>Mean ms</th>"
                     "<th>Share</th></tr>")
        parts += [f"<tr><td>{html.escape(layer)}</td><td class=n>{mean}</td><td class=n>{share}</td></tr>"
                  for layer, mean, share in table_rows(entry)]
        parts.append("</table>")
    return "".join(parts)
