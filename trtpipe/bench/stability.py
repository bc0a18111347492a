"""How far a figure taken over timed rounds can be trusted: its 95 % interval over the rounds, and the flag of a row
or a ratio whose rounds disagree.

Every row is timed in many short rounds taken in turn across the variants (rounds.py), so a slow spell of a shared
machine lands on every row alike. A row's figures are statistics over those rounds, each with a percentile bootstrap
interval over them (trtpipe/intervals.py): its p50 is the median of its rounds' p50s, its tail the median of its
rounds' p99s, and a speedup the median of the ratios of two rows' p50s paired round by round (both rows timed moments
apart, so a burst that slows both cancels out). A median over rounds is what a burst hitting a minority of rounds
cannot swing; its interval says how far the rounds let it move.

A row has one stability verdict, made once here (:func:`row_verdict`) and read by every report, the selection and
the JSON (the row's ``unstable``): it is unstable when its p50's interval or its speedup's interval reaches too far
(below), or when other processes took more than other_load.BUSY_SHARE of the machine while the rounds ran (a shift
that hits every round alike, which no interval over rounds shows). So no row is ``steady`` in the table and
``unstable`` in a headline.

A figure is *unstable* when its interval reaches more than :data:`REACH` (10 %) away from it on either side: then
its rounds disagree too much for the figure to be read as a measurement, whatever the point says. The threshold is
pyperf's (it warns when a benchmark's standard deviation exceeds 10 % of its mean); stated on the interval of the
median it is robust where pyperf's is not: a few stalled rounds among twenty do not flag a row whose median they
cannot move, and a row whose rounds split between two speeds is flagged even when their mean looks calm.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trtpipe.bench.other_load import BUSY_SHARE
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
    """A row's p50 flag alone: None when its rounds agree, else one line saying how they disagree and what to do."""
    reason = _p50_reason(p50_ms, interval)
    return None if reason is None else f"{reason}; {ADVICE}"


def _p50_reason(p50_ms: float, interval: Interval | None) -> str | None:
    if interval is None or not is_unstable(p50_ms, interval):
        return None
    return (f"its {interval.units} rounds' p50s disagree: the 95 % interval of their median, {_ms(interval.low)}-"
            f"{_ms(interval.high)} ms, reaches {_percent(reach(p50_ms, interval))} from {_ms(p50_ms)} ms (above "
            f"{100 * REACH:.0f} %)")


def _speedup_reason(speedup: float | None, interval: Interval | None) -> str | None:
    if speedup is None or interval is None or not is_unstable(speedup, interval):
        return None
    return (f"its speedup's 95 % interval, {format_interval(interval)} over {interval.units} paired rounds, reaches "
            f"{_percent(reach(speedup, interval))} from {format_ratio(speedup)}x (above {100 * REACH:.0f} %)")


def load_reason(other_share: float | None) -> str | None:
    """The machine-wide reason every row of a run shares: other processes took more than BUSY_SHARE of the CPU
    while the rounds ran (None where they did not, or where it could not be read)."""
    if other_share is None or other_share <= BUSY_SHARE:
        return None
    return (f"other processes used {100 * other_share:.0f} % of this machine's CPU while the rounds ran (above "
            f"{100 * BUSY_SHARE:.0f} %), which can slow one row more than another")


def row_verdict(p50_ms: float, p50_interval: Interval | None, speedup: float | None,
                speedup_interval: Interval | None, other_share: float | None) -> str | None:
    """A row's one stability verdict: None (steady) when its p50's and its speedup's intervals reach no further
    than REACH and the machine was not busy; else every reason in one line, then what to do."""
    reasons = [reason for reason in (_p50_reason(p50_ms, p50_interval), _speedup_reason(speedup, speedup_interval),
                                     load_reason(other_share)) if reason]
    return "; ".join([*reasons, ADVICE]) if reasons else None


def verdict_reasons(unstable: str | None) -> list[str]:
    """The reasons of a row's verdict (:func:`row_verdict`), without the advice: [] for a steady row."""
    if not unstable:
        return []
    return [reason for reason in unstable.removesuffix(ADVICE).split("; ") if reason]


def is_load_reason(reason: str) -> bool:
    """Whether ``reason`` is the machine-wide one (:func:`load_reason`), which every row of the run shares."""
    return reason.startswith("other processes used")


def is_speedup_reason(reason: str) -> bool:
    return reason.startswith("its speedup's")


def verdict_word(unstable: str | None) -> str:
    """The verdict as one word, as the table's Stability column and the charts print it."""
    return "unstable" if unstable else "steady"


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


def format_speedup(value: float, interval: Interval | None) -> str:
    """``8.87x (8.60-9.19)``: a speedup with its interval as every table, chart and choice line prints it."""
    text = f"{format_ratio(value)}x"
    return f"{text} ({format_interval(interval, unit='')})" if interval is not None else text


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
