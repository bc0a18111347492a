"""INT8 step ``integer_preactivations``: as many HardSwish pre-activations in uint8 (ONNX Runtime's integer
convolutions) as stay within the tolerance of float ones on the judging data
(int8/steps/preactivations/algorithm.py). It runs where the profile has such pre-activations, and chooses by its own
tolerance rather than the step rule."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from trtpipe import console
from trtpipe.comparison import Comparison
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome, measured
from trtpipe.optimize.int8.steps.preactivations.algorithm import TOLERANCE_PP, choose, gained, integer_preactivations
from trtpipe.optimize.judging.step_rule import StepVerdict


@dataclass(frozen=True)
class PreactivationsRecord:
    activations: int
    uint8: list[str]
    gained: list[str]  # pre-activations with a channel gain after them
    measured: list[dict[str, Any]]  # each mix tried and its figures

    def to_dict(self) -> dict[str, Any]:
        return {"integer_preactivations": {"activations": self.activations, "uint8": self.uint8,
                                           "tolerance_pp": TOLERANCE_PP, "gained": self.gained,
                                           "measured": self.measured}}


class IntegerPreactivations:
    name: ClassVar[str] = "integer_preactivations"
    purpose: ClassVar[str | None] = None

    def wanted(self, run: Int8Run) -> bool:
        return bool(integer_preactivations(run.fp32, run.profile))

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        activations = integer_preactivations(run.fp32, run.profile)
        total = len(activations)
        built: dict[frozenset[str], Candidate] = {frozenset(activations): current}

        def measure(uint8: list[str]) -> Comparison:
            key = frozenset(uint8)
            if key not in built:
                built[key] = run.compare(quantize(run.fp32, run.ranges, run.profile,
                                                  exclude=[a for a in activations if a not in key]))
            return built[key].check

        gains = gained(run.fp32, activations)
        with console.step("Measuring INT8 with float and with uint8 pre-activations..."):
            float_check = measure([])
            chosen, tried = choose(activations, gains, measure, current.check, float_check)
        result = built[frozenset(chosen)]
        uint8 = len(chosen)
        record = PreactivationsRecord(total, chosen, gains, [{"over": m.over, "uint8_from": m.start,
                                                              "uint8_to": m.stop} | m.check.to_dict() for m in tried])
        line = measured(f"uint8 pre-activations ({uint8} of {total})", result.check) | {"kept": uint8 > 0}
        figures = f"{result.check.line()}; all float: {float_check.line()}"
        if uint8 == total:
            console.note(f"{total} HardSwish pre-activations in uint8, so ONNX Runtime runs their convolutions in "
                         f"integer ({figures})")
            return Outcome(result, record, line)
        console.warn(f"uint8 pre-activations cost more than {TOLERANCE_PP} point(s) of float ones: {uint8} of {total} "
                     f"kept in uint8 ({len(gains)} with a channel gain after them), the convolutions before the "
                     f"others keep float outputs ({figures})")
        chosen_set = set(chosen)
        placement = {"float-preactivation": {
            "why": f"uint8 pre-activations measured more than {TOLERANCE_PP} point(s) below float ones",
            "nodes": [a for a in activations if a not in chosen_set]}}
        return Outcome(result, record, line, placement)

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
        return outcome  # chosen by its own tolerance (purpose None): the step rule never judges it
