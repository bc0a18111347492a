"""Reading TensorRT's engine-inspector JSON: which ONNX nodes fused into each layer, and in what precision.

A strongly typed build should run each layer in the precision the ONNX asked for. If TensorRT found no INT8 or
FP16 kernel it may silently run a layer in FP32, and the engine is slower than promised; that is an error here,
apart from the nodes the optimize stage deliberately kept in FP32.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from trtpipe.errors import TrtpipeError
from trtpipe.vocab import LAYER_FORMAT_WORDS, UNKNOWN, Precision

COMPUTE_PARAMETER_TYPES = {"Convolution", "Deconvolution", "MatrixMultiply", "FullyConnected"}
COMPUTE_LAYER_TYPES = {"CaskConvolution", "CaskGemmConvolution", "CaskDeconvolution", "CaskGemmDeconvolution",
                       "MatrixMultiply", "CaskFlattenConvolution", "CaskLinear", "gemm"}
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")


def tensor_precision(format_text: str) -> str:
    """'Thirty-two wide channel vectorized row major Int8 format' -> 'int8'; 'N/A...' -> 'unknown'."""
    text = format_text.lower()
    return next((precision for word, precision in LAYER_FORMAT_WORDS if word in text), UNKNOWN)


@dataclass(frozen=True)
class LayerSummary:
    name: str
    layer_type: str
    precision: str  # of the layer's first input
    onnx_nodes: tuple[str, ...]
    compute: bool


def summarise(engine_information: dict[str, Any]) -> list[LayerSummary]:
    layers = engine_information.get("Layers", [])
    summaries = []
    for layer in layers:
        if isinstance(layer, str):  # profiling verbosity below DETAILED: names only
            summaries.append(LayerSummary(layer, "?", UNKNOWN, tuple(_nodes(layer, "")), False))
            continue
        name = str(layer.get("Name", ""))
        inputs = layer.get("Inputs") or [{}]
        precision = tensor_precision(str(inputs[0].get("Format/Datatype", ""))) if isinstance(inputs[0], dict) \
            else UNKNOWN
        compute = layer.get("ParameterType") in COMPUTE_PARAMETER_TYPES or layer.get("LayerType") in COMPUTE_LAYER_TYPES
        summaries.append(LayerSummary(name, str(layer.get("LayerType", "?")), precision,
                                      tuple(_nodes(name, str(layer.get("Metadata", "")))), compute))
    return summaries


def _nodes(name: str, metadata: str) -> list[str]:
    found = _ONNX_LAYER.findall(metadata) or _ONNX_LAYER.findall(name)
    if found:
        return [n.strip() for item in found for n in item.split("+")]
    return [part.strip() for part in name.split(" + ") if part.strip()]


def precision_counts(summaries: list[LayerSummary]) -> dict[str, int]:
    return dict(Counter(s.precision for s in summaries if s.compute))


def check_precision(summaries: list[LayerSummary], requested: Precision,
                    allowed_fp32_nodes: set[str] | None = None) -> None:
    """Raise when compute layers run in a wider precision than ``requested`` allows (the vocabulary says which
    layer precisions each precision accepts), except layers made only of ``allowed_fp32_nodes`` (the ones
    optimize kept in FP32 on purpose)."""
    allowed = allowed_fp32_nodes or set()
    accepted = requested.engine_layer_precisions
    if accepted >= Precision.FP32.engine_layer_precisions:
        return  # an FP32 (or TF32) graph accepts any layer precision
    checkable = [s for s in summaries if s.compute and s.precision != UNKNOWN]
    if not checkable:
        raise TrtpipeError(f"Cannot confirm the engine runs in {requested}: its layer information names no compute "
                           f"layer with a known precision ({len(summaries)} layers listed). Build with detailed "
                           "profiling verbosity (trtpipe build does) and report the TensorRT version.")
    wrong = [s for s in summaries if s.compute and s.precision not in accepted and s.precision != UNKNOWN
             and not (s.onnx_nodes and set(s.onnx_nodes) <= allowed)]
    if wrong:
        shown = "; ".join(f"{s.name} ({s.precision})" for s in wrong[:4]) + ("; ..." if len(wrong) > 4 else "")
        raise TrtpipeError(f"The engine runs {len(wrong)} of {sum(s.compute for s in summaries)} compute layers "
                           f"in a wider precision than {requested} ({shown}): TensorRT found no {requested} kernel "
                           "for them. Keep them FP32 in optimize, or check the Q/DQ placement.")
