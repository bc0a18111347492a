"""The one rule that keeps or drops an optimize step (AdaRound, bias correction, FP16 in the layers INT8 left
float): **decide by expected value, claim by interval**.

A step is compared with the model without it, sample by sample, on the same judging samples (held-out, cross-fitted
or --eval: never the data a step was fit to). The change of the task's figure against FP32 (top-1 agreement,
mAP@0.5, pixel agreement, F1...) has a point estimate, the paired change, and a 95 % interval, the paired bootstrap
over samples widened to at least the share an event no sample showed may still have
(:func:`trtpipe.intervals.difference_interval`: about +-10.7 points on 32 samples).

**The decision uses the point estimate** and what is known before the data, by what the step is for:

- ``ACCURACY``, a step that costs nothing at run time (bias correction, AdaRound, better ranges: the file has the
  same nodes): kept unless its point change is negative. A tie (often a figure at its ceiling: 32 of 32 agree with
  and without the step) is no evidence either way, so the worst cosine against FP32, a continuous error the figure
  cannot see, breaks it: kept unless it fell (bias correction kept on such a tie cost a direction classifier 2 of
  200 unseen lines: docs/results/int8-decisions.md);
- ``ACCURACY_AT_COST``, a step that buys accuracy with run time (layers left in float): kept only where its point
  change is positive; a tie goes to the faster, simpler file;
- ``SPEED``, a step that trades accuracy for speed (FP16 in the float layers, fewer fallbacks): kept only where its
  point loss is within a stated tolerance, :data:`SPEED_TOLERANCE_PP` (1 point), or, under an accuracy budget, what
  is left of the budget after the steps before it (:func:`speed_tolerance_pp`). Never kept because a large loss is
  "within the noise".

With 24-32 samples almost nothing is significant: a rule that waits for significance keeps every speed step and
drops every accuracy step whatever the data say, and lost up to 11.6 points of mAP on real detectors
(docs/results/int8-decisions.md). **The interval only words the claim**: "a gain outside the noise" where it
excludes zero; otherwise "+10.0 pp on 32 samples, too few to be sure (about N would decide)".

Without a task figure (generic outputs) the worst cosine against FP32 decides, a measured error with no sampling
interval: higher is a gain, and a speed step may at most double the error before it plus
:data:`SPEED_COSINE_SLACK` (FP16 may draw INT8's rounding afresh rather than add to it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trtpipe.comparison import Comparison
from trtpipe.intervals import Interval, difference_interval, trials_to_resolve, would_decide

ACCURACY = "accuracy"  # accuracy at no run-time cost
ACCURACY_AT_COST = "accuracy at a run-time cost"
SPEED = "speed"  # accuracy traded for speed
GAIN, LOSS, NOISE = "gain", "loss", "within the noise"  # the claim the interval supports
SPEED_TOLERANCE_PP = 1.0
SPEED_COSINE_FACTOR = 2.0
SPEED_COSINE_SLACK = 0.001
RULE = ("decided on the paired point change on the judging samples: a step free at run time is kept unless it "
        "lowers the figure, one that costs run time only where it raises it, one that trades accuracy for speed only "
        "where its loss is within the tolerance; the 95 % interval words the claim")


@dataclass(frozen=True)
class StepVerdict:
    """Whether a step is kept (decided on the point estimate), the claim its interval supports (GAIN, LOSS or
    NOISE), the point change and its interval in points (None: judged on the cosine), about how many samples would
    make the claim sure (None: it is, or no number would), the change in words, and why it was kept or dropped."""

    kept: bool
    change: str
    point_pp: float | None
    interval_pp: Interval | None
    needed: int | None
    words: str
    why: str

    @property
    def sure(self) -> bool:
        """Whether the interval supports the claim (it excludes zero, or nothing was sampled)."""
        return self.change != NOISE

    def claim(self) -> str:
        """The change as the interval lets it be said: outside the noise, or too few samples to be sure."""
        if self.point_pp is None or self.interval_pp is None:
            return self.words
        if self.sure:
            return f"{self.words}, a {self.change} outside the noise"
        if abs(self.point_pp) < 0.05:
            return f"no change on {self.interval_pp.units} samples ({self.words})"
        more = would_decide(self.needed) if self.needed else "no number of samples would decide a zero"
        return (f"{self.point_pp:+.1f} pp on {self.interval_pp.units} samples, too few to be sure ({more}; "
                f"{self.words})")

    def to_dict(self) -> dict[str, object]:
        return {"change": self.change, "change_pp": None if self.point_pp is None else round(self.point_pp, 4),
                "change_interval_pp": None if self.interval_pp is None else self.interval_pp.to_dict(),
                **({"samples_to_decide": self.needed} if self.needed else {}), "why": self.why, "rule": RULE}


def change(before: Comparison, after: Comparison) -> tuple[str, float | None, Interval | None, str]:
    """The change from ``before`` to ``after`` (the same samples): the claim (GAIN, LOSS or NOISE), the point change
    and its interval in points (None on the cosine), and the figures in words."""
    if before.agreement is None or after.agreement is None:
        kind = GAIN if after.cosine > before.cosine else LOSS if after.cosine < before.cosine else NOISE
        return kind, None, None, f"worst cosine {before.cosine:.6f} → {after.cosine:.6f}"
    point = 100 * (after.agreement - before.agreement)
    interval = paired_change(before, after)
    words = f"{after.agreement_name} {100 * before.agreement:.2f} % → {100 * after.agreement:.2f} %"
    if interval is None:  # no per-sample figures (merged): only a difference that no interval overlaps is real
        low, high = _unpaired(before, after)
        interval = Interval(low, high, before.samples, "unpaired: the intervals' far ends")
    words += f" (change {point:+.1f} pp, 95% CI {interval.low:+.1f} to {interval.high:+.1f} pp, on " \
             f"{interval.units} samples)"
    kind = GAIN if interval.low > 0 else LOSS if interval.high < 0 else NOISE
    return kind, point, interval, words


def paired_change(before: Comparison, after: Comparison) -> Interval | None:
    """The 95 % interval, in points, of ``after``'s figure minus ``before``'s on the same samples, pair by pair;
    None where either lacks per-sample figures or they were judged on different samples."""
    first, second = before.agreement_on, after.agreement_on
    if first is None or second is None or before.samples != after.samples or before.agreement is None \
            or after.agreement is None:
        return None
    found = difference_interval(after.agreement - before.agreement,
                                lambda index: second(index) - first(index), before.samples)
    return Interval(100 * found.low, 100 * found.high, found.units, found.method)


def samples_to_decide(point_pp: float, interval: Interval) -> int | None:
    """About how many samples would put the interval of a change of ``point_pp`` on one side of zero: the paired
    interval's half-width shrinks as one over the root of the samples, and the unseen-event floor (Wilson's upper
    bound of 0 of n) must fall below the change too. None for a zero change (no number would)."""
    if abs(point_pp) < 1e-9 or interval.units <= 0:
        return None
    margin = abs(point_pp) / 100
    half = max(point_pp - interval.low, interval.high - point_pp) / 100
    by_spread = math.ceil(interval.units * (half / margin) ** 2)
    return max(by_spread, trials_to_resolve(margin), interval.units + 1)


def _unpaired(before: Comparison, after: Comparison) -> tuple[float, float]:
    """Without pairs, the change's widest reading from the two intervals (a conservative stand-in)."""
    a, b = before.agreement_interval, after.agreement_interval
    if a is None or b is None or before.agreement is None or after.agreement is None:
        point = 100 * ((after.agreement or 0.0) - (before.agreement or 0.0))
        return point, point
    return 100 * (b.low - a.high), 100 * (b.high - a.low)


