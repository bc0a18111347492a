"""Speed-aware placement for the ``cpu`` target: which kinds of weighted op run faster in integer than in float on
ONNX Runtime here, measured, and the others left float in the same file.

Accuracy decides where Q/DQ may go (``placement.py``, the INT8 steps); whether an integer kernel is faster than the
float one it replaces depends on the op and the machine. ONNX Runtime's QLinearConv beats its NCHWc float
convolution on dense and pointwise convolutions, but a depthwise or grouped convolution, a small MatMul or a
convolution whose neighbours run in float can run slower in integer than in float once its Q/DQ, layout transposes
and requantization are paid (FastViT-T8's and EfficientViT-B0's INT8 files ran at 0.52x and 0.85x their FP32 files:
issue 57). TensorRT times its tactics per layer; nothing does on the CPU, so this does, the way the written file's
speed check does (``checks/speed_check.py``: paired, interleaved rounds, read as ratios).

A *region* is every quantized weighted op of one kind (dense, pointwise, grouped, depthwise convolutions, transposed
convolutions, matmuls): a handful of whole-model measurements, each faithful (the whole graph, as ONNX Runtime
optimises it, with the region's integer kernels against its float ones), rather than one per node, which neither
fits a minute's budget on a ResNet-50 nor resolves a 1 % change on a busy machine. Regions are tried largest first;
one is left float where the file with it float runs faster on the point estimate (a decision by expected value:
leaving a region float costs no accuracy). The result is then timed against the file as placed, which is kept where
the decisions together made it slower, and against the FP32 file; where it is slower than FP32, the file with every
region float is tried too, and then the float graph itself (the Q/DQ left on elementwise ops, pooling and concats,
and the float ops an integer rewrite split an activation into, can cost more than the integer kernels save), so the
written file is not slower than FP32 for want of trying.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from trtpipe.graph_index import producers_of
from trtpipe.onnx_info import attribute
from trtpipe.optimize.checks.speed_check import SpeedCheck, paired_speedup, session
from trtpipe.optimize.int8.qdq.profiles import WEIGHTED_OPS
from trtpipe.optimize.int8.qdq.quantize import prune_unread
from trtpipe.vocab import Precision

INT8, FLOAT = str(Precision.INT8), "float"  # what a region was kept as
ROUNDS = 5  # paired rounds per decision: the written file's check (speed_check.ROUNDS) takes more
# Below this FP32 time per run, ONNX Runtime's fixed cost per op and the machine's noise decide a region's timing,
# not its kernels (a 4-convolution test graph runs in 0.03 ms): no region is timed and the file stays as placed.
MIN_FP32_MS = 1.0

Timer = Callable[[onnx.ModelProto, onnx.ModelProto], SpeedCheck]


@dataclass(frozen=True)
class RegionDecision:
    """One region, its measured times in integer and in float (ms, median over rounds), the speed of the float
    version as a multiple of the integer one (with its interval) and what was kept."""

    region: str
    nodes: list[str]
    int8_ms: float
    float_ms: float
    float_speedup: float
    interval: tuple[float, float]
    kept: str  # INT8 or FLOAT

    def to_dict(self) -> dict[str, Any]:
        return {"region": self.region, "nodes": self.nodes, "int8_ms": round(self.int8_ms, 3),
                "float_ms": round(self.float_ms, 3), "float_speedup": round(self.float_speedup, 3),
                "interval": [round(v, 3) for v in self.interval], "kept": self.kept}


@dataclass(frozen=True)
class SpeedPlacement:
    """Every region's decision, the result's speed against the FP32 file and the seconds it all took."""

    decisions: list[RegionDecision] = field(default_factory=list)
    vs_fp32: SpeedCheck | None = None
    seconds: float = 0.0
    skipped: str | None = None  # why no region was timed
    bare: bool = False  # the float graph itself: no mix of integer kernels ran faster here

    @property
    def left_float(self) -> list[RegionDecision]:
        return [d for d in self.decisions if d.kept == FLOAT]

    def line(self) -> str:
        """One line: which regions stay integer, which were left float, and the result against FP32."""
        if self.skipped is not None:
            return f"Speed-aware placement: no region timed ({self.skipped})"
        kept = [f"{d.region} ({len(d.nodes)})" for d in self.decisions if d.kept == INT8]
        left = [f"{d.region} ({len(d.nodes)}, {d.float_speedup:.2f}x faster in float)" for d in self.left_float]
        parts = [f"integer: {', '.join(kept) or 'none'}"]
        if left:
            parts.append(f"left float: {', '.join(left)}")
        if self.bare:
            parts.append("every Q/DQ removed as well (no mix of integer kernels ran faster here than the float graph: "
                         "the file is the float graph)")
        if self.vs_fp32 is not None:
            parts.append(f"result {self.vs_fp32.speedup:.2f}x the FP32 file (95 % {self.vs_fp32.interval.low:.2f}-"
                         f"{self.vs_fp32.interval.high:.2f}x)")
        return f"Speed-aware placement, measured here in {self.seconds:.0f} s: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        if self.skipped is not None:
            return {"skipped": self.skipped, "line": self.line(),
                    "vs_fp32": None if self.vs_fp32 is None else self.vs_fp32.to_dict()}
        return {"regions": [d.to_dict() for d in self.decisions],
                "left_float": [d.region for d in self.left_float], "every_qdq_removed": self.bare,
                "vs_fp32": None if self.vs_fp32 is None else self.vs_fp32.to_dict(),
                "seconds": round(self.seconds, 1), "line": self.line(),
                "method": f"whole-model paired timing on ONNX Runtime's CPU provider, {ROUNDS} interleaved rounds per "
                          "region; a region is left float where that runs faster on the point estimate"}


def region_kind(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> str:
    """The region a weighted op belongs to, by the kernel ONNX Runtime picks for it."""
    if node.op_type in ("MatMul", "Gemm"):
        return "matmuls"
    if node.op_type == "ConvTranspose":
        return "transposed convolutions"
    group = attribute(node, "group", 1)
    weight = weights.get(node.input[1]) if len(node.input) > 1 else None
    dims = list(weight.dims) if weight is not None else []
    if group > 1:
        return "depthwise convolutions" if len(dims) > 1 and dims[1] == 1 else "grouped convolutions"
    if dims and all(d == 1 for d in dims[2:]):
        return "pointwise convolutions"
    return "dense convolutions"


def integer_regions(model: onnx.ModelProto) -> dict[str, list[str]]:
    """{region: its weighted ops} over the weighted ops of ``model`` whose weights are quantized (read through a
    DequantizeLinear of an initializer), largest region first."""
    graph = model.graph
    producer = producers_of(graph)
    weights = {t.name: t for t in graph.initializer}
    regions: dict[str, list[str]] = {}
    for node in graph.node:
        if node.op_type not in WEIGHTED_OPS or len(node.input) < 2:
            continue
        dq = producer.get(node.input[1])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in weights:
            continue
        regions.setdefault(region_kind(node, {**weights, node.input[1]: weights[dq.input[0]]}), []).append(node.name)
    return dict(sorted(regions.items(), key=lambda item: -len(item[1])))


def _dequantized(dq: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> np.ndarray:
    """A DequantizeLinear of initializers computed in numpy (per tensor or per axis)."""
    values = numpy_helper.to_array(weights[dq.input[0]]).astype(np.float64)
    scale = numpy_helper.to_array(weights[dq.input[1]]).astype(np.float64)
    zero = numpy_helper.to_array(weights[dq.input[2]]).astype(np.float64) if len(dq.input) > 2 and dq.input[2] \
        else np.zeros_like(scale)
    if scale.ndim == 1 and scale.size > 1:
        shape = [1] * values.ndim
        shape[attribute(dq, "axis", 1)] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return ((values - zero) * scale).astype(np.float32)


def left_float(model: onnx.ModelProto, fp32: onnx.ModelProto, nodes: Sequence[str]) -> onnx.ModelProto:
    """A copy of ``model`` with the weighted ops ``nodes`` in float: their weights and biases
    dequantized once into float initializers (the values the integer kernel used: AdaRound's or bias correction's
    choices kept), and each of their activation inputs read as the float tensor before its Q/DQ pair rather than
    through it. Both are needed:
    ONNX Runtime quantizes a float weight itself (its WeightBiasQuantization transformer) wherever a convolution sits
    between a DequantizeLinear and a QuantizeLinear. Where the quantizer folded an activation into the pair (a Relu
    or ReLU6 after a convolution is removed and its clamp left to the quantization), the float op reads that clamp
    as a Clip over the pair's range. A pair no other op reads then goes, and its producer writes float; the timing
    that decides a region measures that too. The output's Q/DQ stays for the integer ops after it."""
    result = copy.deepcopy(model)
    graph = result.graph
    chosen = set(nodes)
    producer = producers_of(graph)
    weights = {t.name: t for t in graph.initializer}
    fp32_producer = {out: n.op_type for n in fp32.graph.node for out in n.output}
    # A clamp an earlier call wrote (a region left float before) is read again, not written twice.
    clipped = {node.input[0]: node.output[0] for node in graph.node
               if node.op_type == "Clip" and node.output[0] == f"{node.input[0]}_clamped"}
    added: list[onnx.NodeProto] = []
    for node in graph.node:
        if node.name not in chosen:
            continue
        for index, name in enumerate(node.input):
            dq = producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear":
                continue
            if dq.input[0] in weights:
                floated = f"{name}_float"
                if floated not in weights:
                    weights[floated] = numpy_helper.from_array(_dequantized(dq, weights), floated)
                    graph.initializer.append(weights[floated])
                node.input[index] = floated
                continue
            q = producer.get(dq.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                continue
            value = q.input[0]
            source = producer.get(value)
            if source is not None and fp32_producer.get(value) != source.op_type:  # a folded activation: clamp
                if value not in clipped:
                    clipped[value] = _clamp(q, weights, graph, added)
                value = clipped[value]
            node.input[index] = value
    if added:  # each Clip goes right after its Q's producer: graph order stays topological
        _insert_after_producers(graph, added)
    prune_unread(graph)
    return result


def _clamp(q: onnx.NodeProto, weights: dict[str, onnx.TensorProto], graph: onnx.GraphProto,
           added: list[onnx.NodeProto]) -> str:
    """A Clip of ``q``'s input to the range its quantization represents (the clamp of a folded Relu or ReLU6)."""
    scale = float(numpy_helper.to_array(weights[q.input[1]]).reshape(-1)[0])
    zero_tensor = weights.get(q.input[2]) if len(q.input) > 2 and q.input[2] else None
    zero = numpy_helper.to_array(zero_tensor) if zero_tensor is not None else np.zeros((), np.uint8)
    info = np.iinfo(zero.dtype)
    point = float(zero.reshape(-1)[0])
    low, high = (info.min - point) * scale, (info.max - point) * scale
    name = f"{q.input[0]}_clamped"
    for bound, value in (("min", low), ("max", high)):
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, np.float32), f"{name}_{bound}"))
    added.append(onnx.helper.make_node("Clip", [q.input[0], f"{name}_min", f"{name}_max"], [name], name=name))
    return name


