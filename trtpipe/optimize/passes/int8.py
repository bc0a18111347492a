"""Pass ``int8``: post-training static quantisation written as Q/DQ nodes, calibrated (or read from the range
cache), judged against FP32, then handed through the INT8 steps (``int8/steps/``: uint8 pre-activations, AdaRound
and bias correction when asked, the accuracy budget's FP32 fallback, FP16 in the float layers), each in the order
the steps' table gives and each judged by the step rule where it has a purpose; every step's typed record goes in
the pass's record."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx

from trtpipe import console
from trtpipe.artifact.records.calibration import calibration_path
from trtpipe.comparison import Comparison
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.graph.activations import channel_bounds
from trtpipe.optimize.int8.calibration.cache import cached_ranges
from trtpipe.optimize.int8.calibration.calibrate import Ranges, calibrate
from trtpipe.optimize.int8.calibration.saturation import channel_intervals, narrowed_per_channel
from trtpipe.optimize.int8.cross_fit import FoldChain, Pool, step_across_folds
from trtpipe.optimize.int8.qdq.placement import placement_record
from trtpipe.optimize.int8.qdq.profiles import QuantProfile, high_precision_for, profile_for
from trtpipe.optimize.int8.qdq.quantize import quantize
from trtpipe.optimize.int8.step import Candidate, Int8Run, Outcome, measured
from trtpipe.optimize.int8.steps import STEPS
from trtpipe.optimize.judging.evaluate import metered
from trtpipe.optimize.judging.step_rule import StepVerdict, judge_step, speed_tolerance_pp
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.records import Int8Calibration, Int8Record, RecipeRecord, StepRecord

FOLD_BUDGET_S = 120.0  # the folds' calibration, beyond the written file's own: above it, fewer folds judge
CALIBRATION_PASSES = 2  # passes of the model over each sample a calibration makes (ranges, then a histogram's)


def apply(fp32: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """INT8 for the target: calibrate, write Q/DQ, then run each INT8 step that is wanted, in the table's order
    (see the module); every figure on the way goes in the pass's record."""
    options, calib, evaluation = context.options, context.calib, context.evaluation
    assert calib is not None  # OptimizeOptions.validate: INT8 needs calibration data
    profile = profile_for(context.target, options.cpu_class)
    high_precision_for(context.target, options.high_precision)  # refused before any work, not after it
    console.note(f"INT8 for {context.target}: {profile.to_dict()['activations']} activations, "
                 f"{profile.to_dict()['weights']} weights ({profile.reduce_range_reason})")
    ranges, cache = _calibration_ranges(fp32, calib, profile, context)
    with console.step("Writing Q/DQ nodes..."):
        quantized = quantize(fp32, ranges, profile)
    folds = _folds(fp32, profile, context) if context.folds is not None else None
    run = Int8Run(fp32, ranges, profile, context, _judged(context, folds))
    pool = Pool(fp32, run, folds) if folds is not None else None
    current = run.compare(quantized) if pool is None else Candidate(quantized, pool.check(folds or [], [
        fold.current.model for fold in folds or []]))
    full_int8 = current.check
    # A measurement, not yet a verdict: the budget (and the stage's final check) may still refuse the result.
    console.note(f"INT8 ({context.target}) vs FP32 on {run.judge.source}: {full_int8.line()}")
    calibration = Int8Calibration(str(options.calib_method), calib.source, len(calib), calib.sha256, str(cache),
                                  len(ranges))
    lines = [measured("placement and graph passes", full_int8)]
    placement: dict[str, object] = {}
    records: list[StepRecord] = []
    for step in STEPS:
        if not step.wanted(run):
            continue

        def rule(before: Comparison, after: Comparison, purpose: str) -> StepVerdict:
            tolerance = speed_tolerance_pp(options.max_accuracy_drop if evaluation is not None else None,
                                           before.drop_pp)
            return judge_step(before, after, purpose, tolerance_pp=tolerance)

        if pool is not None and folds is not None:
            outcome, _ = step_across_folds(step, folds, current, current.check, pool, rule)
        else:
            outcome = step.apply(run, current)
            if step.purpose is not None and outcome.candidate is not current:
                outcome = step.settle(run, current, outcome, rule(current.check, outcome.candidate.check,
                                                                  step.purpose))
        current = _take(outcome, run, lines, placement, records)
    _record_folds(context, folds)
    recipe = context.recipe
    steps = [*recipe.passes, *recipe.steps] if recipe else []
    context.record(Int8Record(profile.to_dict(), calibration, full_int8, current.check,
                              RecipeRecord(str(recipe.quality) if recipe else None, steps, lines),
                              {**placement_record(fp32, profile, current.model), **placement}, tuple(records),
                              list(run.fp32_layers)))
    return current.model


def _take(outcome: Outcome, run: Int8Run, lines: list[dict[str, object]], placement: dict[str, object],
          records: list[StepRecord]) -> Candidate:
    """What a settled step leaves: its record, its recipe line and placement choices, the nodes it kept FP32 (in
    the context, for the manifest; the budget's in the run, for later steps); its candidate is the next step's."""
    records.append(outcome.record)
    if outcome.measured is not None:
        lines.append(outcome.measured)
    placement.update(outcome.placement)
    run.fp32_layers += outcome.fp32_layers
    run.context.fp32_nodes += [node for node in outcome.fp32_nodes if node not in run.context.fp32_nodes]
    return outcome.candidate


