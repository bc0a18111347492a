"""INT8 step ``budget``: the candidate judged against --max-accuracy-drop on the held-out or eval data
(comparison.judge_budget), decided on the drop's best estimate as every choice is: kept as it is where the point
drop is within the budget, else with the fewest sensitive nodes kept in FP32 that bring it within
(int8/steps/budget/sensitivity.py). Where the drop's interval straddles the budget the line says "undecided"
(amber), with about how many samples would make it sure. It runs after the steps that improve INT8 without FP32
layers, so the budget needs as few FP32 nodes as they allow; it decides by the budget, not the step rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from trtpipe import console
from trtpipe.comparison import OVER, WITHIN, judge_budget
from trtpipe.comparison import BudgetVerdict as Judgement
from trtpipe.inputs import take
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome
from trtpipe.optimize.int8.steps.budget.fallback_search import FallbackAttempt
from trtpipe.optimize.int8.steps.budget.ranking import PROBE_SAMPLES
from trtpipe.optimize.int8.steps.budget.sensitivity import fall_back_until_within_budget, print_table
from trtpipe.optimize.judging.step_rule import StepVerdict


@dataclass(frozen=True)
class BudgetVerdict:
    """The budget's verdict as said: WITHIN or OVER on the point estimate (UNDECIDED: nothing measured it), the
    line, whether the interval is on the same side, and (not sure) the samples that would decide."""

    decision: str
    line: str
    needed: int | None = None
    sure: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"budget": {"decision": self.decision, "line": self.line, "sure": self.sure,
                           "decided_on": "the point estimate of the drop",
                           **({"samples_to_decide": self.needed} if not self.sure and self.needed else {})}}


def say(verdict: Judgement, line: str) -> BudgetVerdict:
    """The budget's verdict in one line (a ✓ only where it is within and sure; amber where the interval straddles the
    budget), for the record."""
    (console.success if verdict.decision == WITHIN and verdict.sure else console.warn)(line)
    return BudgetVerdict(verdict.decision, line, verdict.needed, verdict.sure)


@dataclass(frozen=True)
class BudgetRecord:
    """No verdict (no budget asked, no eval data, no task figure), or the verdict and, where the budget was over,
    the sensitivity ranking, the probe it was measured on and the attempts that found the nodes kept FP32."""

    verdict: BudgetVerdict | None = None
    fp32_layers: list[str] = field(default_factory=list)
    probe: dict[str, Any] | None = None
    sensitivity: list[dict[str, Any]] | None = None
    attempts: list[FallbackAttempt] | None = None

    def to_dict(self) -> dict[str, Any]:
        fallback = {} if self.sensitivity is None else {
            "sensitivity_probe": self.probe, "sensitivity": self.sensitivity, "fallback_attempts": self.attempts}
        return fallback | ({} if self.verdict is None else self.verdict.to_dict())


class Budget:
    name: ClassVar[str] = "budget"
    purpose: ClassVar[str | None] = None

    def wanted(self, run: Int8Run) -> bool:
        return run.context.options.max_accuracy_drop is not None and run.context.evaluation is not None

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        context = run.context
        calib, evaluation, budget = context.calib, context.evaluation, context.options.max_accuracy_drop
        if budget is None or evaluation is None or current.check.drop_pp is None:
            return Outcome(current, BudgetRecord())
        verdict = judge_budget(current.check, budget)
        if verdict.decision != OVER:
            return Outcome(current, BudgetRecord(say(verdict, f"INT8 vs FP32: {verdict.line}")))
        assert calib is not None
        console.warn(f"INT8 {verdict.line}: ranking layers by sensitivity")
        fallback = fall_back_until_within_budget(
            run.fp32, current.model, run.profile, probe=take(calib.images, 0, PROBE_SAMPLES), evaluation=evaluation,
            fp32_outputs=context.outputs(run.fp32, evaluation.images), task=context.task, decoder=context.decoder,
            budget_pp=budget, batch=context.static_batch, max_fp32_nodes=context.options.max_fp32_nodes,
            full_int8=current.check,
        )
        check = fallback.comparison
        print_table(fallback.ranking, fallback.excluded, attempts=fallback.attempts)
        verdict = judge_budget(check, budget)
        said = say(verdict, f"With {len(fallback.excluded)} layer(s) in FP32 ({', '.join(fallback.excluded)}): "
                            f"{verdict.line}; {check.line()}")
        record = BudgetRecord(
            said, list(fallback.excluded),
            {"samples": fallback.probe_samples, "measured_alone": fallback.measured_units},
            [{"nodes": list(unit), "error_removed": score, "kept": set(unit) <= set(fallback.excluded)}
             for unit, score in fallback.ranking], fallback.attempts)
        return Outcome(Candidate(fallback.model, check), record, fp32_nodes=tuple(fallback.excluded),
                       fp32_layers=tuple(fallback.excluded))

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
        return outcome  # decided by the budget (purpose None): the step rule never judges it