def _insert_after_producers(graph: onnx.GraphProto, added: list[onnx.NodeProto]) -> None:
    after = {node.input[0]: node for node in added}
    ordered: list[onnx.NodeProto] = []
    inputs = {i.name for i in graph.input}
    ordered += [after[name] for name in inputs if name in after]
    for node in graph.node:
        ordered.append(node)
        ordered += [after[out] for out in node.output if out in after]
    del graph.node[:]
    graph.node.extend(ordered)


def paired_timer(feed: dict[str, np.ndarray], threads: int, rounds: int = ROUNDS) -> Timer:
    """Time two models against each other on ONNX Runtime: the first's speed as a multiple of the second's. The
    sessions of the models last timed are kept (the current file and the FP32 one are timed against every
    candidate), so each model's graph is optimised once."""
    kept: dict[int, tuple[onnx.ModelProto, object]] = {}

    def made(model: onnx.ModelProto) -> object:
        if id(model) not in kept:
            kept[id(model)] = (model, session(model, threads))
        return kept[id(model)][1]

    def timer(candidate: onnx.ModelProto, reference: onnx.ModelProto) -> SpeedCheck:
        check = paired_speedup(made(candidate), made(reference), feed, threads=threads, rounds=rounds)
        for key in [key for key in kept if key not in (id(candidate), id(reference))]:
            del kept[key]
        return check

    return timer


