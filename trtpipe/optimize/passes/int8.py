"""Pass ``int8``: post-training static quantisation written as Q/DQ nodes, calibrated (or read from the range
cache), improved by AdaRound and bias correction when asked, judged against FP32, and only then brought within
the accuracy budget by keeping the most sensitive nodes FP32 (the learned rounding of the others is kept), so
the budget needs as few FP32 nodes as the best INT8 recipe allows."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison
from trtpipe.inputs import count, first, take
from trtpipe.optimize.activations import channel_bounds
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.int8.cache import cache_key, load_ranges, save_ranges
from trtpipe.optimize.int8.calibrate import Ranges, calibrate
from trtpipe.optimize.int8.placement import float_nodes, placement_record
from trtpipe.optimize.int8.preactivations import TOLERANCE_PP, choose, gained, integer_preactivations
from trtpipe.optimize.int8.profiles import QuantProfile, high_precision_for, profile_for
from trtpipe.optimize.int8.quantize import quantize
from trtpipe.optimize.int8.ranking import PROBE_SAMPLES
from trtpipe.optimize.int8.saturation import channel_intervals, narrowed_per_channel
from trtpipe.optimize.int8.sensitivity import fall_back_until_within_budget, print_table
from trtpipe.optimize.passes.context import PassContext
from trtpipe.optimize.passes.registry import PrecisionPass
from trtpipe.optimize.records import Int8Calibration, Int8Record
from trtpipe.vocab import Precision

PASS = PrecisionPass(Precision.INT8, "INT8 Q/DQ for the target (tensorrt: S8S8 symmetric; cpu: U8S8), with an "
                     "accuracy budget")


def apply(fp32: onnx.ModelProto, context: PassContext) -> onnx.ModelProto:
    """INT8 for the target, in the order the module's docstring gives: calibrate, write Q/DQ, run the recipe's
    steps, keep nodes in FP32 until the accuracy budget holds, then FP16 in the layers left float where asked;
    every figure on the way goes in the pass's record."""
    options, calib, evaluation = context.options, context.calib, context.evaluation
    assert calib is not None  # OptimizeOptions.validate: INT8 needs calibration data
    profile = profile_for(context.target, options.cpu_class)
    high = high_precision_for(context.target, options.high_precision)  # refused before any work, not after it
    console.note(f"INT8 for {context.target}: {profile.to_dict()['activations']} activations, "
                 f"{profile.to_dict()['weights']} weights ({profile.reduce_range_reason})")
    ranges, cache = _calibration_ranges(fp32, calib, profile, context)
    with console.step("Writing Q/DQ nodes..."):
        quantized = quantize(fp32, ranges, profile)
    judge = evaluation or calib
    full_int8 = context.compare(fp32, quantized, judge, profile.evaluation_optimization)
    # A measurement, not yet a verdict: the budget (and the stage's final check) may still refuse the result.
    console.note(f"INT8 ({context.target}) vs FP32 on {judge.source}: {full_int8.line()}")
    calibration = Int8Calibration(str(options.calib_method), calib.source, len(calib), calib.sha256, str(cache),
                                  len(ranges))
    section = _new_section(context, full_int8)
    quantized, check = _recipe_steps(fp32, ranges, profile, (quantized, full_int8), context, judge, section)
    quantized, check = _within_budget(fp32, (quantized, check), profile, context, section)
    section["high_precision"] = {"dtype": str(high), "asked": str(options.high_precision or "default")}
    if high is Precision.FP16:
        quantized, check = _fp16_elsewhere(fp32, quantized, check, context, judge, profile, section)
    section["placement"] = {**placement_record(fp32, profile, quantized), **section["placement"]}  # + the choices
    fp32_layers = section.pop("fp32_layers")
    context.record(Int8Record(profile.to_dict(), calibration, full_int8, check, fp32_layers, section))
    return quantized


