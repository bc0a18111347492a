"""Timed calls split into rounds taken in turn across every variant of a run.

A slow spell of a shared machine (another tenant, a frequency drop) then lands on all variants alike instead of on
the one being timed, and each row's per-round p50s show the spread. The total per row is what was asked for
(``--duration`` seconds or ``--iters`` runs); the first round also pays the warm-up. :func:`timing.measure` times
each round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.bench.options import BenchOptions
from trtpipe.bench.timing import LatencyStats, measure

MIN_ITERS = 5


class Schedule:
    """How the runs asked for are split into rounds: how many, and each round's runs, time and warm-up."""

    def __init__(self, options: BenchOptions) -> None:
        self.options = options
        self.count = min(options.rounds, options.iters) if options.iters else options.rounds
        self.min_iters = max(2, -(-MIN_ITERS // self.count))

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
        """The statistics of every round so far."""
        return LatencyStats.from_samples(np.concatenate(self.rounds), self.batch)

    def round_p50s(self) -> list[float] | None:
        """Each round's p50, where there are several."""
        return [float(np.median(r)) for r in self.rounds] if len(self.rounds) > 1 else None

    def report_first_round(self, count: int) -> None:
        """One line once the first of ``count`` rounds is timed."""
        stats = LatencyStats.from_samples(self.rounds[0], self.batch)
        console.note(f"{self.name} batch {self.batch:>3}: p50 {stats.p50_ms:8.2f} ms  p99 {stats.p99_ms:8.2f} ms  "
                     f"{stats.throughput:9.1f} items/s  ({stats.iters} runs"
                     f"{', round 1 of ' + str(count) if count > 1 else ''})")


def later_rounds(timed: list[Timed], schedule: Schedule, bar: Any) -> None:
    """Rounds 2..N: per batch, every row in turn, the order reversed every other round (no row always follows the
    same one)."""
    for round_index in range(1, schedule.count):
        for batch in sorted({entry.batch for entry in timed}):
            entries = [entry for entry in timed if entry.batch == batch]
            for entry in entries if round_index % 2 == 0 else reversed(entries):
                entry.time_round(schedule, round_index, bar)