def place_for_speed(model: onnx.ModelProto, fp32: onnx.ModelProto, timer: Timer,
                    float_graph: onnx.ModelProto | None = None) -> tuple[onnx.ModelProto, SpeedPlacement]:
    """``model`` with each region that runs faster in float left float (see the module), and the decisions;
    ``float_graph``: the float file every result is timed against and fallen back to (``fp32`` where None), the
    graph before the INT8 recipe's passes: scale_depthwise's gains are float Muls a float file does not need, and
    ONNX Runtime reorders the layout around each (MobileNetV2 at 224, written as that graph: 0.52x the exported
    FP32 file, 95 % 0.40-0.76x, in the model-zoo sweep of 2026-11-29)."""
    start = time.perf_counter()
    current = model
    decisions: list[RegionDecision] = []
    regions = integer_regions(model)
    if not regions:
        return model, SpeedPlacement(skipped="no weighted op runs on quantized weights")
    baseline = float_graph if float_graph is not None else fp32  # the float file every result is timed against
    placed = timer(model, baseline)
    if placed.reference_ms < MIN_FP32_MS:
        return model, SpeedPlacement(vs_fp32=placed, seconds=time.perf_counter() - start, skipped=(
            f"the FP32 file runs in {placed.reference_ms:.3g} ms, under {MIN_FP32_MS:g} ms: too short for a region's "
            "kernels to decide its timing"))
    for region, nodes in regions.items():
        candidate = left_float(current, fp32, nodes)
        check = timer(candidate, current)
        faster = check.speedup > 1.0
        decisions.append(RegionDecision(region, nodes, check.reference_ms, check.candidate_ms, check.speedup,
                                        (check.interval.low, check.interval.high), FLOAT if faster else INT8))
        if faster:
            current = candidate
    if current is not model and timer(current, model).speedup < 1.0:
        # Decisions one region at a time, each on a few noisy rounds, can add up to a slower file: checked once
        # against the file as placed, which is kept where it is faster.
        current = model
        decisions = [d if d.kept == INT8 else RegionDecision(
            d.region, d.nodes, d.int8_ms, d.float_ms, d.float_speedup, d.interval, INT8) for d in decisions]
    vs_fp32 = timer(current, baseline)
    integer = [d for d in decisions if d.kept == INT8]
    if vs_fp32.speedup < 1.0 and integer:
        # Slower than FP32 with the regions that each measured faster in integer: every region float, if faster.
        everything = left_float(current, fp32, [n for d in integer for n in d.nodes])
        check = timer(everything, current)
        if check.speedup > 1.0:
            current = everything
            decisions = [d if d.kept == FLOAT else RegionDecision(
                d.region, d.nodes, check.reference_ms, check.candidate_ms, check.speedup,
                (check.interval.low, check.interval.high), FLOAT) for d in decisions]
            vs_fp32 = timer(current, baseline)
    bare = False
    if vs_fp32.speedup < 1.0 and any(n.op_type == "QuantizeLinear" for n in current.graph.node):
        # Still slower than FP32 with every weighted op float: the Q/DQ left on elementwise ops, pooling and concats
        # (and the float ops an integer rewrite split an activation into) cost more than the integer kernels save.
        # The float graph itself, where faster: an INT8 file is never slower than FP32 for want of trying.
        candidate = baseline
        check = timer(candidate, current)
        if check.speedup > 1.0:
            current, bare = candidate, True
            decisions = [d if d.kept == FLOAT else RegionDecision(
                d.region, d.nodes, check.reference_ms, check.candidate_ms, check.speedup,
                (check.interval.low, check.interval.high), FLOAT) for d in decisions]
            vs_fp32 = timer(current, baseline)
    return current, SpeedPlacement(decisions, vs_fp32, time.perf_counter() - start, bare=bare)