def _calibration_ranges(fp32: onnx.ModelProto, calib: Dataset, profile: QuantProfile,
                        context: PassContext) -> tuple[Ranges, Path]:
    """Each tensor's calibrated range, read from the range cache when the model, data and method are unchanged
    (a rerun skips calibration), else calibrated and cached; narrowed per channel where a carried gain's
    pre-activation responds over per-channel intervals. Also the cache's path, for the record."""
    options = context.options
    model_sha = hashlib.sha256(fp32.SerializeToString()).hexdigest()
    key = cache_key(model_sha, calib.sha256, options.calib_method, profile.symmetric_activations)
    cache = options.calib_cache or context.output.with_suffix(".calib.json")
    ranges = load_ranges(cache, key)
    if ranges is not None:
        console.note(f"Reusing calibration ranges from {cache} (model and data unchanged)")
    else:
        ranges = calibrate(fp32, context.batches(calib), options.calib_method, symmetric=profile.symmetric_activations)
        save_ranges(cache, key, ranges)
    intervals = channel_intervals(fp32)
    if intervals:  # per-channel responsive intervals (a carried gain's pre-activation): per-channel bounds needed
        ranges = narrowed_per_channel(ranges, intervals, channel_bounds(fp32, list(intervals), context.batches(calib)))
    return ranges, cache


def _new_section(context: PassContext, full_int8: Comparison) -> dict[str, Any]:
    """The pass's section before any step: each step's own record (Int8Record.steps) is read and extended by the
    steps; the recipe that runs and its first figure, full INT8 after placement and the graph passes."""
    recipe = context.recipe
    return {
        "placement": {},  # the rules' record joins the choices made on the way, from the final model at the end
        "fp32_layers": [],
        "recipe": {"quality": str(recipe.quality) if recipe else None, "steps": recipe.steps() if recipe else [],
                   "measured": [_step("placement and graph passes", full_int8)]},
    }


def _recipe_steps(fp32: onnx.ModelProto, ranges: Ranges, profile: QuantProfile,
                  current: tuple[onnx.ModelProto, Comparison], context: PassContext, judge: Dataset,
                  section: dict[str, Any]) -> tuple[onnx.ModelProto, Comparison]:
    """The steps that improve INT8 without FP32 layers, each kept only where it measures better: uint8 HardSwish
    pre-activations (where the profile has them), then AdaRound and bias correction when asked or the recipe
    has them. Without eval data a learned step is judged on what it was fit to, so it is kept undecided."""
    options, recipe, decide = context.options, context.recipe, context.evaluation is not None
    quantized, check = current
    preactivations = integer_preactivations(fp32, profile)
    if preactivations:
        quantized, check = _choose_preactivations(fp32, ranges, profile, preactivations, (quantized, check), context,
                                                  judge, section)
    if options.adaround or (recipe is not None and recipe.adaround):
        quantized, check = _keep_if_better("adaround", (quantized, check),
                                           _learn_rounding(fp32, quantized, context, judge, profile), judge, section,
                                           decide=decide)
    if options.bias_correction or (recipe is not None and recipe.bias_correction):
        quantized, check = _keep_if_better("bias_correction", (quantized, check),
                                           _correct_biases(fp32, quantized, context, judge, profile), judge, section,
                                           decide=decide)
    return quantized, check


