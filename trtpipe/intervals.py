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
    z = _normal_quantile(1.0 - (1.0 - level) / 2.0)
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # Exact at the ends: the centre minus the half-width is 0 or the centre plus it is 1 up to rounding.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(low=low, high=high, units=trials, method="wilson", level=level)


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


def _normal_quantile(q: float) -> float:
    """The standard normal quantile (the standard library's; no SciPy for one number)."""
    return NormalDist().inv_cdf(q)
