"""Cross-fitted INT8 (``optimize.held_out``): every calibration sample both fits and judges, never in the same run.

Each fold's chain calibrates and runs the INT8 steps on the other folds' samples and is judged on its own; the
per-sample outputs of all folds are pooled into one figure on every sample, and each step is kept or dropped on that
pooled figure (the step rule). A final chain, fit on all the samples, takes the same decisions: it is the file that
is written. Steps with no purpose (they decide by their own measure) decide in each chain for themselves.

Cross-fitting multiplies what a learned step costs (bias correction runs a pass per layer): each step is run on the
final chain first and its work counted (the samples its judging ran and the passes a learned step plans, at the
reference pace of optimize.work: never the clock, so the choice is the same under any load), and where its folds
would take more than ``STEP_BUDGET_S`` the later folds are let go
(at least one stays), the pooled figure narrowed to the folds kept, and one line says so. A step that declares
itself ``final_only`` (it only leaves regions float for speed, and so never lowers accuracy) runs on the final chain
alone: the folds' files, a little more quantized, then judge conservatively.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison, compare
from trtpipe.optimize.int8.step import Candidate, Int8Run, LearnedStep, Outcome, measured
from trtpipe.optimize.judging.evaluate import metered, outputs_and_axes

STEP_BUDGET_S = 120.0  # what one step may take across the folds, beyond the written file's own run of it


@dataclass
class FoldChain:
    """One fold: its run (fit on the other folds, judged on this one), its current candidate, its judging indices."""

    run: Int8Run
    current: Candidate
    indices: np.ndarray


class Pool:
    """The pooled figure of the folds' candidates: each fold's outputs on its own judging samples, scattered back
    into sample order and compared with FP32's outputs on all the samples. An output with no batch axis (a detector's
    anchors: the same in every run, trtpipe.runtime.batch_axes.join) is not scattered: each fold's is the whole."""

    def __init__(self, fp32: onnx.ModelProto, whole: Int8Run, folds: Sequence[FoldChain]) -> None:
        self.whole = whole
        self.judged = np.sort(np.concatenate([fold.indices for fold in folds]))  # whole.judge's samples, in order
        context = whole.context
        self.expected, axes = outputs_and_axes(fp32, whole.judge.images, batch=context.static_batch)
        self.per_sample = [axis is not None for axis in axes.axes]
        self.names = [o.name for o in fp32.graph.output]

    def check(self, folds: Sequence[FoldChain], models: Sequence[onnx.ModelProto]) -> Comparison:
        """``models`` (one per fold, each judged on its fold's samples) as one comparison on every sample."""
        pooled = [np.empty_like(array) for array in self.expected]
        for fold, model in zip(folds, models, strict=True):
            context = fold.run.context
            found = context.outputs(model, fold.run.judge.images, fold.run.profile.measured_as_written)
            positions = np.searchsorted(self.judged, fold.indices)
            for index, (whole, part) in enumerate(zip(pooled, found, strict=True)):
                if self.per_sample[index]:
                    whole[positions] = part
                else:
                    pooled[index] = part
        context = self.whole.context
        return compare(self.expected, pooled, self.whole.judge.labels, task=context.task, names=self.names,
                       decoder=context.decoder)

    def narrow(self, folds: list[FoldChain], keep: int, total: int) -> None:
        """Only the first ``keep`` folds judge from now on: the pooled samples (FP32's outputs, the judging data)
        narrowed to theirs. ``total``: how many folds there were, for the data's name."""
        del folds[keep:]
        kept = np.sort(np.concatenate([fold.indices for fold in folds]))
        positions = np.searchsorted(self.judged, kept)
        self.expected = [array[positions] if per_sample else array
                         for array, per_sample in zip(self.expected, self.per_sample, strict=True)]
        self.judged = kept
        judge = self.whole.judge
        source = judge.source.split(", cross-fitted")[0]
        self.whole.judge = judge.subset(positions, f"{len(kept)} samples of {source}, cross-fitted ({keep} of "
                                                   f"{total} folds)")


