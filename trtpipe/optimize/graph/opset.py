"""Raise an ONNX model's default-domain opset to what a precision pass needs, before any pass runs.

ONNX files made elsewhere (PaddlePaddle's exporter, older torch exports) are often at opset 11 or 12, but
per-channel Q/DQ (DequantizeLinear's ``axis`` attribute) exists only from opset 13. ONNX's own version converter
rewrites each operator through its adapters; this module wraps it so that the result says what it did (a note for
the manifest) and so that an operator it cannot convert is named in one line, with the fix, instead of the
converter's C++ assertion text.
"""

from __future__ import annotations

import re

import onnx
from onnx import defs, helper, version_converter

from trtpipe.errors import BadInput
from trtpipe.vocab import Precision

DEFAULT_DOMAINS = ("", "ai.onnx")
PER_CHANNEL_QDQ_OPSET = 13  # DequantizeLinear gained ``axis`` (per-channel scales) in opset 13
# The converter's assertions read "<file>:<line>: <function>: Assertion `...` failed: <message>".
_ASSERTION_PREFIX = re.compile(r"^.*?Assertion `.*?` failed:\s*", re.DOTALL)
_NO_ADAPTER = re.compile(r"No Adapter (?P<way>From|To) Version \$?(?P<version>\d+) for (?P<op>\w+)")


def default_opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset; 0 where it imports none (then it has no standard operators to convert)."""
    return next((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), 0)


def upgrade_opset(model: onnx.ModelProto, minimum: int, *,
                  reason: str | None = None) -> tuple[onnx.ModelProto, str | None]:
    """``model`` at opset ``minimum`` or later, and a note saying what changed (None when it already was).

    Opset imports of custom domains that no node uses (PaddlePaddle's exporter leaves ``('Paddle', 1)``) are held
    out of the conversion and put back after it: they mean nothing to the converter, and the model should come back
    as given apart from its opset. Raises BadInput naming the first operator that cannot be converted.
    """
    current = default_opset(model)
    if current == 0 or current >= minimum:
        return model, None
    why = reason or f"needs opset {minimum}"
    unknown = _first_unknown_node(model.graph, current)
    if unknown is not None:
        raise BadInput(_cannot_convert(current, minimum, why, f"operator '{unknown.op_type}' (node "
                                       f"'{unknown.name or '?'}') has no ONNX schema at opset {current}"))
    used = _used_domains(model)
    unused = [o for o in model.opset_import if o.domain not in DEFAULT_DOMAINS and o.domain not in used]
    held = onnx.ModelProto()
    held.CopyFrom(model)
    del held.opset_import[:]
    held.opset_import.extend(o for o in model.opset_import if o not in unused)
    try:
        converted = version_converter.convert_version(held, minimum)
    except Exception as error:  # the converter raises RuntimeError/ConvertError with C++ assertion text
        raise BadInput(_cannot_convert(current, minimum, why, _converter_reason(error))) from None
    converted.opset_import.extend(unused)
    standard = [o for o in converted.opset_import if o.domain in DEFAULT_DOMAINS]
    converted.ir_version = max(converted.ir_version, helper.find_min_ir_version_for(standard))
    return converted, f"upgraded from opset {current} to {minimum} ({why})"


def upgrade_for_precision(model: onnx.ModelProto, precision: Precision) -> tuple[onnx.ModelProto, str | None]:
    """What ``optimize`` calls on the source model: INT8 writes per-channel Q/DQ, so it needs opset 13."""
    if precision is not Precision.INT8:
        return model, None
    return upgrade_opset(model, PER_CHANNEL_QDQ_OPSET, reason=f"per-channel Q/DQ needs {PER_CHANNEL_QDQ_OPSET}")


def _cannot_convert(current: int, minimum: int, why: str, detail: str) -> str:
    return (f"The model is at opset {current} and cannot be upgraded to {minimum} ({why}): {detail}. Re-export it "
            f"at opset {minimum} or later (torch.onnx.export(..., opset_version={minimum}); paddle2onnx "
            f"--opset_version {minimum}), or replace that operator.")


def _nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Every node, those of If/Loop/Scan bodies included."""
    found = []
    for node in graph.node:
        found.append(node)
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                found += _nodes(sub)
    return found


def _used_domains(model: onnx.ModelProto) -> set[str]:
    used = {node.domain for node in _nodes(model.graph)}
    for function in model.functions:
        used.add(function.domain)
        used |= {node.domain for node in function.node}
    return used


def _first_unknown_node(graph: onnx.GraphProto, opset: int) -> onnx.NodeProto | None:
    """The first standard-domain node whose operator has no schema at ``opset``: the converter has no adapter
    for it (an experimental operator that was removed, such as ImageScaler, or one newer than the model's opset)."""
    for node in _nodes(graph):
        if node.domain not in DEFAULT_DOMAINS:
            continue
        try:
            defs.get_schema(node.op_type, opset, "")
        except defs.SchemaError:
            return node
    return None


def _converter_reason(error: Exception) -> str:
    """The operator the converter names, or its message without the C++ file, line and assertion, on one line."""
    adapter = _NO_ADAPTER.search(str(error))
    if adapter is not None:
        return (f"operator '{adapter['op']}' has no conversion adapter {adapter['way'].lower()} its opset "
                f"{adapter['version']} version")
    text = _ASSERTION_PREFIX.sub("", str(error)).strip()
    return " ".join(text.split()) or type(error).__name__
