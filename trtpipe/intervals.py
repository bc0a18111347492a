"""Confidence intervals for the figures trtpipe prints: speed ratios over timed rounds, task figures over samples.

A figure without its uncertainty claims more than its data show: 32 held-out crops cannot tell 90 % from 100 %,
and three rounds of a second on a busy machine cannot tell a noisy neighbour from a real difference. Every figure
a person reads is stated with an :class:`Interval` from here, and every gate judges one of its bounds.

Two methods, both deterministic (fixed seed) so that a rerun on the same numbers prints the same interval:

- :func:`bootstrap`: the percentile bootstrap of any statistic over independent units (rounds, images),
  resampled with replacement (Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 13).
- :func:`wilson`: Wilson's score interval for a proportion (successes of trials). Unlike the bootstrap it does not
  collapse to a point at 0 % or 100 %: 32 of 32 agreeing images give 89.3-100 %, not 100-100 %.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

LEVEL = 0.95  # every interval trtpipe prints is a 95 % interval
RESAMPLES = 2000
SEED = 0


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval: ``low`` and ``high`` at ``level``, from ``units`` independent units."""

    low: float
    high: float
    units: int  # how many independent units (rounds, images) it was computed over
    method: str  # "bootstrap", "wilson", ...
    level: float = LEVEL

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"interval low {self.low} above high {self.high}")

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    @property
    def width(self) -> float:
        return self.high - self.low

    def percent(self, digits: int = 1) -> str:
        """The interval of a share as people read it: ``"89.3-100.0 %"``."""
        return f"{100 * self.low:.{digits}f}-{100 * self.high:.{digits}f} %"

    def to_dict(self) -> dict[str, float | int | str]:
        return {"low": self.low, "high": self.high, "units": self.units, "method": self.method, "level": self.level}

    @classmethod
    def from_dict(cls, data: dict[str, float | int | str]) -> Interval:
        return cls(low=float(data["low"]), high=float(data["high"]), units=int(data["units"]),
                   method=str(data["method"]), level=float(data.get("level", LEVEL)))


def bootstrap(statistic: Callable[[np.ndarray], float], units: int, *, resamples: int = RESAMPLES,
              level: float = LEVEL, seed: int = SEED) -> Interval:
    """The percentile bootstrap interval of ``statistic`` over ``units`` independent units.

    ``statistic`` is called with an array of unit indices (a resample, with repeats) and returns the figure computed
    on those units only; it is called once more with every index for nothing: the caller has the point figure.
    """
    if units < 1:
        raise ValueError("a bootstrap needs at least one unit")
    rng = np.random.default_rng(seed)
    figures = np.array([statistic(rng.integers(0, units, size=units)) for _ in range(resamples)], dtype=np.float64)
    figures = figures[np.isfinite(figures)]
    if figures.size == 0:
        raise ValueError("the statistic was not finite on any resample")
    tail = 100.0 * (1.0 - level) / 2.0
    low, high = np.percentile(figures, [tail, 100.0 - tail])
    return Interval(low=float(low), high=float(high), units=units, method="bootstrap", level=level)


