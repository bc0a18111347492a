"""How far a figure taken over timed rounds can be trusted: its 95 % interval over the rounds, and the flag of a row
or a ratio whose rounds disagree.

Every row is timed in many short rounds taken in turn across the variants (rounds.py), so a slow spell of a shared
machine lands on every row alike. A row's figures are statistics over those rounds, each with a percentile bootstrap
interval over them (trtpipe/intervals.py): its p50 is the median of its rounds' p50s, its tail the median of its
rounds' p99s, and a speedup the median of the ratios of two rows' p50s paired round by round (both rows timed moments
apart, so a burst that slows both cancels out). A median over rounds is what a burst hitting a minority of rounds
cannot swing; its interval says how far the rounds let it move.

A figure is *unstable* when its interval reaches more than :data:`REACH` (10 %) away from it on either side: then
its rounds disagree too much for the figure to be read as a measurement, whatever the point says. The threshold is
pyperf's (it warns when a benchmark's standard deviation exceeds 10 % of its mean); stated on the interval of the
median it is robust where pyperf's is not: a few stalled rounds among twenty do not flag a row whose median they
cannot move, and a row whose rounds split between two speeds is flagged even when their mean looks calm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtpipe.intervals import Interval, bootstrap_values

# Fewer rounds than this have no median to speak of (of two it is their mean, and one stalled round makes it) and
# no interval: the figure is taken over all runs pooled instead, and no row is flagged.
MIN_ROUNDS = 3
REACH = 0.10  # a figure whose 95 % interval reaches further than this fraction from it is unstable
ADVICE = ("rerun with a longer --duration, --threads below the core count, or on a quieter machine (nothing else "
          "running)")


def median_over_rounds(values: Sequence[float] | None) -> tuple[float, Interval] | None:
    """The median of one value per round and its 95 % bootstrap interval over the rounds, or None with too few
    rounds to have either."""
    if values is None or len(values) < MIN_ROUNDS:
        return None
    array = np.asarray(values, dtype=np.float64)
    return float(np.median(array)), bootstrap_values(array)


def paired_ratios(numerators: Sequence[float] | None, denominators: Sequence[float] | None) -> list[float] | None:
    """Round by round, ``numerators[i] / denominators[i]`` (two rows' p50s of the same rounds), or None when the
    rows were not timed in the same rounds."""
    if not numerators or not denominators or len(numerators) != len(denominators):
        return None
    if any(d <= 0 for d in denominators):
        return None
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


def reach(figure: float, interval: Interval) -> float:
    """How far, as a fraction of ``figure``, its interval reaches from it on the further side."""
    if figure <= 0:
        return float("inf")
    return max(interval.high - figure, figure - interval.low) / figure


def is_unstable(figure: float, interval: Interval | None) -> bool:
    """Whether the rounds behind ``figure`` disagree beyond the threshold (never without an interval)."""
    return interval is not None and reach(figure, interval) > REACH


def row_instability(p50_ms: float, interval: Interval | None) -> str | None:
    """A row's flag: None when its rounds agree, else one line saying how they disagree and what to do."""
    if interval is None or not is_unstable(p50_ms, interval):
        return None
    return (f"its {interval.units} rounds' p50s disagree: the 95 % interval of their median, {_ms(interval.low)}-"
            f"{_ms(interval.high)} ms, reaches {_percent(reach(p50_ms, interval))} from {_ms(p50_ms)} ms (above "
            f"{100 * REACH:.0f} %); {ADVICE}")


def _percent(fraction: float) -> str:
    """A reach as a percentage, with a decimal near the threshold (10.4 %, not 10 %, above 10 %)."""
    return f"{100 * fraction:.1f} %" if fraction < 2 * REACH else f"{100 * fraction:.0f} %"


def _ms(value: float) -> str:
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def ratio_instability(ratio: float, interval: Interval | None) -> str | None:
    """A speed ratio's flag: None when its paired rounds agree, else one line saying how and what to do."""
    if interval is None or not is_unstable(ratio, interval):
        return None
    return (f"unstable: its {interval.units} paired rounds disagree (the interval reaches "
            f"{_percent(reach(ratio, interval))} from {format_ratio(ratio)}x, above {100 * REACH:.0f} %); {ADVICE}")


def format_ratio(value: float) -> str:
    """A speed ratio to three significant figures at most (``6.81``, ``24.9``, ``1913``): rounds of a shared machine
    never pin one down further."""
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def format_interval(interval: Interval, unit: str = "x") -> str:
    """``6.52-7.10x``: a ratio's interval as the reports print it."""
    return f"{format_ratio(interval.low)}-{format_ratio(interval.high)}{unit}"


class Ratio:
    """How many times faster one row is than another: the median of their paired round ratios with its interval,
    or, with too few rounds, the ratio of their p50s (no interval)."""

    def __init__(self, slower_rounds: Sequence[float] | None, faster_rounds: Sequence[float] | None,
                 slower_p50: float, faster_p50: float) -> None:
        ratios = paired_ratios(slower_rounds, faster_rounds)
        over = median_over_rounds(ratios)
        self.ratios: list[float] | None = ratios if over is not None else None
        self.value: float = over[0] if over is not None else slower_p50 / faster_p50
        self.interval: Interval | None = over[1] if over is not None else None

    @property
    def unstable(self) -> str | None:
        return ratio_instability(self.value, self.interval)
