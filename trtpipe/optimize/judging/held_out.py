"""The data that judges an optimized model without ``--eval``: a share it was never fit to.

A figure measured on the calibration samples is optimistic: they set the INT8 ranges, and bias correction and
AdaRound were fit to them. So without ``--eval`` optimize holds data out, and every figure it prints and every gate it
applies (the accuracy budget, a recipe step kept only where the task measure did not drop) is measured there.

- A source with a fixed set of samples (a .npy/.npz file, an image folder, the digits splits) is split: a seeded
  draw of ``HELD_OUT_SHARE`` of the samples asked for (at least ``MIN_HELD_OUT``, a whole number of static batches)
  judges, and the others, in their order, calibrate. A quarter leaves most of the data to the ranges, which are
  what the data is for; a figure on fewer than ``MIN_HELD_OUT`` samples moves in steps of more than 12.5 points,
  too coarse for any budget; and calibration keeps at least ``MIN_CALIBRATION`` samples, what the heaviest recipe
  (``best``) needs, so holding data out never changes which recipe can run.
- A generated source (``photos``, ``packaged:NAME``, ``random``) draws new samples from its other seed (the stream
  ``--eval`` would use), as many as calibrate and at least ``MIN_HELD_OUT``: nothing is taken from calibration, and
  the figure costs what it did on the calibration samples.
- A fixed set without an accuracy budget is **cross-fitted** instead (``FOLDS`` seeded folds): every sample both
  calibrates and judges, never in the same run. Ranges and learned steps are fit on the other folds and judged on
  the one left out, the per-sample outcomes of all folds are pooled into one figure (on every sample the user gave)
  and every step's keep-or-drop is decided on that pooled figure; the written file is then fit on all the samples
  with the steps so decided. The pooled figure is an unbiased estimate of the unseen score of a file fit on
  (k-1)/k of the data, so if anything a conservative one for the written file, which saw more. Under
  ``--max-accuracy-drop`` the budget's fallback search needs one judging set, so the split above is kept.
- Fewer than ``MIN_CALIBRATION + MIN_HELD_OUT`` samples of a fixed set are too few to split: the figure is then on
  the calibration data, one line says it is optimistic, and gates refuse to decide on it.

The draw is seeded, so the same data always splits the same way (the range cache and the pipeline's stage keys
stay valid), and the split is recorded in the manifest: which samples, how many, from which source.

With a held-out split the written file's ranges come from the calibration share only: the held-out share is what
its figures, its intervals and the budget were measured on. Cross-fitted, the written file calibrates on every
sample, as a peer quantizer's does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from trtpipe import console
from trtpipe.artifact.records.sections import JudgedOn
from trtpipe.errors import BadInput
from trtpipe.inputs import InputSpec, random_batch
from trtpipe.models.data_spec import DataKind, DataSpec
from trtpipe.optimize.data import Dataset, ImagePreprocessing, load_dataset
from trtpipe.optimize.options import OptimizeOptions
from trtpipe.vocab import Precision

HELD_OUT_SHARE = 0.25
MIN_HELD_OUT = 8
MIN_CALIBRATION = 16  # recipes.RECIPES[Quality.BEST].min_samples: every recipe can still run on what is left
SPLIT_SEED = 0  # the permutation that picks the held-out samples of a fixed set (and its folds)
FOLDS = 4  # cross-fitting: each fold judges a quarter, fit on the other three (what the held-out share leaves)
RANDOM_HELD_OUT_SEED = 1  # 'random' calibrates on seed 0
GENERATED = (DataKind.PHOTOS, DataKind.PACKAGED, DataKind.RANDOM)


@dataclass(frozen=True)
class Judging:
    """What calibrates (ranges, equalization statistics, learned steps) and what judges; ``held_out`` None: too few
    samples to hold any out, so the calibration data judges and its figures are optimistic."""

    calibration: Dataset
    held_out: Dataset | None
    record: JudgedOn  # the manifest's ``data.judged_on``
    folds: tuple[np.ndarray, ...] | None = None  # cross-fitted: each fold's judging indices (ascending)


def held_out_count(samples: int, static_batch: int | None = None) -> int:
    """How many of ``samples`` a fixed set holds out: ``HELD_OUT_SHARE`` of them, at least ``MIN_HELD_OUT``,
    rounded up to whole static batches (a partial batch is never run)."""
    wanted = max(MIN_HELD_OUT, math.ceil(HELD_OUT_SHARE * samples))
    return _whole_batches(wanted, static_batch)


def fewest_to_split(static_batch: int | None = None) -> int:
    """The fewest samples of a fixed set that leave ``MIN_CALIBRATION`` to calibrate once a share is held out."""
    samples = MIN_CALIBRATION + MIN_HELD_OUT
    while samples - held_out_count(samples, static_batch) < MIN_CALIBRATION:
        samples += 1
    return samples


def hold_out(calib: Dataset, spec: str | DataSpec, inputs: tuple[InputSpec, ...], *,
             static_batch: int | None = None, preprocessing: ImagePreprocessing | None = None,
             cross_fit: bool = False) -> Judging:
    """Split ``calib`` (loaded from ``spec``) into what calibrates and what judges (see the module's rules);
    ``cross_fit``: a fixed set is cross-fitted rather than split, where its batches allow."""
    data = spec if isinstance(spec, DataSpec) else DataSpec.parse(spec)
    if data.kind in GENERATED:
        return _drawn(calib, data, inputs, static_batch, preprocessing)
    samples = len(calib)
    held = held_out_count(samples, static_batch)
    if cross_fit and (static_batch or 1) == 1 and samples - held >= MIN_CALIBRATION:
        return cross_fitted(calib)
    if samples - held < MIN_CALIBRATION:
        return Judging(calib, None, JudgedOn(
            "calibration", calib.source, samples, calib.sha256, optimistic=True,
            why=f"{samples} samples are too few to hold a share out (at least {fewest_to_split(static_batch)} are "
                "needed)"))
    chosen = np.sort(np.random.default_rng(SPLIT_SEED).permutation(samples)[:held])
    kept = np.setdiff1d(np.arange(samples), chosen)
    fit = calib.subset(kept, calib.source)
    judge = calib.subset(chosen, f"{held} held-out samples of {calib.source}")
    judge = replace(judge, reference_labels=judge.labels is None or judge.reference_labels)  # FP32's answer judges
    return Judging(fit, judge, JudgedOn(
        "held-out", judge.source, held, judge.sha256,
        drawn=f"a seeded share ({HELD_OUT_SHARE:g}, seed {SPLIT_SEED}) of the {samples} calibration samples asked "
              "for, never used for ranges or learned steps",
        indices=tuple(int(i) for i in chosen), calibration_samples=len(fit), calibration_sha256=fit.sha256))


def cross_fitted(calib: Dataset) -> Judging:
    """``calib`` cross-fitted in ``FOLDS`` seeded folds: every sample calibrates the written file and judges the
    fold that left it out (see the module)."""
    order = np.random.default_rng(SPLIT_SEED).permutation(len(calib))
    folds = tuple(np.sort(part) for part in np.array_split(order, FOLDS))
    judge = replace(calib, source=f"{len(calib)} samples of {calib.source}, cross-fitted in {FOLDS} folds",
                    reference_labels=calib.labels is None or calib.reference_labels)
    return Judging(calib, judge, JudgedOn(
        "cross-fitted", judge.source, len(calib), calib.sha256,
        drawn=f"{FOLDS} seeded folds (seed {SPLIT_SEED}) of the {len(calib)} calibration samples: each fold judged "
              f"by a file fit on the other {FOLDS - 1}, pooled; the written file is fit on all of them",
        calibration_samples=len(calib), calibration_sha256=calib.sha256), folds)


def judge_without_eval(calib: Dataset, options: OptimizeOptions, inputs: tuple[InputSpec, ...],
                       static_batch: int | None,
                       preprocessing: ImagePreprocessing) -> Judging:
    """optimize without --eval: the calibration data to fit on, the held-out data to judge on (None: too few to
    split), the folds where cross-fitted, and the manifest's record of which data judged, each said in one line. An
    accuracy budget that would have to be judged on the calibration data is refused before any work."""
    assert options.calib is not None
    cross_fit = options.max_accuracy_drop is None and options.precision is Precision.INT8
    judging = hold_out(calib, options.calib, inputs, static_batch=static_batch, preprocessing=preprocessing,
                       cross_fit=cross_fit)
    if judging.folds is not None:
        console.note(f"Judged on all {len(calib)} calibration samples, cross-fitted: each of {FOLDS} folds by a file "
                     f"fit on the other {FOLDS - 1}, pooled; the written file is fit on all {len(calib)}")
        return judging
    if judging.held_out is None:
        if options.max_accuracy_drop is not None:
            raise BadInput(f"--max-accuracy-drop cannot be judged: {judging.record.why}, and a figure on the "
                           "calibration data itself is optimistic: give --eval DATA or more --calib samples.")
        console.warn(f"Accuracy below is measured on the {len(calib)} calibration samples themselves, so it is "
                     f"optimistic and no gate decides on it: {judging.record.why}. Give --eval DATA or more "
                     "--calib samples.")
    else:
        held = "" if len(judging.calibration) == len(calib) else (
            f" (not {len(calib)}: the file is judged on the held-out share, so its ranges cannot come from it; give "
            "--eval DATA to calibrate on all of them)")
        console.note(f"Judged on {judging.held_out.source} (never used for ranges or learned steps); calibration: "
                     f"{len(judging.calibration)} samples{held}")
    return judging


def _drawn(calib: Dataset, data: DataSpec, inputs: tuple[InputSpec, ...], static_batch: int | None,
           preprocessing: ImagePreprocessing | None) -> Judging:
    """Held-out samples of a generated source: its other seeded stream, as many as calibrate."""
    wanted = _whole_batches(max(MIN_HELD_OUT, len(calib)), static_batch)
    if data.kind is DataKind.RANDOM:
        batch = random_batch(inputs, wanted, np.random.default_rng(RANDOM_HELD_OUT_SEED))
        judge = Dataset(batch, None, f"{wanted} held-out random draws (seed {RANDOM_HELD_OUT_SEED})",
                        reference_labels=True)
        stream = f"seed {RANDOM_HELD_OUT_SEED} (calibration: seed 0)"
    else:
        loaded = load_dataset(data, inputs, purpose="eval", samples=wanted, preprocessing=preprocessing)
        judge = replace(loaded, source=f"held-out: {loaded.source}")
        stream = "its eval stream (seed 1; calibration: seed 0)"
    return Judging(calib, judge, JudgedOn(
        "held-out", judge.source, len(judge), judge.sha256,
        drawn=f"new samples of {data} from {stream}, never used for ranges or learned steps",
        calibration_samples=len(calib), calibration_sha256=calib.sha256))


def _whole_batches(samples: int, static_batch: int | None) -> int:
    return samples if not static_batch else math.ceil(samples / static_batch) * static_batch
