"""How far one model's outputs are from a reference's: the one comparison type that verification, optimize's
accuracy figures and budget, bench rows and selection all report.

**Every output** is compared, each with its own figures (errors, cosine, SNR); the worst output is what a
tolerance is judged on, and the report names it. The model's **task** (given, or inferred from its outputs'
shapes where that is unambiguous) adds the figure that says whether the answer survived, measured by the task's
module in ``trtpipe.tasks``: top-1 agreement for a classifier, pixel agreement for a segmenter, mAP@0.5 of the
detections against the reference's own for a detector, F1 of a map, cosine of embeddings. Agreement is always
against the reference outputs; accuracy only where labels exist, for both the reference and the candidate, so an
accuracy drop is a like-for-like difference on the same samples.

Every task figure carries its 95 % interval over the samples it was judged on (see ``trtpipe.tasks.base``), and an
accuracy budget judges the interval of the drop, not its point (:func:`judge_budget`): within where the drop's upper
bound is, over where its lower bound is beyond, and otherwise undecided, with about how many samples would decide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trtpipe.errors import BadInput
from trtpipe.intervals import Interval, hull, trials_to_resolve
from trtpipe.tasks import MEASURES, Fidelity, check_fits, detect, infer_task
from trtpipe.vocab import Task

Outputs = np.ndarray | Sequence[np.ndarray]


@dataclass(frozen=True)
class OutputFigures:
    """One output's distance from the reference's."""

    name: str
    max_abs_err: float
    mean_abs_err: float
    max_rel_err: float
    cosine: float
    snr_db: float  # 10 log10 of the reference's energy over the error's (inf where they are equal)
    ref_max_abs: float


@dataclass(frozen=True)
class Comparison:
    max_abs_err: float  # the worst output's (each output's own figures are in ``outputs``)
    mean_abs_err: float
    max_rel_err: float
    cosine: float  # the lowest of the outputs'
    top1_agreement: float | None  # a classifier's; None for other tasks
    ref_max_abs: float
    samples: int
    reference_accuracy: float | None = None  # None without labels
    accuracy: float | None = None
    task: Task = Task.CLASSIFY
    agreement: float | None = None  # the task's headline figure against the reference (see trtpipe.tasks)
    agreement_name: str | None = None
    accuracy_name: str | None = None
    figures: dict[str, float] = field(default_factory=dict)  # the task's other figures (top-5, mIoU...)
    outputs: tuple[OutputFigures, ...] = ()
    note: str | None = None  # why the task figure is missing, where it is
    agreement_interval: Interval | None = None  # ``agreement``'s 95 % interval over the samples (trtpipe.tasks)
    accuracy_interval: Interval | None = None  # ``accuracy``'s, with labels
    drop_interval: Interval | None = None  # ``reference_accuracy - accuracy``'s (a fraction, paired), with labels
    # ``agreement`` on the samples an index array picks, for paired comparisons (trtpipe.tasks.base.Fidelity); not
    # written, and None once merged or read back
    agreement_on: Callable[[np.ndarray], float] | None = field(default=None, repr=False, compare=False)
    # The task's line where a choice was made: what it was inferred as and why ("Task: detect, decoded as yolox
    # (inferred: ...)"), or how a given task's outputs were read ("decoded as yolox: ...")
    inference: str | None = None
    figure_intervals: dict[str, Interval] = field(default_factory=dict)  # the 95 % intervals of some ``figures``
    # Whether ``task`` was inferred from the outputs' values (trtpipe.tasks.Inference.from_values), which only the
    # model's real inputs show
    inferred_from_values: bool = False

    @property
    def worst_output(self) -> str | None:
        """The output furthest from the reference (lowest cosine), where there are several that differ."""
        cosines = [o.cosine for o in self.outputs]
        if len(cosines) < 2 or max(cosines) - min(cosines) < 1e-6:  # all alike (rounding apart): none is worst
            return None
        return min(self.outputs, key=lambda o: o.cosine).name

    @property
    def accuracy_drop_pp(self) -> float | None:
        """Task accuracy lost against the reference, in percentage points (negative: the candidate scores higher);
        rounded to 1e-9 so that 95 of 100 correct loses exactly 5.0 points, not 5.000000000000004 (which a
        5-point budget would refuse)."""
        if self.reference_accuracy is None or self.accuracy is None:
            return None
        return round(100.0 * (self.reference_accuracy - self.accuracy), 9)

    @property
    def agreement_drop_pp(self) -> float | None:
        """Without labels, how much of the reference's answer the candidate lost, in percentage points (the share
        of samples whose top-1 class changed, of pixels whose class changed, 100 - mAP vs FP32...)."""
        return None if self.agreement is None else round(100.0 * (1.0 - self.agreement), 9)

    @property
    def drop_pp(self) -> float | None:
        """What an accuracy budget is judged on: the accuracy drop with labels, else the agreement drop; None when
        the task has no such figure (a budget is then refused, never skipped)."""
        drop = self.accuracy_drop_pp
        return drop if drop is not None else self.agreement_drop_pp

    @property
    def drop_interval_pp(self) -> Interval | None:
        """The 95 % interval of :attr:`drop_pp`, in points: the paired interval of the accuracy drop with labels,
        else the agreement's interval turned into a drop (100 - agreement); None where there is no such figure."""
        if self.accuracy_drop_pp is not None:
            found = self.drop_interval
            return None if found is None else Interval(100 * found.low, 100 * found.high, found.units, found.method)
        found = self.agreement_interval
        if self.agreement_drop_pp is None or found is None:
            return None
        return Interval(100 * (1 - found.high), 100 * (1 - found.low), found.units, found.method)

    def to_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in asdict(self).items() if k != "agreement_on"}
        return {**fields, "accuracy_drop_pp": self.accuracy_drop_pp, "worst_output": self.worst_output}

    def line(self) -> str:
        text = f"max abs error {self.max_abs_err:.3g}, mean {self.mean_abs_err:.3g}, cosine {self.cosine:.6f}"
        if self.worst_output:
            text += f" (worst of {len(self.outputs)} outputs: {self.worst_output})"
        if self.agreement is not None:
            miou = self.figures.get("miou")  # a segmenter's mIoU against FP32's argmax, beside pixel agreement
            characters = self.figures.get("char_agreement")  # a recognizer's, beside its exact lines
            psnr = self.figures.get("psnr_db")  # an image-to-image network's, before its SSIM
            precision = self.figures.get("peak_precision")  # a heatmap's, beside its peak recall
            decibels = self.figure_intervals.get("psnr_db")
            text = ((f"PSNR vs FP32 {psnr:.1f} dB" + (f" (95% CI {decibels.low:.1f}-{decibels.high:.1f} dB)"
                                                       if decibels is not None else "") + ", "
                     if psnr is not None else "")
                    + f"{self.agreement_name} {100 * self.agreement:.2f}%{_within(self.agreement_interval)}, "
                    + (f"mIoU {100 * miou:.2f}%, " if miou is not None else "")
                    + (f"peak precision {100 * precision:.2f}%{_within(self.figure_intervals.get('peak_precision'))}"
                       f", location error {self.figures.get('location_error_px', 0.0):.2f} px, "
                       if precision is not None else "")
                    + (f"per-character agreement {100 * characters:.2f}%"
                       f"{_within(self.figure_intervals.get('char_agreement'))}, " if characters is not None else "")
                    + text)
        elif self.note:
            text = f"{self.note}; " + text
        if self.accuracy is not None and self.reference_accuracy is not None:
            drop = self.accuracy_drop_pp
            assert drop is not None
            worded = f"{drop:.2f} pp drop" if drop >= 0 else f"{-drop:.2f} pp gain"
            found = self.drop_interval_pp
            text = (f"{self.accuracy_name} {100 * self.accuracy:.2f}%{_within(self.accuracy_interval)} vs "
                    f"{100 * self.reference_accuracy:.2f}% ({worded}"
                    + (f", drop 95% CI {found.low:+.1f} to {found.high:+.1f} pp" if found is not None else "")
                    + "), " + text)
        return f"{text} on {self.samples} samples"


