"""The accuracy budget: when full INT8 loses too much, keep as few layers as possible in FP32.

Every mix is the chosen INT8 model (after AdaRound and bias correction, when asked for) with some nodes taken
back to FP32 by graph surgery (:mod:`keep_fp32`): no re-quantization, so a try costs one evaluation, and what was
learned for the other layers stays.

1. Units: the quantised nodes that read one activation tensor fall back together, because a tensor's Q/DQ only
   disappears when none of its readers is quantised (the two convolutions after a residual block, say). Where
   quantised nodes also write their outputs through Q/DQ (the cpu target's integer kernels), the node that writes
   the tensor joins them: an FP32 reader of an INT8 node still reads that node's quantised output. (On PP-OCRv4's
   detector, most units of readers alone did not change the figure at all; the unit of one tensor with its writer
   removed over a third of the drop.)
2. Rank in two stages. First, every unit by the error it removes where it is computed, all units in one run: a
   probe model computes the FP32 graph and, beside every quantised node, its INT8 twin (the same Q/DQ, scales and
   learned weights) fed with the FP32 values, plus, where an input would stay quantised after the fallback
   (written by an INT8 node outside the unit), an FP32 twin reading it through that Q/DQ; the graph itself reduces
   each twin's squared error against the FP32 node's output, channel by channel. That local error is free of what
   earlier layers did to the unit's inputs, but blind to what later layers do with its error: on PP-OCRv4's
   detector the convolutions that mattered most to the output ranked 20th to 60th of 88 by it. So then the first
   MEASURED_UNITS by it are each kept alone in FP32 and scored by the share of the output error that removes: one
   inference per unit and sample, on a quarter of the probe (two 640x640 images, sixteen 224x224 ones), where the
   ranking used to run every unit on all 64 probe samples (a 640x640 detector's ranking alone took over ten
   minutes on two cores). Units whose fallback alone removes nothing, or makes things worse, follow in order of
   their own error: theirs can be masked by another's until that one is in FP32 (an outlier tensor's readers and
   the Add that wrote it). The probe is calibration data, not the eval data the budget is judged on, so the
   ranking does not fit the test.
3. Add in rank order, judged by the task's measure on the eval data, in steps: one unit while single units close
   the gap fast, growing (at most doubling) to about half of what the last step's rate says is still needed when
   they do not. A step joins only if the figure improves (or, on an unchanged figure, the output error drops),
   so the figure never gets worse as layers are added. A step that does not help is halved and tried again; a
   single unit that does not help is passed over, and tried once more after the rest (others may have joined).
   A step that reaches the budget is bisected back to its shortest prefix that still does. Evaluations are
   capped (``max_attempts``, about three per doubling of the unit count), and a few are held back for a last
   resort: every unit not in yet that fits under the node limit at once (units too small to show on their own
   may add up), bisected the same way.

The per-unit table (the share of the output error each removed alone, whether it was kept, and with the attempts,
the drop its step removed) is printed, and the ranking and attempts are recorded in the manifest.

This module ties the steps together on real models and eval data; each step lives in its own module:
:mod:`fallback_units` (step 1), :mod:`error_probe` and :mod:`ranking` (step 2), :mod:`fallback_search` (step 3, a
search that knows nothing of ONNX).
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
from trtpipe.optimize.int8.qdq.keep_fp32 import keep_in_fp32
from trtpipe.optimize.int8.qdq.profiles import QuantProfile
from trtpipe.optimize.int8.steps.budget.fallback_search import (
    FallbackAttempt,
    add_until_within_budget,
    default_fp32_limit,
    default_max_attempts,
)
from trtpipe.optimize.int8.steps.budget.ranking import MEASURED_UNITS, probe_count, rank_layers
from trtpipe.optimize.judging.evaluate import outputs
from trtpipe.vocab import Task


@dataclass
class FallbackResult:
    model: onnx.ModelProto
    excluded: list[str]
    ranking: list[tuple[tuple[str, ...], float]]
    comparison: Comparison
    attempts: list[FallbackAttempt]
    probe_samples: int = 0  # calibration samples the one-run ranking read
    measured_units: int = 0  # units whose effect on the output was measured alone (the ranking's first ones)


def fall_back_until_within_budget(
    fp32: onnx.ModelProto, quantized: onnx.ModelProto, profile: QuantProfile, *, probe: Batch,
    evaluation: Dataset, fp32_outputs: list[np.ndarray], task: Task | None, budget_pp: float,
    decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None,
    batch: int | None, max_fp32_nodes: int | None = None, full_int8: Comparison | None = None,
    max_attempts: int | None = None,
) -> FallbackResult:
    """``quantized`` (made from ``fp32`` with ``profile``) with few units in FP32, enough to bring the drop on
    the eval data within ``budget_pp``: the task's accuracy drop with labels, else its agreement drop against
    ``fp32_outputs`` (every output compared). At most ``max_attempts`` evaluations of the eval data (default:
    :func:`default_max_attempts`)."""
    as_written = profile.measured_as_written
    names = [o.name for o in fp32.graph.output]

    def judge(excluded: list[str]) -> tuple[onnx.ModelProto, Comparison]:
        candidate = keep_in_fp32(quantized, fp32, excluded, profile)
        out = outputs(candidate, evaluation.images, as_written=as_written, batch=batch)
        usable = len(out[0])
        return candidate, compare([o[:usable] for o in fp32_outputs], out, evaluation.labels, task=task,
                                  names=names, decoder=decoder)

    ranking = rank_layers(fp32, quantized, profile, probe, batch)
    quantizable = len({n for unit, _ in ranking for n in unit})
    limit = min(quantizable, max_fp32_nodes if max_fp32_nodes is not None else default_fp32_limit(quantizable))
    tries = max_attempts if max_attempts is not None else default_max_attempts(len(ranking))
    start = full_int8 if full_int8 is not None else judge([])[1]
    with console.progress() as bar:
        progress = bar.add_task(f"Keeping nodes in FP32 until the drop is within {budget_pp} pp (at most {tries} "
                                "evaluations)", total=tries)
        found = add_until_within_budget([unit for unit, _ in ranking], judge, start, budget_pp, limit=limit,
                                        max_attempts=tries, on_attempt=lambda: bar.advance(progress))
    drop = found.comparison.drop_pp
    if drop is not None and drop <= budget_pp and found.model is not None:
        return FallbackResult(found.model, found.excluded, ranking, found.comparison, found.attempts,
                              probe_count(probe, batch), min(MEASURED_UNITS, len(ranking)))
    print_table(ranking, found.excluded, attempts=found.attempts)  # what was tried, before the error says so
    raise TrtpipeError(
        f"No INT8 mix meets the accuracy budget of {budget_pp} pp: tried keeping up to {limit} of {quantizable} "
        f"quantised nodes in FP32 (--max-fp32-nodes) in {len(found.attempts)} evaluations; the best "
        f"({len(found.excluded)} in FP32) still lost {drop:.2f} pp. Raise --max-accuracy-drop or --max-fp32-nodes, "
        "try another --calib-method, or use --precision fp16."
    )


def print_table(ranking: list[tuple[tuple[str, ...], float]], kept: list[str], rows: int = 15, *,
                attempts: Sequence[FallbackAttempt] | None = None) -> None:
    """The most sensitive units (and every kept one), with the share of full INT8's output error that keeping
    each alone in FP32 removed on the probe, and whether it was kept; with ``attempts``, the drop the step that
    brought it in removed on the eval data."""
    from rich.table import Table

    joined: dict[str, str] = {}
    for record in attempts or ():
        if record.get("kept"):
            removed = record.get("drop_removed_pp")
            text = f"yes ({removed:.2f} pp removed)" if isinstance(removed, float | int) else "yes"
            for node in record.get("nodes", []):
                joined[str(node)] = text
    table = Table(title="Sensitivity: the share of full INT8's output error that keeping each unit alone in FP32 "
                  "removes", title_justify="left")
    for header in ("Nodes that fall back together", "Error removed", "Kept in FP32"):
        table.add_column(header, justify="left" if header.startswith("Nodes") else "right")
    kept_set = set(kept)
    shown = [entry for index, entry in enumerate(ranking) if index < rows or set(entry[0]) <= kept_set]
    for unit, score in shown:
        is_kept = set(unit) <= kept_set
        mark = next((joined[n] for n in unit if n in joined), "yes") if is_kept else ""
        table.add_row(", ".join(unit), f"{100 * score:.1f} %", mark)
    if len(shown) < len(ranking):
        table.caption = f"{len(ranking) - len(shown)} less sensitive unit(s) not shown"
    console.err.print(table)
