"""Timed calls split into many short rounds taken in turn across every variant of a run.

A slow spell of a shared machine (another tenant, a burst of load, a frequency drop) then lands on all variants
alike instead of on the one being timed: each row keeps every round's p50 and p99, and stability.py turns them into
figures over rounds with their intervals (a speedup pairs two rows' p50s round by round). Twenty rounds by default:
three rounds of a second or more could not tell a noisy neighbour from a real difference (one stalled round of three
moved a headline 100-fold), twenty give a median that a burst hitting a minority of them cannot swing, and an
interval. The total per row is what was asked for (``--duration`` seconds or ``--iters`` runs); the first round
also pays the warm-up. :func:`timing.measure` times each round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.timing import LatencyStats, measure, settle

MIN_ITERS = 5


class Schedule:
    """How the runs asked for are split into rounds: how many, and each round's runs, time and warm-up."""

    def __init__(self, options: BenchOptions) -> None:
        self.options = options
        self.count = min(options.rounds, options.iters) if options.iters else options.rounds
        # At least MIN_ITERS runs per row in all: a call slower than a round's share of --duration is timed once
        # per round once there are that many rounds (twenty rounds of a 1 s call take 20 s, not 40 s).
        self.min_iters = max(1, -(-MIN_ITERS // self.count))

    def iters(self, round_index: int) -> int | None:
        total = self.options.iters
        if total is None:
            return None
        return total // self.count + (1 if round_index < total % self.count else 0)

    def duration(self) -> float | None:
        return None if self.options.iters else self.options.duration / self.count

    def warmup(self, round_index: int) -> int:
        # Later rounds discard one run: the caches another variant just used are this one's again.
        return self.options.warmup if round_index == 0 else min(1, self.options.warmup)


@dataclass
class Timed:
    """One row's timed call, its batch and its samples, one array per round."""

    name: str  # the row's variant name
    batch: int
    call: Callable[[], object]
    includes_transfers: bool = True  # the call copies inputs to the device and outputs back (always on the CPU)
    mode: Callable[[bool], None] | None = None  # switches a process-wide setting (TF32) on for its runs, off after
    rounds: list[np.ndarray] = field(default_factory=list)

    def time_round(self, schedule: Schedule, round_index: int, bar: Any) -> None:
        """Time one round (its share of the runs asked for) and keep the samples."""
        round_name = f" (round {round_index + 1}/{schedule.count})" if schedule.count > 1 else ""
        iters = schedule.iters(round_index)
        task = bar.add_task(f"{self.name} batch {self.batch}{round_name}", total=iters)
        switch = self.mode if round_index > 0 else None  # the first round runs inside its caller's setting
        settle()  # the variant timed before this one: its pool threads asleep before this round starts
        if switch:
            switch(True)
        try:
            self.rounds.append(measure(self.call, warmup=schedule.warmup(round_index), iters=iters,
                                       duration_s=schedule.duration(), min_iters=schedule.min_iters,
                                       on_iteration=lambda: bar.advance(task)))
        finally:
            if switch:
                switch(False)
            bar.remove_task(task)

    def latency(self) -> LatencyStats:
        """The statistics of every round so far (the p50 is the median of the rounds' p50s: timing.from_rounds)."""
        return LatencyStats.from_rounds(self.rounds, self.batch)

    def round_p50s(self) -> list[float] | None:
        """Each round's p50, where there are several."""
        return [float(np.median(r)) for r in self.rounds] if len(self.rounds) > 1 else None

    def round_p99s(self) -> list[float] | None:
        """Each round's p99, where there are several."""
        return [float(np.percentile(r, 99)) for r in self.rounds] if len(self.rounds) > 1 else None

    def report_first_round(self, count: int) -> None:
        """One line once the first of ``count`` rounds is timed."""
        stats = LatencyStats.from_samples(self.rounds[0], self.batch)
        console.note(f"{self.name} batch {self.batch:>3}: p50 {stats.p50_ms:8.2f} ms  p99 {stats.p99_ms:8.2f} ms  "
                     f"{stats.throughput:9.1f} items/s  ({stats.iters} run{'s' if stats.iters != 1 else ''}"
                     f"{', round 1 of ' + str(count) if count > 1 else ''})")


def later_rounds(timed: list[Timed], schedule: Schedule, bar: Any) -> None:
    """Rounds 2..N: per batch, every row in turn (the rows a speedup pairs are timed moments apart), in an order
    rotated by one every other round and reversed in between, so no row is always first, last, or after the same
    one. The bar's first line counts every timed call of these rounds, with the time left; off a terminal its
    heartbeat (console.progress) says the same every few seconds."""
    total = (schedule.count - 1) * len(timed)
    if total <= 0:
        return
    overall = bar.add_task(f"bench rounds 2-{schedule.count} of {schedule.count}", total=total)  # beats off a tty
    for round_index in range(1, schedule.count):
        for batch in sorted({entry.batch for entry in timed}):
            for entry in turn_order([entry for entry in timed if entry.batch == batch], round_index):
                entry.time_round(schedule, round_index, bar)
                bar.advance(overall)
    bar.remove_task(overall)


def turn_order(entries: list[Timed], round_index: int) -> list[Timed]:
    """The order the rows of one batch are timed in, in round ``round_index``."""
    if not entries:
        return []
    shift = (round_index // 2) % len(entries)
    rotated = entries[shift:] + entries[:shift]
    return rotated if round_index % 2 == 0 else rotated[::-1]
