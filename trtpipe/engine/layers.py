"""Reading TensorRT's engine-inspector JSON: which ONNX nodes fused into each layer, and in what precision.

A strongly typed build should run each layer in the precision the ONNX asked for. If TensorRT found no INT8 or
FP16 kernel it may silently run a layer in FP32, and the engine is slower than promised; that is an error here,
apart from the nodes the optimize stage deliberately kept in FP32 (and what TensorRT fused into them).

Two layouts of a layer's tensors exist, and both are read:

- TensorRT 10.x: one ``"Format/Datatype"`` text per tensor, e.g. ``"Thirty-two wide channel vectorized row major
  Int8 format"`` or ``"Float"``.
- TensorRT 11.x: the field is split into ``"Format"`` (the layout, e.g. ``"Row major linear FP32 format
  (kLINEAR)"``) and ``"Datatype"`` (the DataType name: ``"Float"``, ``"Half"``, ``"BFloat16"``, ``"Int8"``,
  ``"FP8"``...). Read from: the TensorRT 11.0 migration guide, "Migrating IEngineInspector Usage from TensorRT 10.x
  to 11.x" (https://docs.nvidia.com/deeplearning/tensorrt/11.0.0/api/migration/tensorrt-10x-to-11x-IEngineInspector
  .html: "the split of the Format/DataType field"; its I/O Tensors example spells the type key ``"DataType"``), and
  NVIDIA's layer-info schema in NVIDIA/TensorRT (main, TensorRT 11.1):
  ``.agents/skills/trt-perf-analysis/schemas/analyze-data.schema.json`` (a layer tensor has ``Name``,
  ``Dimensions``, ``Format``, ``Datatype``), whose ``scripts/trt_perf/data.py`` accepts ``Datatype``, ``Format``
  and ``Format/Datatype`` alike and whose report reads ``Datatype`` as a DataType name (``float``, ``half``,
  ``bfloat16``, ``int8``, ``fp8``). Both spellings of the type key are accepted here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trtpipe.errors import TrtpipeError
from trtpipe.vocab import LAYER_FORMAT_WORDS, UNKNOWN, Precision

COMPUTE_PARAMETER_TYPES = {"Convolution", "Deconvolution", "MatrixMultiply", "FullyConnected"}
COMPUTE_LAYER_TYPES = {"CaskConvolution", "CaskGemmConvolution", "CaskDeconvolution", "CaskGemmDeconvolution",
                       "MatrixMultiply", "CaskFlattenConvolution", "CaskLinear", "gemm"}
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]]+)\]")

# TensorRT 11's per-tensor type key (NVIDIA's schema spells it "Datatype"; the migration guide's I/O tensors
# "DataType"), then TensorRT 10's combined text, then 11's layout text as a last resort.
_TYPE_KEYS = ("Datatype", "DataType", "Format/Datatype", "Format")
# TensorRT DataType names as the inspector prints them, and the layer precision each means. "BFloat16" must be
# matched before the word "float" in LAYER_FORMAT_WORDS would call it fp32 (Polygraphy's dtype_from_fmt_dtype
# tries BFLOAT16 first for the same reason).
_DATATYPE_NAMES = {"float": Precision.FP32.value, "half": Precision.FP16.value, "bfloat16": Precision.BF16.value,
                   "int8": Precision.INT8.value, "fp8": "fp8", "int4": "int4"}


def tensor_precision(format_text: str) -> str:
    """'Thirty-two wide channel vectorized row major Int8 format' -> 'int8'; 'Half' -> 'fp16'; 'N/A...' ->
    'unknown'."""
    text = format_text.strip().lower()
    if text in _DATATYPE_NAMES:
        return _DATATYPE_NAMES[text]
    if "bfloat16" in text:
        return Precision.BF16.value
    return next((precision for word, precision in LAYER_FORMAT_WORDS if word in text), UNKNOWN)


def tensor_type_text(tensor: Mapping[str, Any]) -> str:
    """The text that says a layer tensor's type, in either TensorRT's 10.x or 11.x layout ('' when none): the
    first key of :data:`_TYPE_KEYS` present, so an 11.x ``Datatype`` is trusted over the layout text beside it."""
    return next((value for key in _TYPE_KEYS if isinstance(value := tensor.get(key), str) and value.strip()), "")


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
        precision = tensor_precision(tensor_type_text(inputs[0])) if isinstance(inputs[0], dict) else UNKNOWN
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


# ONNX operators that carry no precision decision of their own once TensorRT fuses them into a compute layer: they
# run in whatever precision the layer's compute node runs. The optimize stage records only the nodes it decided
# about (the INT8 fallback the quantizable Conv/MatMul/Gemm, the FP16 pass the nodes it kept), yet TensorRT fuses
# a Conv with its activation, its BatchNorm, a residual Add and the Q/DQ or Casts around it into one layer
# (TensorRT developer guide, "Layer Fusion" and "Q/DQ Layer-Fusion"), so the layer lists all of them.
PRECISION_NEUTRAL_OPS: Mapping[str, str] = {
    **dict.fromkeys(("Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu",
                     "Selu", "Softplus", "Gelu", "Mish", "Swish"), "activation fused into the layer"),
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "BatchNormalization"), "elementwise/scale fused into the layer"),
    **dict.fromkeys(("Cast", "QuantizeLinear", "DequantizeLinear"), "type border: the layer's precision decides"),
    **dict.fromkeys(("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"),
                    "layout only, no arithmetic"),
}


def deliberately_fp32(layer: LayerSummary, allowed_fp32_nodes: set[str],
                      op_types: Mapping[str, str] | None = None) -> bool:
    """Whether ``layer`` runs in FP32 because the optimize stage asked for it: at least one of its nodes is in
    ``allowed_fp32_nodes`` and every other node is one that carries no precision decision
    (:data:`PRECISION_NEUTRAL_OPS`, looked up in ``op_types``: ONNX node name -> op type). A Conv that is not in
    ``allowed_fp32_nodes`` is never neutral, so a Conv that TensorRT silently ran in FP32 still fails; without
    ``op_types`` every node must be allowed."""
    if not layer.onnx_nodes:
        return False
    others = [n for n in layer.onnx_nodes if n not in allowed_fp32_nodes]
    if len(others) == len(layer.onnx_nodes):
        return False
    types = op_types or {}
    return all(types.get(node) in PRECISION_NEUTRAL_OPS for node in others)


def check_precision(summaries: list[LayerSummary], requested: Precision,
                    allowed_fp32_nodes: set[str] | None = None, op_types: Mapping[str, str] | None = None) -> None:
    """Raise when compute layers run in a wider precision than ``requested`` allows (the vocabulary says which
    layer precisions each precision accepts), except layers optimize kept in FP32 on purpose (see
    :func:`deliberately_fp32`; ``op_types`` maps the ONNX's node names to their op types)."""
    allowed = allowed_fp32_nodes or set()
    accepted = requested.engine_layer_precisions
    if accepted >= Precision.FP32.engine_layer_precisions:
        return  # an FP32 (or TF32) graph accepts any layer precision
    checkable = [s for s in summaries if s.compute and s.precision != UNKNOWN]
    if not checkable:
        raise TrtpipeError(f"Cannot confirm the engine runs in {requested}: its layer information names no compute "
                           f"layer with a known precision ({len(summaries)} layers listed). Build with detailed "
                           "profiling verbosity (trtpipe build does) and report the TensorRT version.")
    wrong = [s for s in checkable if s.precision not in accepted and not deliberately_fp32(s, allowed, op_types)]
    if wrong:
        shown = "; ".join(f"{s.name} ({s.precision})" for s in wrong[:4]) + ("; ..." if len(wrong) > 4 else "")
        raise TrtpipeError(f"The engine runs {len(wrong)} of {sum(s.compute for s in summaries)} compute layers "
                           f"in a wider precision than {requested} ({shown}): TensorRT found no {requested} kernel "
                           "for them. Keep them FP32 in optimize, or check the Q/DQ placement.")
