"""The one rule that keeps or drops an optimize step (AdaRound, bias correction, FP16 in the layers INT8 left
float), judged on the held-out (or --eval) samples, never on the data a step was fit to.

A step is compared with the model without it, sample by sample, on the same samples: the change of the task's
figure against FP32 (top-1 agreement, mAP@0.5, pixel agreement, F1...) gets its 95 % interval, the paired
bootstrap over samples widened to at least the share an event no sample showed may still have
(:func:`trtpipe.intervals.difference_interval`: about +-10.7 points on 32 samples). The change is *outside the
noise* only where that interval excludes zero. Then:

- a step made for accuracy (AdaRound, bias correction) is kept only where its gain is outside the noise: a step
  that cannot be shown to help is one more thing fit to a few samples;
- a step made for speed (FP16 in the float layers) is kept unless its loss is outside the noise.

Both are one rule: **a step is kept only where the data do not show it costs accuracy, and, where accuracy is all
it is for, show that it gains some.** Without a task figure (generic outputs) the worst cosine against FP32 decides,
a measured error with no sampling interval: higher is a gain.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.comparison import Comparison
from trtpipe.intervals import Interval, difference_interval

ACCURACY, SPEED = "accuracy", "speed"  # what a step is for
GAIN, LOSS, NOISE = "gain", "loss", "within the noise"


@dataclass(frozen=True)
class StepVerdict:
    """Whether a step is kept, what its change was (GAIN, LOSS or NOISE), its interval in points (None: judged on
    the cosine), and the change in words."""

    kept: bool
    change: str
    interval_pp: Interval | None
    words: str

    def to_dict(self) -> dict[str, object]:
        return {"change": self.change, "change_interval_pp": None if self.interval_pp is None else
                self.interval_pp.to_dict(), "rule": RULE}


RULE = ("kept only where the held-out figure does not drop beyond the noise and, for a step made for accuracy, "
        "rises beyond it (the paired 95 % interval of the change excludes zero)")


def change(before: Comparison, after: Comparison) -> tuple[str, Interval | None, str]:
    """The change from ``before`` to ``after`` (the same samples): GAIN, LOSS or NOISE, its interval in points,
    and the figures in words."""
    if before.agreement is None or after.agreement is None:
        kind = GAIN if after.cosine > before.cosine else LOSS if after.cosine < before.cosine else NOISE
        return kind, None, f"worst cosine {before.cosine:.6f} → {after.cosine:.6f}"
    interval = paired_change(before, after)
    words = f"{after.agreement_name} {100 * before.agreement:.2f} % → {100 * after.agreement:.2f} %"
    if interval is None:  # no per-sample figures (merged): only a difference that no interval overlaps is real
        low, high = _unpaired(before, after)
        interval = Interval(low, high, before.samples, "unpaired: the intervals' far ends")
    words += f" (change {interval.low:+.1f} to {interval.high:+.1f} pp, 95% CI, on {interval.units} samples)"
    kind = GAIN if interval.low > 0 else LOSS if interval.high < 0 else NOISE
    return kind, interval, words


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


def _unpaired(before: Comparison, after: Comparison) -> tuple[float, float]:
    """Without pairs, the change's widest reading from the two intervals (a conservative stand-in)."""
    a, b = before.agreement_interval, after.agreement_interval
    if a is None or b is None or before.agreement is None or after.agreement is None:
        point = 100 * ((after.agreement or 0.0) - (before.agreement or 0.0))
        return point, point
    return 100 * (b.low - a.high), 100 * (b.high - a.low)


def judge_step(before: Comparison, after: Comparison, purpose: str) -> StepVerdict:
    """The rule (see the module): ``after`` (the model with the step) against ``before`` (without it)."""
    kind, interval, words = change(before, after)
    kept = kind == GAIN if purpose == ACCURACY else kind != LOSS
    return StepVerdict(kept, kind, interval, words)
