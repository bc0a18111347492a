"""Integer pre-activations (cpu target): whether a convolution writes its output in uint8 ahead of its HardSwish.

ONNX Runtime runs a convolution in integer (QLinearConv) only when its output is quantized too; it has no integer
HardSwish, so a convolution whose output only a HardSwish reads runs in float unless that pre-activation gets a Q/DQ of
its own. The pre-activation's range is narrowed to where HardSwish responds first (saturation.py), so its step is close
to the activation's; it is still a second rounding, and what that costs depends on the model: it made one real detector
much faster at no loss and cost another several points (measured: docs/results/int8-design.md, 'Integer
pre-activations'). So the pass measures both and keeps the integer pre-activations unless they cost more than
TOLERANCE_PP of the task's measure; where they do, it looks by bisection for the longest run of them from the input on
(graph order) and for the longest run ending at the outputs that stays within it, and keeps the longer. Where the cost
sits differs by model (on PP-PicoDet the backbone's first pre-activations cost the most).

Before that search it tries the pre-activations whose HardSwish output no channel gain reads (scale_depthwise):
where the activation's channels span ranges far apart (the gain lifts the narrow ones after it), one per-tensor
uint8 scale on the pre-activation rounds the narrow channels away before the gain can help. When those without a
gain, in uint8, measure within the tolerance, they stay uint8 and the search runs over the ones with a gain only, so the
depthwise convolutions of the stem and the first stages no longer go float with the pointwise ones around them.

Where scale_depthwise carried the gain into the convolution (cpu: the pre-activation is ``g * x``, its channels
level), the pre-activation is that convolution's output, read through ``Mul(1/g)``; it no longer counts as
gained, since nothing is left to round away; only the gains that could not be carried (their HardSwish output
read by other layers too) are searched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from trtpipe.comparison import Comparison
from trtpipe.graph_index import producers_of
from trtpipe.optimize.graph.gains import INVERSE_GAIN, gain_kind, preactivation_writer
from trtpipe.optimize.int8.qdq.profiles import WEIGHTED_OPS, QuantProfile

ACTIVATIONS = ("HardSwish",)
TOLERANCE_PP = 1.0  # task-measure points the integer pre-activations may cost against float ones
COSINE_TOLERANCE = 1e-3  # the same, where the task has no measure but the outputs' cosine
SEARCH_STEPS = 8  # bisection stops when the run it decides is within 1/8 of the activations


def integer_preactivations(model: onnx.ModelProto, profile: QuantProfile) -> list[str]:
    """The activations whose input ``profile`` quantizes and a weighted op writes: excluding them from
    quantization leaves those convolutions' outputs float."""
    if not profile.op_types:
        return []
    producer = producers_of(model.graph)
    return [node.name for node in model.graph.node
            if node.op_type in ACTIVATIONS and node.op_type in profile.op_types
            and getattr(preactivation_writer(producer, node.input[0]), "op_type", None) in WEIGHTED_OPS]


def gained(model: onnx.ModelProto, activations: list[str]) -> list[str]:
    """Those of ``activations`` whose output a channel gain (scale_depthwise's per-channel Mul) reads and whose
    input the gain was not carried into (a carried gain levels the pre-activation's channels too)."""
    gains = {node.input[0] for node in model.graph.node if gain_kind(node) is not None}
    carried = {node.output[0] for node in model.graph.node if gain_kind(node) == INVERSE_GAIN}
    wanted = set(activations)
    return [node.name for node in model.graph.node if node.name in wanted and node.output[0] in gains
            and node.input[0] not in carried]


@dataclass(frozen=True)
class Measured:
    """One mix measured: ``over`` the list the run indexes ("all" pre-activations, or the "gained" ones with every
    other one uint8), the run [start, stop) of that list in uint8, and the figures."""

    over: str
    start: int
    stop: int
    check: Comparison


def choose(activations: list[str], gains: list[str], measure: Callable[[list[str]], Comparison],
           integer: Comparison, float_: Comparison) -> tuple[list[str], list[Measured]]:
    """Which of ``activations`` (graph order) to keep in uint8, and every mix measured on the way
    (``measure(uint8)``: INT8 with those in uint8, the rest float; ``integer``: all uint8, ``float_``: none).
    All of them when that is within the tolerance of float; else, where ``gains`` (those a channel gain reads)
    splits them, every other one in uint8 plus the longest run of ``gains`` that bisection finds within it, if
    the others alone are; else the longest run of all of them (``longest_run``)."""
    tried = [Measured("all", 0, len(activations), integer), Measured("all", 0, 0, float_)]
    if worth_keeping(integer, float_):
        return list(activations), tried
    kept = set(gains)
    rest = [a for a in activations if a not in kept]
    if gains and rest:
        alone = measure(rest)
        tried.append(Measured("gained", 0, 0, alone))
        if worth_keeping(alone, float_):
            run, found = longest_run(len(gains), lambda part: measure(rest + gains[part]), integer, float_)
            tried += _searched("gained", found, len(gains))
            chosen = set(rest + gains[run])
            return [a for a in activations if a in chosen], tried
    run, found = longest_run(len(activations), lambda part: measure(activations[part]), integer, float_)
    return activations[run], tried + _searched("all", found, len(activations))


def _searched(over: str, found: dict[tuple[int, int], Comparison], count: int) -> list[Measured]:
    """The runs ``longest_run`` measured itself (not the all-uint8 and all-float mixes it was handed)."""
    return [Measured(over, start, stop, check) for (start, stop), check in sorted(found.items())
            if (start, stop) not in ((0, 0), (0, count))]


def worth_keeping(integer: Comparison, float_: Comparison) -> bool:
    """Whether integer pre-activations measured within the tolerance of float ones (task measure, else cosine)."""
    if integer.agreement is not None and float_.agreement is not None:
        return 100.0 * (float_.agreement - integer.agreement) <= TOLERANCE_PP
    return integer.cosine >= float_.cosine - COSINE_TOLERANCE


def longest_run(count: int, measure: Callable[[slice], Comparison], integer: Comparison,
                float_: Comparison) -> tuple[slice, dict[tuple[int, int], Comparison]]:
    """Which of ``count`` pre-activations (graph order) to keep in uint8, and every figure measured on the way
    (keyed by (start, stop)): all of them when ``integer`` (all uint8) is within the tolerance of ``float_`` (none);
    else the longer of the longest run from the first and the longest run to the last that bisection finds within
    it (``measure(run)``: INT8 with ``activations[run]`` in uint8), down to none."""
    tried = {(0, count): integer, (0, 0): float_}
    if worth_keeping(integer, float_):
        return slice(0, count), tried

    def run(length: int, from_first: bool) -> slice:
        return slice(0, length) if from_first else slice(count - length, count)

    best = slice(0, 0)
    for from_first in (True, False):
        good, bad = 0, count
        while bad - good > max(1, count // SEARCH_STEPS):
            middle = run((good + bad) // 2, from_first)
            tried[(middle.start, middle.stop)] = measure(middle)
            length = middle.stop - middle.start
            good, bad = (length, bad) if worth_keeping(tried[(middle.start, middle.stop)], float_) else (good, length)
        if good > best.stop - best.start:
            best = run(good, from_first)
    return best, tried