def speed_tolerance_pp(budget_pp: float | None, drop_before_pp: float | None) -> float:
    """What a speed step may cost, in points: :data:`SPEED_TOLERANCE_PP`, or under an accuracy budget what is left
    of it after the drop so far (point estimates), so the file stays within the budget on the best estimate."""
    if budget_pp is None or drop_before_pp is None:
        return SPEED_TOLERANCE_PP
    return max(0.0, budget_pp - drop_before_pp)


def judge_step(before: Comparison, after: Comparison, purpose: str, *,
               tolerance_pp: float = SPEED_TOLERANCE_PP) -> StepVerdict:
    """The rule (see the module): ``after`` (the model with the step) against ``before`` (without it), decided on
    the point change; ``tolerance_pp``: what a SPEED step may cost."""
    kind, point, interval, words = change(before, after)
    needed = None if interval is None or point is None or kind != NOISE else samples_to_decide(point, interval)
    if point is None:  # the worst cosine: a measured error, no sampling interval
        error_before, error_after = 1.0 - before.cosine, 1.0 - after.cosine
        if purpose == SPEED:
            kept = math.isfinite(after.cosine) and \
                error_after <= SPEED_COSINE_FACTOR * error_before + SPEED_COSINE_SLACK
            why = (("it costs no more than rounding" if kept else "it costs more than rounding")
                   + f": its error (1 - worst cosine) {error_after:.2g} against {SPEED_COSINE_FACTOR:g}x the error "
                   f"before it ({error_before:.2g}) + {SPEED_COSINE_SLACK:g}")
        else:
            kept = after.cosine > before.cosine if purpose == ACCURACY_AT_COST else after.cosine >= before.cosine
            why = "the worst cosine " + ("rose" if after.cosine > before.cosine else "fell" if after.cosine <
                                         before.cosine else "did not change")
        return StepVerdict(kept, kind, None, None, None, words, why)
    if purpose == SPEED:
        kept = -point <= tolerance_pp + 1e-9
        why = (f"its point loss {max(0.0, -point):.2f} pp is " + ("within" if kept else "beyond")
               + f" the tolerance of {tolerance_pp:.2f} pp for a step that trades accuracy for speed")
    elif purpose == ACCURACY_AT_COST:
        kept = point > 1e-9
        why = ("its point change is a gain, worth its run time" if kept else
               "its point change is no gain, and it costs run time: the simpler, faster file is kept")
    elif abs(point) < 1e-9:  # a tie on the task figure, often at its ceiling: the continuous error decides
        kept = after.cosine >= before.cosine
        why = ("no change on the task figure, and the worst cosine against FP32 did not fall "
               f"({before.cosine:.6f} → {after.cosine:.6f})" if kept else
               "no change on the task figure, but the worst cosine against FP32 fell "
               f"({before.cosine:.6f} → {after.cosine:.6f}): a loss the figure, at its ceiling, cannot see")
    else:
        kept = point > 0
        why = ("it costs nothing at run time and its point change is a gain" if kept else
               "its point change is negative")
    return StepVerdict(kept, kind, point, interval, needed, words, why)