def _within_budget(fp32: onnx.ModelProto, current: tuple[onnx.ModelProto, Comparison], profile: QuantProfile,
                   context: PassContext, section: dict[str, Any]) -> tuple[onnx.ModelProto, Comparison]:
    """``current`` as it is where it meets --max-accuracy-drop on the eval data (or nothing judges a budget), else
    with the fewest sensitive nodes kept in FP32 that bring it within (sensitivity.py); the ranking, attempts and
    nodes kept go in the section and the context's FP32 nodes."""
    quantized, check = current
    calib, evaluation, budget = context.calib, context.evaluation, context.options.max_accuracy_drop
    drop = check.drop_pp
    if budget is None or evaluation is None or drop is None or not drop > budget:  # (a NaN drop is not over)
        return current
    assert calib is not None
    console.warn(f"INT8 loses {drop:.2f} pp (budget {budget} pp): ranking layers by sensitivity")
    fallback = fall_back_until_within_budget(
        fp32, quantized, profile, probe=take(calib.images, 0, PROBE_SAMPLES), evaluation=evaluation,
        fp32_outputs=context.outputs(fp32, evaluation.images), task=context.task, decoder=context.decoder,
        budget_pp=budget, batch=context.static_batch, max_fp32_nodes=context.options.max_fp32_nodes,
        full_int8=check,
    )
    quantized, check = fallback.model, fallback.comparison
    print_table(fallback.ranking, fallback.excluded, attempts=fallback.attempts)
    section["fp32_layers"] = fallback.excluded
    section["sensitivity_probe"] = {"samples": fallback.probe_samples, "measured_alone": fallback.measured_units}
    section["sensitivity"] = [{"nodes": list(unit), "error_removed": score,
                               "kept": set(unit) <= set(fallback.excluded)} for unit, score in fallback.ranking]
    section["fallback_attempts"] = fallback.attempts
    context.fp32_nodes += fallback.excluded
    console.success(f"Within budget with {len(fallback.excluded)} layer(s) in FP32 "
                    f"({', '.join(fallback.excluded)}): {check.line()}")
    return quantized, check


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


def _fp16_elsewhere(fp32: onnx.ModelProto, quantized: onnx.ModelProto, check: Comparison, context: PassContext,
                    judge: Dataset, profile: QuantProfile,
                    section: dict[str, Any]) -> tuple[onnx.ModelProto, Comparison]:
    """The INT8 result with the layers it left float in FP16 (high_precision.py), measured against FP32 the way
    INT8 is (Q/DQ and FP16 as ONNX Runtime computes them). Kept only if FP16 costs no more than rounding (see
    FP16_INT8_ERROR_FACTOR) and the accuracy budget still holds;
    otherwise the float layers stay FP32 and the manifest says why."""
    from trtpipe.errors import VerificationFailed
    from trtpipe.optimize.int8.high_precision import fp16_elsewhere

    assert context.calib is not None
    record = section["high_precision"]
    keep = {name: f"INT8 placement rule '{rule}' keeps it float" for name, rule in float_nodes(fp32, profile).items()
            if rule in FP32_PLACEMENT_RULES}
    keep |= {name: "the accuracy budget kept it FP32" for name in section["fp32_layers"]}
    try:
        with console.step("Converting the layers INT8 left float to FP16..."):
            converted, report = fp16_elsewhere(quantized, context.batches(context.calib), keep=keep,
                                               keep_io_fp32=context.options.keep_io_fp32, source=context.calib.source)
    except VerificationFailed as error:
        console.warn(f"{error.message}; the layers INT8 left float stay FP32")
        record.update(dtype=str(Precision.FP32), reason=error.message)
        return quantized, check
    result = context.compare(fp32, converted, judge, profile.evaluation_optimization)
    record.update(report.to_dict(), fp32_high_precision=check.to_dict())
    budget, drop = context.options.max_accuracy_drop, result.drop_pp
    reason = None
    if not math.isfinite(result.cosine) or \
            1.0 - result.cosine > FP16_INT8_ERROR_FACTOR * (1.0 - check.cosine) + FP16_COSINE_SLACK:
        reason = (f"FP16 in the float layers costs more than rounding: worst cosine vs FP32 {result.cosine:.5f}, "
                  f"{check.cosine:.5f} with them in FP32")
    elif budget is not None and context.evaluation is not None and drop is not None and drop > budget:
        reason = f"FP16 in the float layers loses {drop:.2f} pp, over the budget of {budget} pp"
    if reason is not None:
        console.warn(f"{reason}: they stay FP32 ({result.line()})")
        record.update(dtype=str(Precision.FP32), reason=reason, fp16_high_precision=result.to_dict())
        return quantized, check
    context.fp32_nodes += [item["node"] for item in report.kept_fp32 if item["node"] not in context.fp32_nodes]
    section["recipe"]["measured"].append(_step("high precision fp16", result))
    console.success(f"INT8 with FP16 elsewhere ({report.fp16_nodes} nodes FP16, {len(report.kept_fp32)} kept FP32): "
                    f"{result.line()} (with them in FP32: {check.line()})")
    return converted, result