def _as_list(outputs: Outputs) -> list[np.ndarray]:
    return [outputs] if isinstance(outputs, np.ndarray) else list(outputs)


def output_figures(name: str, reference: np.ndarray, candidate: np.ndarray) -> OutputFigures:
    ref = np.asarray(reference, dtype=np.float64)
    out = np.asarray(candidate, dtype=np.float64)
    diff = np.abs(ref - out)
    scale = np.abs(ref)
    # Relative error is only meaningful where the reference is not ~0; the floor is 1e-3 of the output scale.
    floor = max(float(scale.max()) * 1e-3, 1e-12) if scale.size else 1.0
    norm = float(np.linalg.norm(ref) * np.linalg.norm(out))
    cosine = float(np.dot(ref.ravel(), out.ravel()) / norm) if norm > 0 else float(np.array_equal(ref, out))
    noise, signal = float((diff**2).sum()), float((ref**2).sum())
    snr = float("inf") if noise == 0 else (10 * np.log10(signal / noise) if signal > 0 else float("-inf"))
    return OutputFigures(name, float(diff.max()) if diff.size else 0.0, float(diff.mean()) if diff.size else 0.0,
                         float((diff / np.maximum(scale, floor)).max()) if diff.size else 0.0, cosine, snr,
                         float(scale.max()) if scale.size else 0.0)


