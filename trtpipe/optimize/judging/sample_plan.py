"""How many samples an INT8 run calibrates and judges on: all of them, unless a large dense model would then pass
optimize's time budget.

An INT8 run passes the model about ``PASSES_PER_SAMPLE`` times for each calibration sample and the judging sample
beside it (fusion's check, equalization's statistics, the ranges, the first INT8 file and each candidate a recipe
judges, the written file): on a classifier
that is seconds, but a 20 M-parameter U-Net at 256x256 takes about 0.3-0.5 s a sample on 2 cores, and 256
calibration plus 256 judging samples cost over 20 minutes before any learned step. So before the passes run, one
sample's pass through the FP32 model is costed, and where the passes over every sample would take more than
``SAMPLE_TIME_S`` (the share of the documented budget, ``INT8_TIME_BUDGET_S``, left once learned steps take their
own capped time: int8.step.STEP_TIME_S) the first N samples are used instead, at least ``MIN_SAMPLES``. The pace
is the model's work at a reference pace (optimize.work), not the clock's: the same model and data give the same
count on a quiet machine and a loaded one. A dense
model's ranges and per-pixel figures rest on every pixel of each sample, so a few dozen samples keep them; the
intervals say how sure the figures are. One line says so, and ``--calib-samples N`` (a count the user names) is
always honoured.
"""

from __future__ import annotations

import onnx

from trtpipe import console
from trtpipe.optimize.data import Dataset
from trtpipe.optimize.judging import work

INT8_TIME_BUDGET_S = 300.0  # an INT8 run of a large dense model on 2 cores, as docs/guides/optimize.md states it
SAMPLE_TIME_S = 150.0  # what the passes over the samples may take of it (learned steps, speed check: the rest)
PASSES_PER_SAMPLE = 10  # passes of the model per calibration sample and the judging sample beside it, in a default run
MIN_SAMPLES = 32  # fewer, and a held-out figure moves in steps of more than 3 points


def within_budget(model: onnx.ModelProto, calib: Dataset, static_batch: int | None, *, named: bool) -> Dataset:
    """``calib``, or its first samples where passing the model over all of them would overrun the budget (said in
    one line); ``named``: the user gave --calib-samples, which is kept whatever it costs."""
    if named or len(calib) <= MIN_SAMPLES:
        return calib
    pace, reference = work.pace(model, calib.images, static_batch)
    affordable = int(SAMPLE_TIME_S / (PASSES_PER_SAMPLE * max(pace, 1e-9)))
    if affordable >= len(calib):
        return calib
    size = static_batch or 1
    taken = max(MIN_SAMPLES, affordable) // size * size or size
    minutes = PASSES_PER_SAMPLE * pace * len(calib) / 60
    how = "at the reference pace of its work (optimize.work)" if reference else "as timed here"
    console.note(f"Time budget: one sample costs {pace:.2f} s through the FP32 model ({how}), so calibrating and "
                 f"judging on all {len(calib)} samples would take about {minutes:.0f} min; the first {taken} are used, "
                 f"to stay near {INT8_TIME_BUDGET_S / 60:.0f} min in all "
                 "(--calib-samples N chooses the count)")
    return calib.head(taken)
