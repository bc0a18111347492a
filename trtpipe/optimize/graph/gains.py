"""The channel gains ``scale_depthwise`` writes into a graph and the INT8 pass reads back from it.

``passes/scale_depthwise.py`` adds Mul nodes by per-channel gains; the INT8 placement keeps them in float until
``int8/qdq/integer_hardswish.py`` or ``int8/steps/preactivations/algorithm.py`` folds them. This module is what both
sides agree on (how a gain node is marked and recognised, the grid a carried gain is snapped to), so that ``int8/``
never imports a pass.

A gain node is marked explicitly, in the node's ``metadata_props`` (key ``trtpipe.mark``), not by its name. Its
name still ends in ``_channel_gain`` (or ``_inverse_channel_gain``), and a node without the mark is recognised by
that name: an FP32 file that ``scale_depthwise`` wrote before the marks existed, optimized again, and a graph tool
that drops ``metadata_props`` on the way, both still find their gains.
"""

from __future__ import annotations

import onnx

GAIN_SUFFIX = "_channel_gain"  # the name of each gain node scale_depthwise adds ends so (what older files carry)
INVERSE_SUFFIX = f"_inverse{GAIN_SUFFIX}"  # the Mul by 1 / g after a convolution that carries a HardSwish's gain
EXACT_LEVELS = 255  # a carried gain is 255 / k, so 1 / (6 g) is k steps of 1 / (6 * 255): exact in uint8

MARK = "trtpipe.mark"  # the metadata_props key of a node a pass added for a later step to find
GAIN = "channel_gain"  # Mul(g) in front of depthwise convolutions: the INT8 pass keeps it in float
INVERSE_GAIN = "inverse_channel_gain"  # Mul(1 / g) between a convolution that carries a gain and its HardSwish


def mark(node: onnx.NodeProto, kind: str) -> onnx.NodeProto:
    """``node``, marked as a gain node of ``kind`` (:data:`GAIN` or :data:`INVERSE_GAIN`)."""
    node.metadata_props.add(key=MARK, value=kind)
    return node


def gain_kind(node: onnx.NodeProto) -> str | None:
    """:data:`GAIN` or :data:`INVERSE_GAIN` for a gain node, by its mark (by its name where it has none); None for
    any other node."""
    if node.op_type != "Mul":
        return None
    marked = next((p.value for p in node.metadata_props if p.key == MARK), None)
    if marked is not None:
        return marked if marked in (GAIN, INVERSE_GAIN) else None
    if node.name.endswith(INVERSE_SUFFIX):
        return INVERSE_GAIN
    return GAIN if node.name.endswith(GAIN_SUFFIX) else None


def preactivation_writer(producer: dict[str, onnx.NodeProto], tensor: str) -> onnx.NodeProto | None:
    """The node that writes a HardSwish's input ``tensor``, looking through the ``Mul(1/g)`` of a carried gain:
    the convolution whose output is the pre-activation the INT8 pass quantizes."""
    node = producer.get(tensor)
    if node is not None and gain_kind(node) == INVERSE_GAIN:
        return producer.get(node.input[0])
    return node