def compare(reference: Outputs, candidate: Outputs, labels: Any = None, *, task: Task | None = None,
            names: Sequence[str] | None = None,
            decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None = None,
            image_size: tuple[int, int] | None = None) -> Comparison:
    """Compare every output of ``candidate`` with ``reference``'s (same count and shapes; float64), and measure
    the task on the first output (``decoder``: a detector's post-processing over all outputs). ``task`` None:
    inferred from the reference's outputs where they show one (trtpipe.tasks.infer_task; ``image_size``, the
    input's height and width where known, to check a detector's boxes against), the line saying so in
    ``inference``. ``labels``: class indices, masks or label boxes for the task."""
    refs, cands = _as_list(reference), _as_list(candidate)
    if len(refs) != len(cands):
        raise BadInput(f"The model has {len(cands)} outputs and its reference {len(refs)}: they are not the same "
                       "model (convert it again from the reference).")
    for index, (ref, cand) in enumerate(zip(refs, cands, strict=True)):
        if ref.shape != cand.shape:
            raise BadInput(f"Output {index} is shaped {list(cand.shape)} and the reference's {list(ref.shape)}: they "
                           "are not the same model (convert it again from the reference).")
    names = list(names) if names is not None else [f"output_{i}" if len(refs) > 1 else "output"
                                                   for i in range(len(refs))]
    per_output = tuple(output_figures(name, r, c) for name, r, c in zip(names, refs, cands, strict=True))
    shapes = [tuple(r.shape) for r in refs]
    inferred, from_values = None, False
    if task is None and decoder is None:
        inference = infer_task(refs, image_size)
        task, inferred, from_values = inference.task, inference.line(), inference.from_values
        if inference.decoder is not None:
            decoder = detect.DECODERS[inference.decoder]
    elif task is None:
        task = Task.DETECT
    elif decoder is None:
        check_fits(task, shapes)
    fidelity = _fidelity(task, refs, cands, labels, decoder)
    worst = min(per_output, key=lambda o: o.cosine)
    return Comparison(
        max_abs_err=max(o.max_abs_err for o in per_output),
        mean_abs_err=max(o.mean_abs_err for o in per_output),
        max_rel_err=max(o.max_rel_err for o in per_output),
        cosine=worst.cosine,
        top1_agreement=fidelity.agreement if task is Task.CLASSIFY else None,
        ref_max_abs=max(o.ref_max_abs for o in per_output),
        samples=int(refs[0].shape[0]) if refs[0].ndim else 1,
        reference_accuracy=fidelity.reference_accuracy,
        accuracy=fidelity.accuracy,
        task=task,
        agreement=fidelity.agreement,
        agreement_name=fidelity.agreement_name,
        accuracy_name=fidelity.accuracy_name,
        figures=dict(fidelity.figures),
        outputs=per_output,
        note=fidelity.note,
        agreement_interval=fidelity.agreement_interval,
        accuracy_interval=fidelity.accuracy_interval,
        drop_interval=fidelity.drop_interval,
        agreement_on=fidelity.agreement_on,
        inference=inferred or fidelity.measured_by,
        figure_intervals=dict(fidelity.figure_intervals),
        inferred_from_values=from_values,
    )


