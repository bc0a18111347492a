"""The accuracy budget: when full INT8 loses too much, keep as few layers as possible in FP32.

Every mix is the chosen INT8 model (after AdaRound and bias correction, when asked for) with some nodes taken
back to FP32 by graph surgery (:mod:`keep_fp32`): no re-quantization, so a try costs one evaluation, and what was
learned for the other layers stays.

1. Units: the quantised nodes that read one activation tensor fall back together, because a tensor's Q/DQ only
   disappears when none of its readers is quantised (the two convolutions after a residual block, say).
2. Rank: each unit is measured alone, from the INT8 model: keep only it in FP32 and see how much of its
   logit error on calibration data disappears (not the eval data the budget is judged on, so the ranking does not
   fit the test).
3. Add greedily, most sensitive first, re-evaluating on the eval data after each: a unit joins the FP32 set only
   if the figure improves (or, on an unchanged figure, the logit error drops), so the figure never gets worse as
   layers are added. Units turned down are tried again in a later pass, once others have joined. Stop at the
   budget, at the node limit, or when a whole pass adds nothing.

The per-node table (score, and whether it was kept) is printed and recorded in the manifest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from trtpipe import console
from trtpipe.comparison import Comparison, compare
from trtpipe.errors import TrtpipeError
from trtpipe.inputs import Batch
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.evaluate import logits, outputs
from trtpipe.optimize.int8.keep_fp32 import keep_in_fp32, reading_dequantized
from trtpipe.optimize.int8.profiles import QuantProfile
from trtpipe.optimize.int8.quantize import quantizable_nodes
from trtpipe.vocab import Task

PROBE_SAMPLES = 64
TRIES_PER_KEPT_NODE = 3  # the greedy pass tries at most this many candidates per node the limit allows


@dataclass
class FallbackResult:
    model: onnx.ModelProto
    excluded: list[str]
    ranking: list[tuple[tuple[str, ...], float]]
    comparison: Comparison
    attempts: list[dict[str, object]]


def _error(out: np.ndarray, reference: np.ndarray) -> float:
    return float(np.mean((out - reference[: len(out)]) ** 2))


def fallback_units(model: onnx.ModelProto, profile: QuantProfile,
                   quantized: onnx.ModelProto | None = None) -> list[tuple[str, ...]]:
    """Groups of quantisable nodes that read the same activation tensor, in graph order; a node whose inputs are
    all weights or graph constants is a unit of its own. With ``quantized``: only the nodes that read a
    dequantized tensor there (an activation the quantizer folded into its layer has nothing to give back)."""
    quantizable = quantizable_nodes(model, profile)
    if quantized is not None:
        readers = reading_dequantized(quantized)
        quantizable = [name for name in quantizable if name in readers]
    wanted = set(quantizable)
    constants = {i.name for i in model.graph.initializer}
    readers: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.name in wanted:
            for name in node.input:
                if name and name not in constants:
                    readers.setdefault(name, []).append(node.name)
    units = list(dict.fromkeys(tuple(names) for names in readers.values()))
    covered = {n for unit in units for n in unit}
    return units + [(n,) for n in quantizable if n not in covered]


def rank_layers(fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, probe: Batch,
                batch: int | None) -> list[tuple[tuple[str, ...], float]]:
    """Fallback units, most sensitive first: the share of ``quantized``'s logit error on ``probe`` that keeping
    that unit alone in FP32 removes (1.0: all of it; 0 or less: none)."""
    reference = logits(fp32, probe, batch=batch)
    run = profile.evaluation_optimization
    full = _error(logits(quantized, probe, optimization=run, batch=batch), reference)
    units = fallback_units(fp32, profile, quantized)
    scores = []
    with console.progress() as bar:
        task = bar.add_task("Sensitivity: each tensor's readers alone kept in FP32", total=len(units))
        for unit in units:
            single = keep_in_fp32(quantized, fp32, unit, profile)
            gain = (full - _error(logits(single, probe, optimization=run, batch=batch), reference)) / (full or 1.0)
            scores.append((unit, float(gain)))
            bar.advance(task)
    return sorted(scores, key=lambda item: item[1], reverse=True)


def default_fp32_limit(quantizable: int) -> int:
    """Past half of its nodes in FP32 a model is no longer an INT8 model: FP16 serves better then."""
    return max(1, quantizable // 2)


TIE_ERROR_GAIN = 0.01  # on an unchanged accuracy, a node must cut the mean logit error by 1 % to earn its place


def _better(candidate: Comparison, current: Comparison) -> bool:
    """Strictly better on the budget's figure; on a tie, a clearly smaller output error (a node that changes
    nothing would spend the FP32 allowance for nothing)."""
    new, old = candidate.drop_pp, current.drop_pp
    assert new is not None and old is not None
    if abs(new - old) > 1e-9:
        return new < old
    return candidate.mean_abs_err < (1 - TIE_ERROR_GAIN) * current.mean_abs_err


def fall_back_until_within_budget(
    fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, *, probe: Batch,
    evaluation: Dataset, fp32_outputs: list[np.ndarray], task: Task | None, budget_pp: float,
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None,
    batch: int | None, max_fp32_nodes: int | None = None, full_int8: Comparison | None = None,
) -> FallbackResult:
    """``quantized`` (made from ``fp32`` with ``profile``) with the fewest units in FP32 that the greedy
    schedule needs to bring the drop on the eval data within ``budget_pp``: the task's accuracy drop with labels,
    else its agreement drop against ``fp32_outputs`` (every output compared)."""
    run = profile.evaluation_optimization
    names = [o.name for o in fp32.graph.output]

    def judge(excluded: list[str]) -> tuple[onnx.ModelProto, Comparison]:
        candidate = keep_in_fp32(quantized, fp32, excluded, profile)
        out = outputs(candidate, evaluation.images, optimization=run, batch=batch)
        usable = len(out[0])
        return candidate, compare([o[:usable] for o in fp32_outputs], out, evaluation.labels, task=task,
                                  names=names, decoder=decoder)

    ranking = rank_layers(fp32, quantized, profile, probe, batch)
    quantizable = sum(len(unit) for unit, _ in ranking)
    limit = min(quantizable, max_fp32_nodes if max_fp32_nodes is not None else default_fp32_limit(quantizable))
    best_model, best = (None, full_int8) if full_int8 is not None else judge([])
    excluded: list[str] = []
    attempts: list[dict[str, object]] = []
    tries = TRIES_PER_KEPT_NODE * limit
    with console.progress() as bar:
        progress = bar.add_task(f"Keeping nodes in FP32 until the drop is within {budget_pp} pp", total=tries)
        waiting = [unit for unit, _ in ranking]
        while waiting and len(attempts) < tries and (best.drop_pp or 0.0) > budget_pp:
            # One pass down the ranking; units turned down wait for the next pass, where the mix has changed.
            turned_down: list[tuple[str, ...]] = []
            joined = len(excluded)
            for unit in waiting:
                if (best.drop_pp or 0.0) <= budget_pp or len(attempts) >= tries:
                    break
                trial = list(dict.fromkeys([*excluded, *unit]))
                if len(trial) == len(excluded) or len(trial) > limit:
                    continue  # already in, or it can never fit under the limit
                candidate, result = judge(trial)
                kept = _better(result, best)
                attempts.append({"nodes": list(unit), "fp32_layers": len(trial) if kept else len(excluded),
                                 "kept": kept, "accuracy": result.accuracy, "drop_pp": result.drop_pp})
                bar.advance(progress)
                if kept:
                    excluded = trial
                    best_model, best = candidate, result
                    console.note(f"{len(excluded)} layer(s) in FP32 (+{', '.join(unit)}): {result.line()}")
                else:
                    turned_down.append(unit)
            if len(excluded) == joined:
                break  # a whole pass changed nothing: another would not either
            waiting = turned_down
    drop = best.drop_pp
    if drop is not None and drop <= budget_pp and best_model is not None:
        return FallbackResult(best_model, excluded, ranking, best, attempts)
    raise TrtpipeError(
        f"No INT8 mix meets the accuracy budget of {budget_pp} pp: tried keeping up to {limit} of {len(ranking)} "
        f"quantised nodes in FP32 (--max-fp32-nodes); the best ({len(excluded)} in FP32) still lost "
        f"{drop:.2f} pp. Raise --max-accuracy-drop or --max-fp32-nodes, try another --calib-method, or "
        "use --precision fp16."
    )


def print_table(ranking: list[tuple[tuple[str, ...], float]], kept: list[str], rows: int = 15) -> None:
    """The most sensitive units, with the share of full INT8's error each removes and whether it was kept."""
    from rich.table import Table

    table = Table(title="Sensitivity (share of full INT8's logit error removed by keeping the nodes in FP32)",
                  title_justify="left")
    for header in ("Nodes reading one tensor", "Error removed", "Kept in FP32"):
        table.add_column(header, justify="left" if header.startswith("Nodes") else "right")
    for unit, score in ranking[:rows]:
        table.add_row(", ".join(unit), f"{100 * score:.1f} %", "yes" if set(unit) <= set(kept) else "")
    console.err.print(table)