def step_work(step: object, run: Int8Run, current: Candidate, judged: int) -> float:
    """Seconds ``step`` costs on ``run`` at the reference pace (optimize.work: the same under any load): the samples
    its judging ran (``judged``, counted by evaluate.metered) and, for a learned step, the passes it plans."""
    pace, _ = run.context.pass_seconds(run.fp32)
    learned = step.planned(run, current)[2] if isinstance(step, LearnedStep) else 0.0
    return judged * pace + learned


def step_across_folds(step: object, folds: list[FoldChain], final: Candidate, pooled: Comparison, pool: Pool,
                      judge: Callable[[Comparison, Comparison, str], object]) -> tuple[Outcome, Comparison]:
    """Run ``step`` in every fold and on the final chain, decide it once on the pooled figure (``judge``: the step
    rule for the step's purpose) and move each fold to what was decided. Returns the final chain's settled outcome,
    its candidate carrying the pooled figure, and the pooled figure now."""
    whole = pool.whole
    name = getattr(step, "name", "a step")
    if getattr(step, "final_only", False):  # it never lowers accuracy: the folds' files, a little more quantized, judge
        proposed_only: Outcome = step.apply(whole, final)  # type: ignore[attr-defined]
        return replace(proposed_only, candidate=Candidate(proposed_only.candidate.model, pooled)), pooled
    # Each chain's own lines would be figures on one fold, or in-sample: the pooled decision below is what is said.
    with console.step(f"{name}: on all the samples, then in each of {len(folds)} folds, judged pooled..."), \
            console.hushed(), metered() as meter:
        proposed: Outcome = step.apply(whole, final)  # type: ignore[attr-defined]
    spent = step_work(step, whole, final, meter.samples)
    fold_cost = spent * 0.75  # a fold fits on three quarters of what the written file fits on
    affordable = max(1, int(STEP_BUDGET_S // fold_cost)) if fold_cost > 0 else len(folds)
    if affordable < len(folds):
        total = len(folds)
        pool.narrow(folds, affordable, total)
        with console.hushed():
            pooled = pool.check(folds, [fold.current.model for fold in folds])
        console.warn(f"{name} costs about {spent:.0f} s on all the samples (its work at the reference pace, "
                     f"optimize.work), so running it in all {total} folds would take about {fold_cost * total:.0f} s "
                     f"more: judged on {affordable} of {total} folds "
                     f"({len(pool.judged)} samples) from here on; give --eval DATA to judge on other data instead")
    with console.step(f"{name}: in each of {len(folds)} folds, judged pooled..."), console.hushed():
        outcomes = [step.apply(fold.run, fold.current) for fold in folds]  # type: ignore[attr-defined]
        after = pool.check(folds, [o.candidate.model for o in outcomes])
    purpose = step.purpose  # type: ignore[attr-defined]
    if purpose is None or proposed.candidate is final:
        for fold, outcome in zip(folds, outcomes, strict=True):
            fold.current = outcome.candidate
        settled = proposed
        now = after
    else:
        verdict = judge(pooled, after, purpose)
        offered = replace(proposed, candidate=Candidate(proposed.candidate.model, after))
        settled = step.settle(whole, Candidate(final.model, pooled), offered, verdict)  # type: ignore[attr-defined]
        kept = settled.candidate is offered.candidate
        for fold, outcome in zip(folds, outcomes, strict=True):
            fold.current = outcome.candidate if kept else fold.current
        settled = replace(settled, candidate=proposed.candidate if kept else final)
        now = after if kept else pooled
    line = settled.measured
    if line is not None and "step" in line:
        line = line | measured(str(line["step"]), now)
    return replace(settled, candidate=Candidate(settled.candidate.model, now), measured=line), now