def _score(check: Comparison) -> tuple[float, float]:
    """What a recipe step is judged by: the task's agreement with FP32 (top-1, mAP, F1), then the worst cosine."""
    return (-1.0 if check.agreement is None else check.agreement, check.cosine)


def _keep_if_better(step: str, before: tuple[onnx.ModelProto, Comparison],
                    after: tuple[onnx.ModelProto, Comparison, dict[str, Any]], judge: Dataset,
                    section: dict[str, Any], *, decide: bool = True) -> tuple[onnx.ModelProto, Comparison]:
    """The model after ``step`` where it measured at least as well as before it, else the model before it: a
    learned step fits the calibration samples and can lose on the task measure (bias correction cost the real
    PP-PicoDet four points of mAP@0.5 on the tensorrt target), and a recipe that keeps a loss is not the best one.
    Both figures and the decision go in the manifest. Not ``decide``: ``judge`` is the data the step was fit to
    (too few samples to hold any out), where it always looks better, so the step is kept as the recipe asks,
    undecided, and the manifest says so."""
    model, check, record = after
    kept = _score(check) >= _score(before[1]) or not decide
    decided = {} if decide else {"decided": False, "why": "judged only on the data it was fit to"}
    section[step] = record | {"kept": kept} | decided
    section["recipe"]["measured"].append(_step(step, check) | {"kept": kept} | decided)
    if kept:
        return model, check
    name, old = step.replace("_", " "), before[1]
    figure = (f"{check.agreement_name} {100 * old.agreement:.2f} % → {100 * check.agreement:.2f} %"
              if old.agreement is not None and check.agreement is not None and old.agreement != check.agreement
              else f"worst cosine {old.cosine:.6f} → {check.cosine:.6f}")
    console.warn(f"{name[0].upper()}{name[1:]} made INT8 worse on {judge.source} ({figure}); the model without it "
                 "is kept")
    return before


def _choose_preactivations(fp32: onnx.ModelProto, ranges: Ranges, profile: QuantProfile, activations: list[str],
                           integer: tuple[onnx.ModelProto, Comparison], context: PassContext, judge: Dataset,
                           section: dict[str, Any]) -> tuple[onnx.ModelProto, Comparison]:
    """INT8 with as many of its HardSwish pre-activations in uint8 (ONNX Runtime's integer convolutions) as stay
    within the tolerance of float ones on ``judge`` (preactivations.py); every figure and the choice go in the
    manifest."""
    count = len(activations)
    built: dict[frozenset[str], tuple[onnx.ModelProto, Comparison]] = {frozenset(activations): integer}

    def measure(uint8: list[str]) -> Comparison:
        key = frozenset(uint8)
        if key not in built:
            model = quantize(fp32, ranges, profile, exclude=[a for a in activations if a not in key])
            built[key] = model, context.compare(fp32, model, judge, profile.evaluation_optimization)
        return built[key][1]

    gains = gained(fp32, activations)
    with console.step("Measuring INT8 with float and with uint8 pre-activations..."):
        float_check = measure([])
        chosen, tried = choose(activations, gains, measure, integer[1], float_check)
    quantized, check = built[frozenset(chosen)]
    uint8 = len(chosen)
    section["integer_preactivations"] = {
        "activations": count, "uint8": chosen, "tolerance_pp": TOLERANCE_PP, "gained": gains,
        "measured": [{"over": m.over, "uint8_from": m.start, "uint8_to": m.stop} | m.check.to_dict() for m in tried]}
    section["recipe"]["measured"].append(_step(f"uint8 pre-activations ({uint8} of {count})", check)
                                         | {"kept": uint8 > 0})
    figures = f"{check.line()}; all float: {float_check.line()}"
    if uint8 == count:
        console.note(f"{count} HardSwish pre-activations in uint8, so ONNX Runtime runs their convolutions in "
                     f"integer ({figures})")
    else:
        console.warn(f"uint8 pre-activations cost more than {TOLERANCE_PP} point(s) of float ones: {uint8} of {count} "
                     f"kept in uint8 ({len(gains)} with a channel gain after them), the convolutions before the "
                     f"others keep float outputs ({figures})")
        uint8_set = set(chosen)
        section["placement"]["float-preactivation"] = {
            "why": f"uint8 pre-activations measured more than {TOLERANCE_PP} point(s) below float ones",
            "nodes": [a for a in activations if a not in uint8_set]}
    return quantized, check


