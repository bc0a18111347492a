"""The accuracy budget: when full INT8 loses too much, keep the most sensitive layers in FP32.

Sensitivity is measured one node at a time: quantise only that node and see how far the logits move from
FP32's on calibration data (not the eval data the budget is judged on, so the choice does not fit the test).
Layers then fall back to FP32 in order of sensitivity until the eval accuracy drop is within the budget.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison, compare
from trtpipe.errors import TrtpipeError
from trtpipe.optimize.evaluate import logits
from trtpipe.optimize.int8.calibrate import Ranges
from trtpipe.optimize.int8.profiles import QuantProfile
from trtpipe.optimize.int8.quantize import quantizable_nodes, quantize

PROBE_SAMPLES = 64


@dataclass
class FallbackResult:
    model: onnx.ModelProto
    excluded: list[str]
    ranking: list[tuple[str, float]]
    comparison: Comparison
    attempts: list[dict[str, object]]


def rank_layers(model: onnx.ModelProto, ranges: Ranges, profile: QuantProfile, probe: np.ndarray,
                batch: int | None) -> list[tuple[str, float]]:
    """Quantisable nodes, most sensitive first, scored by the logit MSE (relative to the logits' variance)
    that quantising that node alone causes."""
    reference = logits(model, probe, batch=batch)
    variance = float(reference.var()) or 1.0
    candidates = quantizable_nodes(model, profile)
    scores = []
    with console.progress() as bar:
        task = bar.add_task("Sensitivity analysis (one node quantised at a time)", total=len(candidates))
        for name in candidates:
            single = quantize(model, ranges, profile, only=[name])
            out = logits(single, probe, optimization=profile.evaluation_optimization, batch=batch)
            scores.append((name, float(np.mean((out - reference[: len(out)]) ** 2)) / variance))
            bar.advance(task)
    return sorted(scores, key=lambda item: item[1], reverse=True)


def _schedule(limit: int) -> list[int]:
    """How many nodes to keep in FP32 at each attempt: one at a time first, then doubling, up to ``limit``."""
    steps = list(range(1, min(limit, 8) + 1))
    k = 16
    while k < limit:
        steps.append(k)
        k *= 2
    if limit > 8:
        steps.append(limit)
    return steps


def default_fp32_limit(quantizable: int) -> int:
    """Past half of its nodes in FP32 a model is no longer an INT8 model: FP16 serves better then."""
    return max(1, quantizable // 2)


def fall_back_until_within_budget(
    model: onnx.ModelProto, ranges: Ranges, profile: QuantProfile, *, probe: np.ndarray, eval_images: np.ndarray,
    eval_labels: np.ndarray, fp32_eval_logits: np.ndarray, budget_pp: float, batch: int | None,
    max_fp32_nodes: int | None = None,
) -> FallbackResult:
    ranking = rank_layers(model, ranges, profile, probe, batch)
    limit = min(len(ranking), max_fp32_nodes if max_fp32_nodes is not None else default_fp32_limit(len(ranking)))
    attempts: list[dict[str, object]] = []
    with console.progress() as bar:
        steps = _schedule(limit)
        task = bar.add_task(f"Falling back to FP32 until the drop is within {budget_pp} pp", total=len(steps))
        for count in steps:
            excluded = [name for name, _ in ranking[:count]]
            candidate = quantize(model, ranges, profile, exclude=excluded)
            out = logits(candidate, eval_images, optimization=profile.evaluation_optimization, batch=batch)
            result = compare(fp32_eval_logits[: len(out)], out, eval_labels)
            attempts.append({"fp32_layers": count, "accuracy": result.accuracy, "drop_pp": result.accuracy_drop_pp})
            bar.advance(task)
            console.note(f"{count} layer(s) in FP32: {result.line()}")
            if result.accuracy_drop_pp is not None and result.accuracy_drop_pp <= budget_pp:
                return FallbackResult(candidate, excluded, ranking, result, attempts)
    if not attempts:
        raise TrtpipeError(f"No INT8 mix meets the accuracy budget of {budget_pp} pp: no node may fall back to FP32 "
                           "(--max-fp32-nodes 0).")
    best = min(attempts, key=lambda a: (float(a["drop_pp"]), a["fp32_layers"]))  # type: ignore[arg-type]
    raise TrtpipeError(
        f"No INT8 mix meets the accuracy budget of {budget_pp} pp: tried keeping up to {limit} of {len(ranking)} "
        f"quantised nodes in FP32 (--max-fp32-nodes); the best ({best['fp32_layers']} in FP32) still lost "
        f"{best['drop_pp']:.2f} pp. Raise --max-accuracy-drop or --max-fp32-nodes, try another --calib-method, or "
        "use --precision fp16."
    )