def _fidelity(task: Task, refs: list[np.ndarray], cands: list[np.ndarray], labels: Any,
              decoder: Callable[[Sequence[np.ndarray]], list[Any]] | None) -> Fidelity:
    measure = MEASURES[task]
    if task is Task.DETECT:
        return measure.measure(refs[0], cands[0], labels, decoder=decoder, outputs=(refs, cands))
    ref, cand = np.asarray(refs[0], dtype=np.float64), np.asarray(cands[0], dtype=np.float64)
    try:
        return measure.measure(ref, cand, labels)
    except (ValueError, IndexError) as error:
        raise BadInput(f"The {task} measure cannot read the outputs ({error}).") from None


def _within(interval: Interval | None) -> str:
    """`` (95% CI 89.3-100.0 %)`` after a share, or nothing where it has no interval."""
    return "" if interval is None else f" (95% CI {interval.percent()})"


def _hull(intervals: list[Interval | None]) -> Interval | None:
    """Several parts' intervals as one: the smallest holding them all (wider than one over every sample, so it
    never claims more than the parts show); None unless every part has one."""
    known = [i for i in intervals if i is not None]
    if not known or len(known) != len(intervals):
        return None
    merged = known[0]
    for interval in known[1:]:
        merged = hull(merged, interval, merged.method)
    return Interval(merged.low, merged.high, sum(i.units for i in known), merged.method, merged.level)


def merge(parts: list[Comparison]) -> Comparison:
    """Worst case over several comparisons of one model (errors per output, the lowest cosine), the task's figures
    weighted by samples, their intervals the hull of the parts'."""
    total = sum(p.samples for p in parts)

    def weighted(values: list[tuple[float | None, int]]) -> float | None:
        known = [(v, n) for v, n in values if v is not None]
        return sum(v * n for v, n in known) / sum(n for _, n in known) if known else None

    outputs = tuple(
        OutputFigures(group[0].name, max(o.max_abs_err for o in group), max(o.mean_abs_err for o in group),
                      max(o.max_rel_err for o in group), min(o.cosine for o in group), min(o.snr_db for o in group),
                      max(o.ref_max_abs for o in group))
        for group in zip(*(p.outputs for p in parts), strict=True))
    figures = {key: weighted([(p.figures.get(key), p.samples) for p in parts]) for key in parts[0].figures}
    first = parts[0]
    return Comparison(
        max_abs_err=max(p.max_abs_err for p in parts),
        mean_abs_err=max(p.mean_abs_err for p in parts),
        max_rel_err=max(p.max_rel_err for p in parts),
        cosine=min(p.cosine for p in parts),
        top1_agreement=weighted([(p.top1_agreement, p.samples) for p in parts]),
        ref_max_abs=max(p.ref_max_abs for p in parts),
        samples=total,
        reference_accuracy=weighted([(p.reference_accuracy, p.samples) for p in parts]),
        accuracy=weighted([(p.accuracy, p.samples) for p in parts]),
        task=first.task,
        agreement=weighted([(p.agreement, p.samples) for p in parts]),
        agreement_name=first.agreement_name,
        accuracy_name=first.accuracy_name,
        figures={k: v for k, v in figures.items() if v is not None},
        outputs=outputs,
        note=next((p.note for p in parts if p.note), None),
        agreement_interval=_hull([p.agreement_interval for p in parts]),
        accuracy_interval=_hull([p.accuracy_interval for p in parts]),
        drop_interval=_hull([p.drop_interval for p in parts]),
        inference=next((p.inference for p in parts if p.inference), None),
        figure_intervals={key: found for key in first.figure_intervals
                          if (found := _hull([p.figure_intervals.get(key) for p in parts])) is not None},
        inferred_from_values=first.inferred_from_values,
    )