def _step(name: str, check: Comparison) -> dict[str, Any]:
    """One recipe step and the figure measured after it (the task's agreement, else the worst cosine)."""
    return {"step": name, "agreement": check.agreement, "agreement_name": check.agreement_name,
            "cosine": check.cosine}


BIAS_CORRECTION_SAMPLES = 64
ADAROUND_SAMPLES = 64
REFERENCE_PIXELS = 224 * 224  # the sample counts above are for an ImageNet-sized input
MIN_LEARNING_SAMPLES = 8


def learning_samples(dataset: Dataset, base: int) -> int:
    """How many calibration samples a learned step uses: ``base`` at 224x224, fewer for larger inputs (at least
    8), so a 640x640 detector costs about what an ImageNet classifier does rather than eight times as much time and
    activation memory."""
    sample = first(take(dataset.images, 0, 1))
    pixels = int(np.prod(sample.shape[2:])) if sample.ndim >= 4 else REFERENCE_PIXELS
    return max(MIN_LEARNING_SAMPLES, min(base, round(base * REFERENCE_PIXELS / max(pixels, 1))))


def _learn_rounding(fp32: onnx.ModelProto, quantized: onnx.ModelProto, context: PassContext, judge: Dataset,
                    profile: QuantProfile) -> tuple[onnx.ModelProto, Comparison, dict[str, Any]]:
    """The chosen INT8 mix with AdaRound's learned weight rounding, and the figures after."""
    from trtpipe.optimize.int8.adaround import adaround, rounded_layers

    assert context.calib is not None
    batches = context.batches(context.calib.head(learning_samples(context.calib, ADAROUND_SAMPLES)))
    with console.progress() as bar:
        task = bar.add_task("AdaRound: learning each layer's weight rounding", total=len(rounded_layers(quantized)))
        rounded, flipped = adaround(fp32, quantized, batches, iterations=context.options.adaround_iterations,
                                    on_layer=lambda: bar.advance(task))
    check = context.compare(fp32, rounded, judge, profile.evaluation_optimization)
    share = sum(flipped.values()) / max(1, len(flipped))
    console.success(f"AdaRound ({len(flipped)} layers, {100 * share:.1f} % of weights rounded the other way): "
                    f"{check.line()}")
    return rounded, check, {"layers": len(flipped), "samples": sum(count(b) for b in batches),
                            "iterations": context.options.adaround_iterations, "flipped_share": flipped}


def _correct_biases(fp32: onnx.ModelProto, quantized: onnx.ModelProto, context: PassContext, judge: Dataset,
                    profile: QuantProfile) -> tuple[onnx.ModelProto, Comparison, dict[str, Any]]:
    """The chosen INT8 mix with its biases corrected layer by layer, and the figures after."""
    from trtpipe.optimize.int8.bias_correction import correct_biases

    assert context.calib is not None
    batches = context.batches(context.calib.head(learning_samples(context.calib, BIAS_CORRECTION_SAMPLES)))
    layers = sum(n.op_type in ("Conv", "ConvTranspose", "Gemm") for n in fp32.graph.node)
    with console.progress() as bar:
        task = bar.add_task("Bias correction, layer by layer", total=layers)
        corrected, shifts = correct_biases(fp32, quantized, batches, on_layer=lambda: bar.advance(task))
    check = context.compare(fp32, corrected, judge, profile.evaluation_optimization)
    console.success(f"Bias correction ({len(shifts)} layers): {check.line()}")
    return corrected, check, {"layers": len(shifts), "samples": sum(count(b) for b in batches),
                              "mean_abs_shift": shifts}
