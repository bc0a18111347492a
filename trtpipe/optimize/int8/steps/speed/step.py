"""INT8 step ``speed_placement`` (target cpu): each kind of weighted op left float where ONNX Runtime runs it faster in
float than in integer on this machine, measured (int8/steps/speed/algorithm.py). It runs after the accuracy budget,
on its result, and only removes Q/DQ: what it leaves float computes the FP32 op on the integer kernel's own weights,
so it never costs accuracy and is not judged by the step rule; the candidate is measured again for the record. Every
region's times and decision go in the manifest (``int8.speed_placement``), summarised in one line.

Where INT8 is cross-fitted (a fixed calibration set without an accuracy budget, ``judging/held_out.py``) it runs on the
written file's chain only (``final_only``): the folds' files only feed the pooled accuracy figure, which leaving
regions float would not lower, so they judge with their regions as placed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, ClassVar

from trtpipe import console
from trtpipe.inputs import count, named, take
from trtpipe.onnx_info import graph_inputs
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome
from trtpipe.optimize.int8.steps.speed.algorithm import SpeedPlacement, paired_timer, place_for_speed
from trtpipe.optimize.judging.step_rule import StepVerdict
from trtpipe.vocab import Target

MAX_THREADS = 4  # as the written file's speed check (checks/written.py): this machine's cores, at most this many
PROTOBUF_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class SpeedRecord:
    placement: SpeedPlacement | None
    skipped: str | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.placement is None:
            return {"speed_placement": {"skipped": self.skipped}}
        return {"speed_placement": self.placement.to_dict()}


class SpeedPlacementStep:
    name: ClassVar[str] = "speed_placement"
    purpose: ClassVar[str | None] = None  # it removes Q/DQ only: decided by its own timing, not by accuracy
    final_only: ClassVar[bool] = True  # cross-fitted: timed once, on the written file's chain (int8/cross_fit.py)

    def wanted(self, run: Int8Run) -> bool:
        return run.profile.target is Target.CPU and run.context.calib is not None

    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        if current.model.ByteSize() >= PROTOBUF_LIMIT or run.fp32.ByteSize() >= PROTOBUF_LIMIT:
            return Outcome(current, SpeedRecord(None, "model over 2 GB: not timed in memory"))
        calib = run.context.calib
        batch = run.context.batches(calib)[0]
        static = run.context.static_batch
        sample = batch if static else take(batch, 0, 1)
        feed = named(sample, [i.name for i in graph_inputs(run.fp32)])
        threads = min(MAX_THREADS, os.cpu_count() or 1)
        with console.step("Measuring which regions run faster in integer than in float on ONNX Runtime..."):
            model, placement = place_for_speed(current.model, run.fp32, paired_timer(feed, threads),
                                               run.context.float_graph)
        console.note(placement.line() + f" (batch {count(sample)}, {threads} threads)")
        if model is current.model:
            return Outcome(current, SpeedRecord(placement))
        left = tuple(node for decision in placement.left_float for node in decision.nodes)
        return Outcome(run.compare(model), SpeedRecord(placement),
                       placement={"speed-float": {"why": "measured faster in float than in integer on ONNX Runtime "
                                                         "here (int8.speed_placement)", "nodes": list(left)}})

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
        return outcome  # purpose None: never judged by the step rule