def top1_accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(logits.argmax(1) == labels))


@dataclass(frozen=True)
class Tolerance:
    """Allowed error of every output against its reference: max |candidate - reference| <= atol + rtol * max
    |reference|, and a cosine floor. The bound scales with each output's own magnitude (random-weight ImageNet nets
    emit logits in the hundreds, the digits model in the tens), and an output of small values is not judged by a
    larger one's scale. The defaults are FP32's (convert's verification)."""

    atol: float = 1e-4
    rtol: float = 1e-4
    min_cosine: float = 0.9999

    def allowed_abs(self, ref_max_abs: float) -> float:
        return self.atol + self.rtol * ref_max_abs

    def accepts(self, comparison: Comparison) -> bool:
        return all(output.max_abs_err <= self.allowed_abs(output.ref_max_abs) and output.cosine >= self.min_cosine
                   for output in comparison.outputs)


WITHIN, OVER, UNDECIDED = "within", "over", "undecided"


@dataclass(frozen=True)
class BudgetVerdict:
    """An accuracy budget judged as every choice is, **decided on the point estimate, claimed by the interval**:
    ``within`` where the drop's best estimate is within the budget, ``over`` where it is beyond (``undecided`` only
    where nothing measured the figure). ``sure``: the drop's 95 % interval lies on the same side (else the budget
    straddles it, said "undecided" in amber, and ``needed`` is about how many samples would make it sure)."""

    decision: str  # WITHIN or OVER (the point estimate), UNDECIDED where nothing was measured
    line: str  # the verdict in one line, for people
    needed: int | None = None  # not sure: about how many samples would decide
    sure: bool = True

    @property
    def undecided(self) -> bool:
        """Whether the interval straddles the budget (or nothing measured the figure): said in amber."""
        return self.decision == UNDECIDED or not self.sure


def judge_budget(comparison: Comparison, budget_pp: float) -> BudgetVerdict:
    """``comparison``'s drop (:attr:`Comparison.drop_pp`) against ``budget_pp`` points, decided on its point and
    claimed by its 95 % interval; a comparison without an interval (read from an old manifest) says so."""
    drop, interval = comparison.drop_pp, comparison.drop_interval_pp
    if drop is None:
        return BudgetVerdict(UNDECIDED, f"nothing measured the task's figure, so the budget of {budget_pp} pp cannot "
                                        "be judged", sure=False)
    decision = WITHIN if drop <= budget_pp + 1e-9 else OVER
    if interval is None:
        return BudgetVerdict(decision, f"drop {drop:.2f} pp {'within' if decision == WITHIN else 'over'} the budget "
                                       f"of {budget_pp} pp (a point figure: no interval was measured)")
    change = f"drop {drop:.2f} pp" if drop >= 0.005 else f"gain {-drop:.2f} pp" if drop <= -0.005 else "no drop"
    figure = f"{change} (drop 95% CI {interval.low:+.1f} to {interval.high:+.1f} pp on {interval.units} samples)"
    if interval.high <= budget_pp:
        return BudgetVerdict(WITHIN, f"{figure}: within the budget of {budget_pp} pp (even the interval's upper "
                                     "bound is)")
    if interval.low > budget_pp:
        return BudgetVerdict(OVER, f"{figure}: over the budget of {budget_pp} pp (even the interval's lower bound "
                                   "is)")
    margin = max(abs(budget_pp - drop), 0.1) / 100
    needed = trials_to_resolve(margin, observed=1 - min(max(drop, 0.0), 100.0) / 100)
    more = max(needed - interval.units, 1)
    side = "within" if decision == WITHIN else "over"
    return BudgetVerdict(decision, f"{figure}: {side} the budget of {budget_pp} pp on the best estimate, undecided: "
                                   f"the {interval.units} samples are too few to be sure (the interval straddles it); "
                                   f"about {needed} samples ({more} more) would: give --eval DATA or more --calib "
                                   "samples", needed, sure=False)
