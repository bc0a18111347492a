"""Which of the variants that meet every limit is the fastest, by the statistic the table prints, and whether the
measurement can tell them apart.

Selection ranks by the row's speedup (bench's median of paired round ratios against the reference, with its 95 %
interval: the figure of the table's Speedup column, the headline and the chart), not by its p50, so the choice never
contradicts the table, and it decides by expected value: the fastest row on the point estimate is chosen, unless a
simpler, smaller or more portable artifact (FP32 before reduced precision; then the smaller file; then the runtime
that runs the file on more machines) is within ``PREFERENCE_MARGIN`` of it. Where the chosen row's interval overlaps
another's the measurement cannot say which is faster: the line says they are *tied*, names them, and says why this
one was chosen; the overlap words the claim and never vetoes the choice. A choice made from a row flagged unstable
(stability.row_verdict: a wide interval, or other processes' load while it was timed) is *flagged*: the run says so
in amber with the rerun hint.
Rows without a speedup (a bench JSON without a reference at that batch) are ranked by p50, without ties.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtpipe.bench.rows import BenchRow
from trtpipe.bench.stability import format_speedup, is_load_reason, verdict_reasons
from trtpipe.intervals import Interval
from trtpipe.runtime.registry import backend_name, portability
from trtpipe.vocab import Precision

# Simpler first: FP32 computes as the reference does; each reduced precision adds a step that can change answers.
_PRECISION_ORDER = (Precision.FP32, Precision.TF32, Precision.BF16, Precision.FP16, Precision.INT8)
# More portable first: each backend's entry says how portable what it runs is (``portability``: an ONNX file on
# any CPU before an engine for one GPU model and one TensorRT version), and its name in prose.
RERUN = "rerun with `--rebench` on a quieter machine"
# What is known before the data: a simpler, smaller or more portable artifact is worth this much speed. Beyond it the
# faster row is chosen on its point estimate, however wide the intervals (they word the claim, "tied", and never
# veto a choice: a choice by expected value).
PREFERENCE_MARGIN = 0.05


@dataclass(frozen=True)
class Ranked:
    """The chosen row among those meeting the limits, the rows tied with it, and the words for both."""

    row: BenchRow
    tied: tuple[BenchRow, ...]  # the other rows whose speed the measurement cannot tell from the chosen one's
    words: str  # "fastest at batch 1: 3.08x (2.52-3.62) ..." or "tied at batch 1 ...: chosen as ..."
    flagged: str | None  # why the choice rests on an unstable measurement, with the rerun hint; None when steady


def speed(row: BenchRow) -> tuple[float, Interval | None]:
    """The row's speed as the table prints it: its speedup and that speedup's 95 % interval."""
    return row.speedup_vs_torch_fp32 or 0.0, row.speedup_interval


def figure(row: BenchRow) -> str:
    """``3.08x (2.52-3.62)``: the table's Speedup cell of the row."""
    value, interval = speed(row)
    return format_speedup(value, interval)


def _overlap(a: BenchRow, b: BenchRow) -> bool:
    (_, first), (_, second) = speed(a), speed(b)
    return first is not None and second is not None and first.low <= second.high and second.low <= first.high


def _preference(row: BenchRow) -> tuple[int, float, int]:
    precision = _PRECISION_ORDER.index(row.precision) if row.precision in _PRECISION_ORDER else len(_PRECISION_ORDER)
    runtime = portability(row.backend)
    return precision, row.model_size_mb if row.model_size_mb is not None else float("inf"), runtime


def _why_preferred(chosen: BenchRow, other: BenchRow) -> str:
    """Why ``chosen`` is preferred to ``other`` when their speeds are tied, in a few words."""
    mine, theirs = _preference(chosen), _preference(other)
    if mine[0] != theirs[0]:
        return (f"the simpler arithmetic ({chosen.precision.upper()} rather than {other.precision.upper()}: no "
                "measurable speed is given up for a reduced precision)")
    if mine[1] != theirs[1] and chosen.model_size_mb is not None and other.model_size_mb is not None:
        return f"the smaller file ({chosen.model_size_mb:.1f} MB rather than {other.model_size_mb:.1f} MB)"
    if mine[2] != theirs[2]:
        return f"the more portable runtime ({backend_name(chosen.backend)} rather than {backend_name(other.backend)})"
    return "the first of equals"


def flag(rows: list[BenchRow]) -> str | None:
    """Why a choice among ``rows`` rests on an unstable measurement, with what to do; None when every row is
    steady. Under load: ``chosen under load (...): rerun with `--rebench` on a quieter machine``."""
    reasons = list(dict.fromkeys(reason for row in rows for reason in verdict_reasons(row.unstable)))
    if not reasons:
        return None
    load = [reason for reason in reasons if is_load_reason(reason)]
    if load:
        return f"chosen under load ({load[0]}): {RERUN}"
    flagged = [row.variant for row in rows if row.unstable]
    return f"chosen from an unstable measurement ({', '.join(flagged)}: {reasons[0]}): {RERUN}"


def rank(rows: list[BenchRow], *, batch: int, reference: str) -> Ranked:
    """The row to choose among ``rows`` (each meets every limit): the fastest by speedup on the point estimate, or
    a simpler, smaller or more portable one within ``PREFERENCE_MARGIN`` of it; the rows whose intervals overlap the
    chosen one's are named as tied (the claim's words). Without speedups, the lowest p50."""
    if not all(row.speedup_vs_torch_fp32 for row in rows):
        row = min(rows, key=lambda r: r.p50_ms)
        return Ranked(row, (), f"fastest at batch {batch} (p50 {row.p50_ms:.2f} ms; no speedup to rank by)",
                      flag([row]))
    fastest = max(rows, key=lambda r: speed(r)[0])
    near = [row for row in rows if speed(row)[0] * (1 + PREFERENCE_MARGIN) >= speed(fastest)[0]]
    row = min(near, key=lambda r: (_preference(r), -speed(r)[0]))
    others = tuple(other for other in rows if other is not row and _overlap(other, row))
    statistic = (f"{figure(row)} {reference}, the median of paired rounds with its 95 % interval; p50 "
                 f"{row.p50_ms:.2f} ms")
    why = "the fastest on the point estimate" if row is fastest else (
        f"{_why_preferred(row, fastest)}, within {100 * PREFERENCE_MARGIN:.0f} % of the fastest on the point "
        f"estimate ({fastest.variant} {figure(fastest)})")
    if not others:
        lead = f"fastest at batch {batch}" if row is fastest else f"within {100 * PREFERENCE_MARGIN:.0f} % of the " \
                                                                    f"fastest at batch {batch}"
        return Ranked(row, (), f"{lead}: {statistic}" + ("" if row is fastest else f", chosen as {why}"),
                      flag([row]))
    named = "; ".join(f"{other.variant} {figure(other)}" for other in others)
    words = (f"tied at batch {batch} with {named} (their 95 % intervals overlap, so the measurement cannot say which "
             f"is faster): {row.variant} {statistic}, chosen as {why}")
    return Ranked(row, others, words, flag([row, *others]))


def under_load(rows: list[BenchRow]) -> str | None:
    """Where nothing was chosen from rows timed beside other processes' work: that the figures (tails first) were
    taken under load, with the rerun hint; None on a quiet machine."""
    load = next((reason for row in rows for reason in verdict_reasons(row.unstable) if is_load_reason(reason)), None)
    return f"measured under load ({load}), which inflates tails: {RERUN}" if load else None