def _folds(fp32: onnx.ModelProto, profile: QuantProfile, context: PassContext) -> list[FoldChain]:
    """Cross-fitted (``context.folds``): each fold's chain, calibrated on the other folds' samples (not cached: the
    range cache keeps the written file's ranges) and quantized, to be judged on its own samples. Where the folds'
    calibration alone would cost more than ``FOLD_BUDGET_S`` (in work at the reference pace, optimize.work: never
    the clock, so the same data give the same folds under any load), fewer folds are used (at least one: the
    held-out split's cost), and one line says so: a large dense model keeps its time budget."""
    calib, evaluation, folds = context.calib, context.evaluation, context.folds
    assert calib is not None and evaluation is not None and folds is not None
    pace, _ = context.pass_seconds(fp32)
    chains: list[FoldChain] = []
    spent = 0.0
    with console.progress() as bar:
        task = bar.add_task(f"Cross-fitting: calibrating {len(folds)} folds", total=len(folds))
        for number, indices in enumerate(folds, start=1):
            others = np.setdiff1d(np.arange(len(calib)), indices)
            fit = calib.subset(others, f"fold {number}'s fit: {len(others)} of {calib.source}")
            judge = evaluation.subset(indices, f"fold {number} of {evaluation.source}")
            fold_context = replace(context, calib=fit, evaluation=judge, records=[], fp32_nodes=[], folds=None)
            with console.hushed(), metered() as meter:
                ranges, _ = _calibration_ranges(fp32, fit, profile, fold_context, cached=False)
                run = Int8Run(fp32, ranges, profile, fold_context, judge)
                chains.append(FoldChain(run, run.compare(quantize(fp32, ranges, profile)), indices))
            bar.advance(task)
            spent += (CALIBRATION_PASSES * len(fit) + meter.samples) * pace
            if number < len(folds) and spent / number * len(folds) > FOLD_BUDGET_S:
                break
    if len(chains) < len(folds):
        judged = sum(len(chain.indices) for chain in chains)
        console.warn(f"Cross-fitted in {len(chains)} of {len(folds)} folds: a fold costs about "
                     f"{spent / len(chains):.0f} s to calibrate (its work at the reference pace, optimize.work), and "
                     f"all {len(folds)} would take over {FOLD_BUDGET_S:.0f} s, so the figures are on the {judged} "
                     f"samples of those folds (the written file still calibrates on all {len(calib)}); give --eval "
                     "DATA to judge on other data instead")
    return chains


def _record_folds(context: PassContext, folds: list[FoldChain] | None) -> None:
    """Where fewer folds judged than were drawn (a time budget), the manifest's ``data.judged_on`` says so."""
    if not folds or context.folds is None or len(folds) == len(context.folds):
        return
    record = context.details.get("data", {}).get("judged_on")
    if isinstance(record, dict):
        record.update(samples=sum(len(fold.indices) for fold in folds), folds_used=len(folds),
                      folds=len(context.folds))


def _judged(context: PassContext, folds: list[FoldChain] | None) -> Dataset:
    """What the pass's figures are on: --eval or the held-out share, else (cross-fitted) the samples of the folds
    used, pooled; the calibration data itself where nothing was held out."""
    evaluation = context.evaluation or context.calib
    assert evaluation is not None
    if not folds or context.folds is None or len(folds) == len(context.folds):
        return evaluation
    indices = np.sort(np.concatenate([fold.indices for fold in folds]))
    calib = context.calib
    assert calib is not None
    return evaluation.subset(indices, f"{len(indices)} samples of {calib.source}, cross-fitted ({len(folds)} of "
                                      f"{len(context.folds)} folds)")


def _calibration_ranges(fp32: onnx.ModelProto, calib: Dataset, profile: QuantProfile,
                        context: PassContext, *, cached: bool = True) -> tuple[Ranges, Path]:
    """Each tensor's calibrated range, read from the range cache when the model, data and method are unchanged
    (a rerun skips calibration), else calibrated and cached (``cached`` False: calibrated, the cache untouched);
    narrowed per channel where a carried gain's pre-activation responds over per-channel intervals. Also the
    cache's path, for the record."""
    options = context.options
    cache = calibration_path(context.output, options.calib_cache)
    if cached:
        ranges = cached_ranges(fp32, lambda: context.batches(calib), calib.sha256, options.calib_method,
                               symmetric=profile.symmetric_activations, cache=cache)
    else:
        ranges = calibrate(fp32, context.batches(calib), options.calib_method,
                           symmetric=profile.symmetric_activations)
    intervals = channel_intervals(fp32)
    if intervals:  # per-channel responsive intervals (a carried gain's pre-activation): per-channel bounds needed
        ranges = narrowed_per_channel(ranges, intervals, channel_bounds(fp32, list(intervals), context.batches(calib)))
    return ranges, cache
