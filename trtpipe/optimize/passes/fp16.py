"""Pass ``fp16``: FP16 mixed precision, decided by measurement.

Nodes stay FP32 for one of three reasons, and the report says which: they compute shape arithmetic from tensor
sizes (an anchor grid built from the feature map's run-time size: :mod:`trtpipe.optimize.graph.shape_subgraph`), their
operator is known to lose accuracy or overflow in half precision (exponentials, logarithms, powers, long
reductions, normalisations), or their activations on calibration data came near FP16's largest finite value
(65,504) — measured, not guessed. The conversion itself is ONNX Runtime's float16 converter, which inserts the
Casts at the FP32/FP16 borders.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import onnx

from trtpipe import console
from trtpipe.comparison import OVER, judge_budget
from trtpipe.errors import VerificationFailed
from trtpipe.graph_index import producers_of
from trtpipe.inputs import Batch
from trtpipe.optimize.graph.activations import observe
from trtpipe.optimize.graph.fp16_limits import FP16_MAX, OVERFLOW_MARGIN, UNSAFE_FP16_OPS, remove_fp16_round_trips
from trtpipe.optimize.graph.shape_subgraph import shape_computations
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import Fp16Record
from trtpipe.runtime.registry import quantization_tools

# FP16 keeps ~3 significant digits; a conversion below this cosine has lost more than rounding.
MIN_COSINE = 0.999

SHAPE_REASON = ("shape computation from tensor sizes and constants (an anchor grid, a reshape target): kept in its "
                "exporter's types, as FP16 rounds integers past 2048")


@dataclass
class Fp16Report:
    keep_io_fp32: bool
    kept_fp32: list[dict[str, Any]] = field(default_factory=list)
    calibration: str | None = None
    max_activation: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"keep_io_fp32": self.keep_io_fp32, "calibration": self.calibration,
                "max_activation": self.max_activation, "kept_fp32": self.kept_fp32}


def convert_fp16(
    model: onnx.ModelProto, calibration: list[Batch], *, keep_io_fp32: bool = True, source: str = ""
) -> tuple[onnx.ModelProto, Fp16Report]:
    """Convert ``model`` to mixed FP16; ``calibration`` batches decide which nodes overflow."""
    tools = quantization_tools()
    if any(not node.name for node in model.graph.node):  # the converter blocks by node name
        raise ValueError("every node needs a name before FP16 conversion")
    report = Fp16Report(keep_io_fp32, calibration=source)
    outputs_of = producers_of(model.graph)
    with console.progress() as bar:
        task = bar.add_task("Measuring activation ranges for FP16", total=len(calibration))
        stats = observe(model, list(outputs_of), calibration, on_batch=lambda: bar.advance(task))
    report.max_activation = max((s.abs_max for s in stats.values()), default=0.0)

    blocked_nodes: list[str] = []
    shape_nodes = {node.name for node in shape_computations(model)}
    for node in model.graph.node:
        # An output that overflows FP16 must be computed in FP32; so must a node that *reads* one, or the Cast to
        # FP16 in front of it would turn the value into infinity.
        largest_out = max((stats[o].abs_max for o in node.output if o in stats), default=0.0)
        largest_in = max((stats[i].abs_max for i in node.input if i in stats), default=0.0)
        if node.name in shape_nodes:
            reason = SHAPE_REASON
        elif node.op_type in UNSAFE_FP16_OPS:
            reason = f"operator {node.op_type}: {UNSAFE_FP16_OPS[node.op_type]}"
        elif largest_out > FP16_MAX * OVERFLOW_MARGIN:
            reason = f"activations reach {largest_out:.4g} on calibration data (FP16 max {FP16_MAX:g})"
        elif largest_in > FP16_MAX * OVERFLOW_MARGIN:
            reason = f"reads activations of {largest_in:.4g} on calibration data (FP16 max {FP16_MAX:g})"
        else:
            continue
        blocked_nodes.append(node.name)
        report.kept_fp32.append({"node": node.name, "op": node.op_type, "reason": reason})

    converted = tools.to_float16(
        model, keep_io_types=keep_io_fp32, op_block_list=sorted(set(tools.float16_block_list()) | set(UNSAFE_FP16_OPS)),
        node_block_list=blocked_nodes,
    )
    removed = remove_fp16_round_trips(converted)
    if removed:
        console.note(f"FP16: {removed} round trip(s) through FP16 between nodes kept in FP32 removed")
    return converted, report


def apply(model: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """FP16 mixed precision of ``model``, checked against it on the eval (or calibration) data."""
    assert context.calib is not None  # OptimizeOptions.validate: FP16 needs calibration data
    converted, report = convert_fp16(model, context.batches(context.calib), keep_io_fp32=context.options.keep_io_fp32,
                                     source=context.calib.source)
    kept = report.kept_fp32
    console.note(f"FP16: {len(kept)} node(s) kept in FP32" + (":" if kept else " (no overflow risk measured)"))
    shape = [item for item in kept if item["reason"] == SHAPE_REASON]
    if shape:  # an anchor grid is dozens of nodes: one line for all of them
        console.note(f"  {len(shape)} node(s) ({', '.join(sorted({item['op'] for item in shape}))}): {SHAPE_REASON}")
    for item in kept:
        if item["reason"] != SHAPE_REASON:
            console.note(f"  {item['node']} ({item['op']}): {item['reason']}")
    check = context.compare(model, converted, context.evaluation or context.calib)
    context.record(Fp16Record(report.keep_io_fp32, report.kept_fp32, report.calibration, report.max_activation, check))
    context.fp32_nodes += [item["node"] for item in kept]
    if check.cosine < MIN_COSINE:
        raise VerificationFailed(f"FP16 output differs from FP32 beyond rounding (cosine {check.cosine:.5f} < "
                                 f"{MIN_COSINE}): {check.line()}.")
    budget = context.options.max_accuracy_drop
    verdict = judge_budget(check, budget) if budget is not None and check.drop_pp is not None else None
    if verdict is not None and verdict.decision == OVER:  # its best estimate beyond the budget
        raise VerificationFailed(f"FP16 {verdict.line}: {check.line()}.")
    if verdict is not None and verdict.undecided:
        console.warn(f"FP16 vs FP32: {check.line()}; {verdict.line}")
        return converted
    console.success(f"FP16 vs FP32: {check.line()}")  # only once it has passed: no ✓ before an Error
    return converted
