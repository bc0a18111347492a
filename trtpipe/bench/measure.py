"""The rows of one opened variant: its batches timed (first round), its memory read, what its engine says about
its runs, and its agreement with the reference.

Each batch's rows are made once their first round is timed, from its :class:`LatencyStats`; :meth:`Measure.settle`
writes the statistics of every round into them once the later rounds (rounds.py) are done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trtpipe import console
from trtpipe.artifact.description import ArtifactDescription
from trtpipe.bench.agreement import Agreement
from trtpipe.bench.layers import EngineFacts
from trtpipe.bench.memory import MemoryProbe
from trtpipe.bench.rounds import Schedule, Timed, later_rounds
from trtpipe.bench.rows import BenchRow
from trtpipe.bench.samples import Samples, fed
from trtpipe.bench.stability import median_over_rounds
from trtpipe.runtime.base import Backend


class Measure:
    """What measuring every variant of one run shares: the batches asked for, the samples, the round schedule and
    progress bar, the agreement, the engine facts, and every timed call with its row."""

    def __init__(self, batches: tuple[int, ...], iters: int | None, samples: Samples, schedule: Schedule, bar: Any,
                 agreement: Agreement, facts: EngineFacts) -> None:
        self.batches, self.iters, self.samples, self.schedule, self.bar = batches, iters, samples, schedule, bar
        self.agreement, self.facts = agreement, facts
        self.timed: list[tuple[Timed, BenchRow]] = []

    def variant(self, backend: Backend, label: str, memory: MemoryProbe, *,
                description: ArtifactDescription | None = None, extra_host_mb: float = 0.0,
                mode: Callable[[bool], None] | None = None,
                host_alone: dict[int, float | None] | None = None) -> tuple[list[BenchRow], list[np.ndarray]]:
        """Rows of one variant, smallest batch first, timed for the first round (their calls are kept for the later
        ones), and its outputs on the agreement samples (compared with the reference's; the reference itself has
        none yet). Memory is read after each batch, before the agreement run: a row's figure is what loading and
        running up to that batch needed (the advice's memory budget uses it). ``host_alone``: the host figures
        measured in a fresh process (isolated.py), used instead of this process's."""
        batches = self.batches_taken(backend, label)
        rows = []
        for batch in batches:
            entries = self._calls(backend, label, batch, mode)
            for entry in entries:
                entry.time_round(self.schedule, 0, self.bar)
            memory.read()
            made = []
            for entry in entries:
                entry.report_first_round(self.schedule.count)
                row = _row(backend, entry, description)
                row.host_memory_mb = host_alone.get(batch) if host_alone is not None else (
                    None if memory.host_mb is None else memory.host_mb + extra_host_mb)
                row.device_memory_mb = memory.device_mb
                made.append(row)
                self.timed.append((entry, row))
            rows += made
            timed_runs = self.iters or len(entries[0].rounds[0]) * self.schedule.count
            self.facts.record(backend, label, batch, backend.feeds(fed(backend, self.samples.timing[batch])), made,
                              timed_runs)
        if not batches:
            return [], []
        return rows, self.agreement.judge(backend, rows)

    def batches_taken(self, backend: Backend, label: str) -> list[int]:
        """The batch sizes asked for that the backend takes (a static batch: that size only, or none)."""
        asked = self.batches
        fixed, largest = backend.static_batch, backend.max_batch
        batches = sorted(b for b in asked if (fixed is None or b == fixed) and (largest is None or b <= largest))
        above = sorted(b for b in asked if fixed is None and largest is not None and b > largest)
        if above and batches:
            console.note(f"{label} takes batches up to {largest}: batch {', '.join(map(str, above))} is not measured.")
        if not batches and above:
            console.warn(f"{label} takes batches up to {largest}, below every batch size asked for "
                         f"({', '.join(map(str, asked))}); it is skipped.")
        elif not batches:
            console.warn(f"{label} has a static batch of {fixed}, which is not among the batch sizes asked for "
                         f"({', '.join(map(str, asked))}); it is skipped.")
        elif fixed is not None and len(asked) > 1:
            console.note(f"{label} has a static batch of {fixed}: it is measured at that size only.")
        return batches

    def _calls(self, backend: Backend, label: str, batch: int, mode: Callable[[bool], None] | None) -> list[Timed]:
        """The timed calls of one batch: the plain call, and on a GPU the call on inputs already in device memory
        (the latency without host-device copies)."""
        timing = fed(backend, self.samples.timing[batch])
        calls = [Timed(label, batch, backend.bind(timing), mode=mode)]
        resident = backend.device_resident_call(backend.feeds(timing))
        if resident is not None:
            calls.append(Timed(f"{label} [no transfers]", batch, resident, includes_transfers=False, mode=mode))
        return calls

    def later_rounds(self) -> None:
        later_rounds([entry for entry, _ in self.timed], self.schedule, self.bar)

    def runs(self) -> list[dict[str, Any]]:
        """Every timed run's latency in ms, round by round, per row (variant, batch, with or without copies)."""
        return [{"variant": row.variant, "batch": row.batch, "includes_transfers": row.includes_transfers,
                 "rounds": [[float(v) for v in samples] for samples in entry.rounds]} for entry, row in self.timed]

    def settle(self) -> None:
        """Every row with the statistics of all its rounds: each round's p50 and p99 when there are several, and
        with enough of them the medians over rounds and their intervals (the row's verdict is the runner's, once its
        speedup is known: stability.row_verdict)."""
        for entry, row in self.timed:
            row.latency, row.round_p50_ms, row.round_p99_ms = entry.latency(), entry.round_p50s(), entry.round_p99s()
            p50 = median_over_rounds(row.round_p50_ms)
            row.p50_interval = None if p50 is None else p50[1]
            row.tail_ms, row.tail_interval = median_over_rounds(row.round_p99_ms) or (None, None)


def _row(backend: Backend, entry: Timed, description: ArtifactDescription | None) -> BenchRow:
    """A timed call's row, with the statistics of its rounds so far and the facts of its artifact."""
    return BenchRow(variant=entry.name, backend=backend.kind, precision=backend.precision, device=backend.device,
                    batch=entry.batch, latency=entry.latency(), round_p50_ms=entry.round_p50s(),
                    includes_transfers=entry.includes_transfers, **artifact_facts(description))


def artifact_facts(description: ArtifactDescription | None) -> dict[str, Any]:
    """The row fields an artifact file gives (none for a PyTorch row or a peer)."""
    if description is None:
        return {}
    return {
        "artifact": str(description.path), "target": description.target, "simulated": description.simulated,
        "note": description.note, "model_size_mb": description.size_bytes / 1e6,
        "build_seconds": description.build_seconds,
    }
