"""INT8 step ``high_precision``: with --high-precision fp16, the layers INT8 left float converted to FP16
(int8/steps/high_precision/algorithm.py) and measured against FP32 the way INT8 is (Q/DQ and FP16 as ONNX Runtime
computes them). A step made for speed: kept where its point loss is within the step rule's tolerance (1 point, or
what is left of the accuracy budget; on outputs with no task figure, where its error stays within what rounding
costs), always where the user asked for it by name; otherwise the float layers stay FP32 and the manifest says why.
With fp32 it only records the precision asked."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from trtpipe import console
from trtpipe.comparison import WITHIN, judge_budget
from trtpipe.optimize.int8.qdq.placement import float_nodes
from trtpipe.optimize.int8.qdq.profiles import high_precision_for
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome, measured
from trtpipe.optimize.int8.steps.budget.step import BudgetVerdict, say
from trtpipe.optimize.judging.step_rule import NOISE, SPEED, StepVerdict, judge_step
from trtpipe.vocab import Precision

# Placement rules whose nodes stay FP32 under --high-precision fp16 too. Post-processing reaches no INT8 kernel: it is
# a few elementwise and layout ops on the head's outputs, so FP16 would speed up little, and it computes what the
# model hands out (pixel coordinates, where FP16's step is 0.5 from 512 to 1024 and 1 from 1024 to 2048; the graph's
# outputs are FP32 anyway). A distribution's expectation (a DFL box side) is kept exact on purpose.
FP32_PLACEMENT_RULES = {"post-processing", "distribution-expectation"}


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
        from trtpipe.optimize.int8.steps.high_precision.algorithm import fp16_elsewhere

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
        """FP16 in the float layers kept, or refused with the reason: its point loss is beyond the tolerance (the
        step rule, on data FP16 was not fit to: it is fit to none), or its error is beyond what rounding costs on an
        output with no task figure. Asked for by name (``--high-precision fp16``), it is kept whatever the data say
        (one warning names the loss), unless its outputs are no longer finite."""
        result = outcome.candidate.check
        named = run.context.options.high_precision is Precision.FP16
        assert isinstance(outcome.record, HighPrecisionRecord)
        record = replace(outcome.record, verdict=verdict.to_dict() | ({"named": True} if named else {}))
        reason = None
        # What rounding may cost, on the worst cosine (a measured error, known before the data): FP16 may at most
        # double INT8's error, since a value it moves across a rounding boundary changes which integer a later Q writes.
        error = judge_step(replace(before.check, agreement=None), replace(result, agreement=None), SPEED)
        if not math.isfinite(result.cosine):
            reason = f"FP16 in the float layers breaks the outputs (worst cosine vs FP32 {result.cosine})"
        elif not error.kept and not named:
            reason = f"FP16 in the float layers: {error.why}"
        elif not verdict.kept and not named:
            reason = f"FP16 in the float layers: {verdict.why} ({verdict.claim()})"
        if reason is not None:
            console.warn(f"{reason}: they stay FP32 ({result.line()})")
            return Outcome(before, replace(record, dtype=str(Precision.FP32), reason=reason,
                                           fp16_high_precision=result.to_dict()))
        report = record.report or {}
        line = measured("high precision fp16", result) | {"kept": True} | verdict.to_dict()
        what = (f"INT8 with FP16 elsewhere ({report.get('fp16_nodes')} nodes FP16, {len(outcome.fp32_nodes)} kept "
                "FP32)")
        if not verdict.kept:
            console.warn(f"{what} was asked for (--high-precision fp16) and is kept, though {verdict.why}: "
                         f"{verdict.claim()}; {result.line()}")
        else:
            (console.success if verdict.change != NOISE else console.note)(
                f"{what}, kept: {verdict.claim()}; {result.line()}")
        budget = run.context.options.max_accuracy_drop
        within = judge_budget(result, budget) if budget is not None and run.context.evaluation is not None else None
        if within is not None and not (within.decision == WITHIN and within.sure):
            record = replace(record, budget=say(within, f"INT8 with FP16 elsewhere: {within.line}"))
        return Outcome(outcome.candidate, record, line, fp32_nodes=outcome.fp32_nodes)
