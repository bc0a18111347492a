"""INT8 step ``high_precision``: with --high-precision fp16, the layers INT8 left float converted to FP16
(int8/high_precision.py) and measured against FP32 the way INT8 is (Q/DQ and FP16 as ONNX Runtime computes them).
A step made for speed: kept unless the step rule sees a loss beyond the noise, FP16 costs more than rounding (see
FP16_INT8_ERROR_FACTOR) or the accuracy budget no longer holds; otherwise the float layers stay FP32 and the
manifest says why. With fp32 it only records the precision asked."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from trtpipe import console
from trtpipe.comparison import OVER, WITHIN, judge_budget
from trtpipe.optimize.int8.placement import float_nodes
from trtpipe.optimize.int8.profiles import high_precision_for
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome, measured
from trtpipe.optimize.int8.steps.budget import BudgetVerdict, say
from trtpipe.optimize.step_rule import NOISE, SPEED, StepVerdict
from trtpipe.vocab import Precision

# Placement rules whose nodes stay FP32 under --high-precision fp16 too. Post-processing reaches no INT8 kernel: it is
# a few elementwise and layout ops on the head's outputs, so FP16 would speed up little, and it computes what the
# model hands out (pixel coordinates, where FP16's step is 0.5 from 512 to 1024 and 1 from 1024 to 2048; the graph's
# outputs are FP32 anyway). A distribution's expectation (a DFL box side) is kept exact on purpose.
FP32_PLACEMENT_RULES = {"post-processing", "distribution-expectation"}
# What FP16 in the float layers may cost, in 1 - worst cosine vs FP32: what the FP16 pass accepts (its MIN_COSINE,
# 0.999) on top of INT8's own error, which may also double: a value FP16 moves across a rounding boundary changes
# which integer a later Q writes, so the INT8 error is drawn afresh rather than added to. A conversion that breaks
# something (an underflow, an infinity) costs far more than that.
FP16_COSINE_SLACK = 0.001
FP16_INT8_ERROR_FACTOR = 2.0


@dataclass(frozen=True)
class HighPrecisionRecord:
    """The precision of the layers INT8 left float (as asked, and as kept), the conversion's report and both
    figures where FP16 was tried, the rule's verdict, and why FP32 stayed where it did."""

    dtype: str
    asked: str
    report: dict[str, Any] | None = None
    fp32_high_precision: dict[str, Any] | None = None  # the figure with the float layers in FP32
    verdict: dict[str, object] | None = None
    reason: str | None = None
    fp16_high_precision: dict[str, Any] | None = None  # the figure with them in FP16, where that was refused
    budget: BudgetVerdict | None = None  # the budget's verdict again, where FP16 left it undecided

    def to_dict(self) -> dict[str, Any]:
        section: dict[str, Any] = {"dtype": self.dtype, "asked": self.asked, **(self.report or {})}
        if self.fp32_high_precision is not None:
            section["fp32_high_precision"] = self.fp32_high_precision
        section |= self.verdict or {}
        if self.reason is not None:
            section["reason"] = self.reason
        if self.fp16_high_precision is not None:
            section["fp16_high_precision"] = self.fp16_high_precision
        return {"high_precision": section} | ({} if self.budget is None else self.budget.to_dict())


class HighPrecision:
    name: ClassVar[str] = "high_precision"
    purpose: ClassVar[str | None] = SPEED

    def wanted(self, run: Int8Run) -> bool:
        return True  # its record says the precision of the float layers, whichever it is

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        from trtpipe.errors import VerificationFailed
        from trtpipe.optimize.int8.high_precision import fp16_elsewhere

        context = run.context
        high = high_precision_for(context.target, context.options.high_precision)
        asked = HighPrecisionRecord(str(high), str(context.options.high_precision or "default"))
        if high is not Precision.FP16:
            return Outcome(current, asked)
        assert context.calib is not None
        keep = {name: f"INT8 placement rule '{rule}' keeps it float"
                for name, rule in float_nodes(run.fp32, run.profile).items() if rule in FP32_PLACEMENT_RULES}
        keep |= {name: "the accuracy budget kept it FP32" for name in run.fp32_layers}
        try:
            with console.step("Converting the layers INT8 left float to FP16..."):
                converted, report = fp16_elsewhere(current.model, context.batches(context.calib), keep=keep,
                                                   keep_io_fp32=context.options.keep_io_fp32,
                                                   source=context.calib.source)
        except VerificationFailed as error:
            console.warn(f"{error.message}; the layers INT8 left float stay FP32")
            return Outcome(current, replace(asked, dtype=str(Precision.FP32), reason=error.message))
        record = replace(asked, report=report.to_dict(), fp32_high_precision=current.check.to_dict())
        kept = tuple(item["node"] for item in report.kept_fp32)
        return Outcome(run.compare(converted), record, fp32_nodes=kept)

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
        """FP16 in the float layers kept, or refused with the reason: it costs more than rounding, the rule sees a
        loss beyond the noise (decided only on data FP16 was not fit to: it is fit to none), or the budget no longer
        holds."""
        check, result = before.check, outcome.candidate.check
        budget = run.context.options.max_accuracy_drop
        within = judge_budget(result, budget) if budget is not None and run.context.evaluation is not None else None
        assert isinstance(outcome.record, HighPrecisionRecord)
        record = replace(outcome.record, verdict=verdict.to_dict())
        reason = None
        if not math.isfinite(result.cosine) or \
                1.0 - result.cosine > FP16_INT8_ERROR_FACTOR * (1.0 - check.cosine) + FP16_COSINE_SLACK:
            reason = (f"FP16 in the float layers costs more than rounding: worst cosine vs FP32 {result.cosine:.5f}, "
                      f"{check.cosine:.5f} with them in FP32")
        elif not verdict.kept:
            reason = f"FP16 in the float layers loses accuracy beyond the noise: {verdict.words}"
        elif within is not None and within.decision == OVER:
            reason = f"FP16 in the float layers: {within.line}"
        if reason is not None:
            console.warn(f"{reason}: they stay FP32 ({result.line()})")
            return Outcome(before, replace(record, dtype=str(Precision.FP32), reason=reason,
                                           fp16_high_precision=result.to_dict()))
        report = record.report or {}
        line = measured("high precision fp16", result) | {"kept": True} | verdict.to_dict()
        shown = console.success if verdict.change != NOISE else console.note
        shown(f"INT8 with FP16 elsewhere ({report.get('fp16_nodes')} nodes FP16, {len(outcome.fp32_nodes)} kept "
              f"FP32), kept: {verdict.words}, {verdict.change}; {result.line()}")
        if within is not None and within.decision != WITHIN:
            record = replace(record, budget=say(within.decision, f"INT8 with FP16 elsewhere: {within.line}",
                                                within.needed))
        return Outcome(outcome.candidate, record, line, fp32_nodes=outcome.fp32_nodes)
