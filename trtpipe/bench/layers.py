"""What an engine says about its own runs: whether they replayed a CUDA graph, and (``--profile-layers``) each
layer's time from the engine's profiler.

Both are asked through the backend interface (:meth:`Backend.replays_cuda_graph`, :meth:`Backend.profile_layers`):
a backend that cannot tell answers None, and its rows carry nothing.
"""

from __future__ import annotations

from typing import Any

from trtpipe import console
from trtpipe.bench.rows import BenchRow
from trtpipe.runtime.base import Backend

PROFILE_RUNS = 200  # --profile-layers: at most this many profiled runs per variant and batch


class EngineFacts:
    """The layer timings of a run so far (one entry per profiled variant and batch), and whether to take them."""

    def __init__(self, profile: bool) -> None:
        self.profile = profile
        self.layer_timing: list[dict[str, Any]] = []

    def record(self, backend: Backend, label: str, batch: int, feeds: dict[str, Any], rows: list[BenchRow],
               timed_runs: int) -> None:
        """Write into ``rows`` whether their runs replayed a CUDA graph; with --profile-layers, the batch's layer
        times, taken after its timed runs (and after its memory was read) in as many runs as the rows' timed ones
        (at most :data:`PROFILE_RUNS`), on a context of the engine's own."""
        replayed = backend.replays_cuda_graph(feeds)
        if replayed is not None:
            for row in rows:
                row.cuda_graph = replayed
        if not self.profile:
            return
        runs = max(1, min(PROFILE_RUNS, timed_runs))
        layers = backend.profile_layers(feeds, runs)
        if layers is None:
            return
        if not any(e["variant"] == label for e in self.layer_timing):
            console.note(f"{label}: layer timing in {runs} separate runs per batch, on an execution context "
                         "of their own and without a CUDA graph (TensorRT's profiler adds events and a "
                         "synchronisation per layer); the timed rows are not profiled.")
        self.layer_timing.append({"variant": label, "batch": batch, **layers})