def bootstrap_values(values: np.ndarray, statistic: Callable[[np.ndarray], float] = np.median, *,
                     resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> Interval:
    """The percentile bootstrap interval of ``statistic`` (the median by default) of ``values``, one per unit."""
    values = np.asarray(values, dtype=np.float64)
    return bootstrap(lambda index: float(statistic(values[index])), len(values), resamples=resamples, level=level,
                     seed=seed)


def wilson(successes: int, trials: int, *, level: float = LEVEL) -> Interval:
    """Wilson's score interval for the proportion ``successes / trials``."""
    if trials < 1:
        raise ValueError("a proportion needs at least one trial")
    if not 0 <= successes <= trials:
        raise ValueError(f"{successes} successes of {trials} trials")
    return wilson_share(successes / trials, trials, level=level)


def wilson_share(share: float, units: int, *, level: float = LEVEL) -> Interval:
    """Wilson's score interval at a share that need not be a whole count of ``units`` (a mean of per-unit figures
    in 0..1, an mAP): the uncertainty a share of that many independent units carries at least, since a figure
    bounded in 0..1 with mean p varies at most as a proportion does (variance p (1 - p))."""
    if units < 1:
        raise ValueError("a share needs at least one unit")
    z = _normal_quantile(1.0 - (1.0 - level) / 2.0)
    p = min(max(float(share), 0.0), 1.0)
    denominator = 1.0 + z * z / units
    centre = (p + z * z / (2 * units)) / denominator
    half = z * math.sqrt(p * (1 - p) / units + z * z / (4 * units * units)) / denominator
    # Exact at the ends: the centre minus the half-width is 0 or the centre plus it is 1 up to rounding.
    low = 0.0 if p == 0.0 else max(0.0, centre - half)
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return Interval(low=low, high=high, units=units, method="wilson", level=level)


def hull(first: Interval, second: Interval, method: str) -> Interval:
    """The smallest interval holding both (over the larger unit count): the wider claim of two methods."""
    return Interval(low=min(first.low, second.low), high=max(first.high, second.high),
                    units=max(first.units, second.units), method=method, level=first.level)


def share_interval(share: float, statistic: Callable[[np.ndarray], float], units: int, *,
                   resamples: int = RESAMPLES) -> Interval:
    """The interval of a share in 0..1 (mAP, pixel agreement, F1) measured over ``units`` images: the percentile
    bootstrap over images, widened to at least Wilson's interval at the same share (:func:`wilson_share`). A
    bootstrap cannot move where no image showed an error, so alone it collapses to a point at 100 %: 32 perfect
    images give 89.3-100 %, not 100-100 %."""
    floor = wilson_share(share, units)
    try:
        resampled = bootstrap(statistic, units, resamples=resamples)
    except ValueError:  # the statistic was undefined on every resample: the floor is all that is known
        return Interval(floor.low, floor.high, units, "wilson", floor.level)
    return hull(resampled, floor, "bootstrap over images, at least Wilson")


def difference_interval(difference: float, statistic: Callable[[np.ndarray], float], units: int, *,
                        resamples: int = RESAMPLES) -> Interval:
    """The interval of a paired difference of two shares measured on the same ``units`` images (a reference's
    accuracy minus a candidate's): the percentile bootstrap of the difference over images, widened to at least
    the share an event no image showed may still have (Wilson's upper bound of 0 of ``units``) either side, so
    that identical answers on 32 images give about +-10.7 points, not 0-0."""
    unseen = wilson(0, units).high
    floor = Interval(max(-1.0, difference - unseen), min(1.0, difference + unseen), units, "unseen-event floor")
    try:
        resampled = bootstrap(statistic, units, resamples=resamples)
    except ValueError:
        return floor
    return hull(resampled, floor, "paired bootstrap over images, at least the unseen-event floor")


def trials_to_resolve(margin: float, *, observed: float = 1.0, level: float = LEVEL) -> int:
    """About how many units a proportion near ``observed`` needs before its interval's lower bound comes within
    ``margin`` (a fraction: 0.01 for one point) of it: the figure trtpipe quotes when the data are too few to decide
    whether a drop is within a budget. At a perfect score that is about 3.84 / margin units (95 %)."""
    if margin <= 0:
        raise ValueError("margin must be positive")
    observed = min(max(observed, 0.0), 1.0)

    def resolved(n: int) -> bool:
        return observed - wilson(round(observed * n), n, level=level).low <= margin

    high = 1
    while not resolved(high):
        if high >= 10_000_000:
            return high
        high *= 2
    low = high // 2
    while low + 1 < high:  # the smallest n that resolves, by bisection (the bound shrinks as n grows)
        middle = (low + high) // 2
        low, high = (low, middle) if resolved(middle) else (middle, high)
    return high


SAMPLES_QUOTED = 10_000  # past this many, no count is quoted: a change that small is settled by no data a user has


def would_decide(needed: int) -> str:
    """The words for how many samples would decide an undecided figure, the same in every line that says it: "about
    N would decide", or past SAMPLES_QUOTED "over 10,000 would decide", where a count (295,535 for a -0.1 pp change
    on 32 detector images) would read as advice no one could follow."""
    if needed > SAMPLES_QUOTED:
        return f"over {SAMPLES_QUOTED:,} would decide: a change this small is a tie on any data at hand"
    return f"about {needed} would decide"


def _normal_quantile(q: float) -> float:
    """The standard normal quantile (the standard library's; no SciPy for one number)."""
    return NormalDist().inv_cdf(q)
