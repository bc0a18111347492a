"""What an INT8 step is: something that takes the current INT8 candidate and returns a new one with a typed record
of what it did (:class:`Int8Step`). The steps themselves live one per module in ``int8/steps/``, and the table in
``int8/steps/__init__.py`` names them in the order they run; the INT8 pass (``passes/int8.py``) walks that table.

A step made to gain accuracy or speed declares its ``purpose``; the pass then judges its candidate against the one
before it with the one rule that keeps or drops a step (``optimize.step_rule``) and hands the verdict to the step's
``settle``. A step with no purpose (the choice of uint8 pre-activations, the accuracy budget's fallback) decides by
its own measure and is never dropped by the rule.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison
from trtpipe.inputs import Batch, first, take
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.int8.calibration.calibrate import Ranges
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.judging.step_rule import ACCURACY, GAIN, LOSS, StepVerdict
from trtpipe.optimize.records import StepRecord


@dataclass(frozen=True)
class Candidate:
    """An INT8 model and its comparison with FP32 on the judging data."""

    model: onnx.ModelProto
    check: Comparison


@dataclass(frozen=True)
class Outcome:
    """What a step hands back: its candidate, its record, the line it adds to the recipe's measured figures (None:
    none), the placement choices it made (by rule name), the nodes it kept FP32 on purpose, and of those the layers
    the accuracy budget kept (the manifest's ``int8.fp32_layers``)."""

    candidate: Candidate
    record: StepRecord
    measured: dict[str, Any] | None = None
    placement: dict[str, Any] = field(default_factory=dict)
    fp32_nodes: tuple[str, ...] = ()
    fp32_layers: tuple[str, ...] = ()


@dataclass
class Int8Run:
    """What every step is handed: the FP32 model, the calibrated ranges, the quantization profile, the pass
    context, the data steps are judged on, and the layers the accuracy budget kept FP32."""

    fp32: onnx.ModelProto
    ranges: Ranges
    profile: QuantProfile
    context: Any  # the pass's passes.context.PassContext: int8/ may not import passes/ (import-linter contract)
    judge: Dataset
    fp32_layers: list[str] = field(default_factory=list)

    @property
    def decides(self) -> bool:
        """Whether a learned step can be judged on data it was not fit to (eval or held-out samples)."""
        return self.context.evaluation is not None

    def compare(self, model: onnx.ModelProto) -> Candidate:
        """``model`` against FP32 on the judging data, as this profile's runtime computes it."""
        return Candidate(model, self.context.compare(self.fp32, model, self.judge,
                                                     self.profile.measured_as_written))


class Int8Step(Protocol):
    """One INT8 step: its name (the recipe's and the manifest's), its purpose (``step_rule.ACCURACY`` or
    ``SPEED``: judged by the step rule; None: it decides by its own measure), whether it runs on this model,
    the step itself, and what it keeps once the rule has judged it."""

    name: ClassVar[str]
    purpose: ClassVar[str | None]

    def wanted(self, run: Int8Run) -> bool: ...

    def apply(self, run: Int8Run, current: Candidate) -> Outcome: ...

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome: ...


def measured(name: str, check: Comparison) -> dict[str, Any]:
    """One recipe step and the figure measured after it (the task's agreement, else the worst cosine)."""
    return {"step": name, "agreement": check.agreement, "agreement_name": check.agreement_name,
            "cosine": check.cosine}


@dataclass(frozen=True)
class Judged:
    """A learned step's record with the rule's decision: kept or not, and the verdict (or why none was made)."""

    name: str
    record: StepRecord
    kept: bool
    decision: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {self.name: self.record.to_dict() | {"kept": self.kept} | self.decision}


class LearnedStep(ABC):
    """A step that learns from the calibration samples to gain accuracy at no run-time cost (AdaRound, bias
    correction: the file keeps its nodes). The step rule (``optimize.step_rule``) decides on the point change on the
    judging data: kept unless it lowered the figure, since such a step rarely hurts and a 32-sample interval cannot
    show the gains it usually makes (bias correction's 80 -> 96.7 % mAP@0.5 on a YOLOv8-style detector). A step the
    user named (``--bias-correction``, ``--adaround``) is always applied; where the judging data suggest it hurt, one
    warning says so with the figures. Without judging data it was not fit to, the step is kept as the recipe asks,
    undecided, and the manifest says so. A subclass sets ``name`` (also the OptimizeOptions flag that asks for it),
    ``title`` (for people), ``passes`` and ``apply``, and ``samples`` where it wants other than 64."""

    name: ClassVar[str]
    title: ClassVar[str]
    purpose: ClassVar[str | None] = ACCURACY

    def wanted(self, run: Int8Run) -> bool:
        recipe = run.context.recipe
        return self.named(run) or (recipe is not None and self.name in recipe.steps)

    def named(self, run: Int8Run) -> bool:
        """Whether the user asked for this step by its flag (then it is applied whatever the data say)."""
        return bool(getattr(run.context.options, self.name))

    @abstractmethod
    def apply(self, run: Int8Run, current: Candidate) -> Outcome:
        """The candidate with what the step learned, and its record (before the rule judges it)."""

    samples: ClassVar[int] = 64  # the samples it learns from at 224x224 (fewer for larger inputs: learning_samples)

    @abstractmethod
    def passes(self, run: Int8Run, current: Candidate) -> float:
        """How many passes of the model over its samples the step makes (in the FP32 model's work): what its time
        budget is spent in."""

    def fixed_work(self, run: Int8Run, current: Candidate) -> float:
        """Passes of the model over one sample the step makes whatever its sample count (AdaRound's iterations)."""
        return 0.0

    def planned(self, run: Int8Run, current: Candidate) -> tuple[int, int, float]:
        """The samples it would like, the samples it learns from (as many as its passes can make within
        ``STEP_TIME_S`` at the FP32 model's pace, optimize.work: the same under any load) and the seconds that
        plans at that pace."""
        calib = run.context.calib
        assert calib is not None  # OptimizeOptions.validate: INT8 needs calibration data
        wanted = min(learning_samples(calib, self.samples), len(calib))
        passes = self.passes(run, current)
        pace = run.context.pass_seconds(run.fp32)[0] * FAKE_QUANT_COST
        taken = timed_samples(wanted, passes, pace)
        return wanted, taken, (passes * taken + self.fixed_work(run, current)) * pace

    def learning_batches(self, run: Int8Run, current: Candidate) -> list[Batch]:
        """The calibration samples the step learns from (:meth:`planned`), in batches; one line says when time, not
        the data, set the count."""
        wanted, taken, _ = self.planned(run, current)
        calib = run.context.calib
        assert calib is not None
        if taken < wanted:
            pace, reference = run.context.pass_seconds(run.fp32)
            pace *= FAKE_QUANT_COST
            passes = self.passes(run, current)
            how = "at the reference pace of its work" if reference else "as timed here"
            console.note(f"{getattr(self, 'title', self.name)} learns from {taken} of {wanted} calibration samples: "
                         f"its {passes:.0f} passes of the model at {pace:.2f} s a sample ({how}) would take "
                         f"{passes * wanted * pace / 60:.0f} min on all, over its {STEP_TIME_S:.0f} s budget "
                         "(a dense model's per-channel means and layer outputs come from every pixel of each)")
        return run.context.batches(calib.head(taken))

    def settle(self, run: Int8Run, before: Candidate, outcome: Outcome, verdict: StepVerdict) -> Outcome:
        decide, named = run.decides, self.named(run)
        kept = verdict.kept or not decide or named
        decision = verdict.to_dict() if decide else {"decided": False, "why": "judged only on the data it was fit to"}
        if named:
            decision |= {"named": True}
        record = Judged(self.name, outcome.record, kept, decision)
        line = measured(self.name, outcome.candidate.check) | {"kept": kept} | decision
        if not decide:
            return Outcome(outcome.candidate, record, line)
        if kept and verdict.kept:
            (console.success if verdict.change == GAIN else console.note)(
                f"{self.title} kept on {run.judge.source}: {verdict.claim()}")
            return Outcome(outcome.candidate, record, line)
        if kept:  # named by the user, and the data suggest it hurt: applied, and said
            console.warn(f"{self.title} was asked for (--{self.name.replace('_', '-')}) and is applied, though on "
                         f"{run.judge.source} the rule would drop it: {verdict.why} ({verdict.claim()})")
            return Outcome(outcome.candidate, record, line)
        say = console.warn if verdict.change == LOSS else console.note  # a loss the noise may explain: a note
        say(f"{self.title} dropped on {run.judge.source}: {verdict.why} ({verdict.claim()}); the model without it "
            "is kept")
        return Outcome(before, record, line)


REFERENCE_PIXELS = 224 * 224  # a learned step's sample count is for an ImageNet-sized input
MIN_LEARNING_SAMPLES = 8


STEP_TIME_S = 90.0  # what a learned step's passes of the model may take on the written file (the time budget)
# a learned step's passes run the graph as written, Q/DQ as float ops: 2.05x the optimised FP32 pass (median of 12
# zoo models' cpu files, 1.6-2.8x; docs/results/int8-decisions.md, 'Budgets in work')
FAKE_QUANT_COST = 2.0
MIN_TIMED_SAMPLES = 4  # below this a per-channel mean rests on too few images, whatever the time


def timed_samples(wanted: int, passes: float, pace: float) -> int:
    """Of ``wanted`` samples, as many as ``passes`` runs of the model at ``pace`` seconds a sample take within
    ``STEP_TIME_S`` (at least ``MIN_TIMED_SAMPLES``, at most ``wanted``)."""
    affordable = int(STEP_TIME_S / max(passes * pace, 1e-9))
    return max(min(wanted, MIN_TIMED_SAMPLES), min(wanted, affordable))


def learning_samples(dataset: Dataset, base: int) -> int:
    """How many calibration samples a learned step uses: ``base`` at 224x224, fewer for larger inputs (at least
    8), so a 640x640 detector costs about what an ImageNet classifier does rather than eight times as much time and
    activation memory."""
    sample = first(take(dataset.images, 0, 1))
    pixels = int(np.prod(sample.shape[2:])) if sample.ndim >= 4 else REFERENCE_PIXELS
    return max(MIN_LEARNING_SAMPLES, min(base, round(base * REFERENCE_PIXELS / max(pixels, 1))))

